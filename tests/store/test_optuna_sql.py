"""orchestrator/store/optuna_sql.py: each query against tables the installed Optuna wrote, checked
against what Optuna's own API says of the same study: on SQLite for every query, and on a real
PostgreSQL server for the two that run there (``silent_trial_ids`` in ``recovery``,
``running_heartbeats`` in ``report/check``)."""

from __future__ import annotations

import datetime
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store import optuna_sql as sql
from orchestrator.store.optuna_internals import storage_of, study_id, trial_id

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning",
                                        "ignore:Heartbeat of storage is supposed to be used")


def written(url: str) -> Any:
    """Two studies in one database; ``mixed`` holds every trial state, each kind of parameter, an
    infinite value, user and system attributes (in an order unlike their keys')."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    other = optuna.create_study(study_name="other", storage=url, direction="minimize")
    other.tell(other.ask(), 1.0)
    study = optuna.create_study(study_name="mixed", storage=url, directions=["maximize", "minimize"])
    study.set_user_attr("zeta", {"a": [1, None]})
    study.set_user_attr("alpha", "first? no: second")
    dists = {"dtype": CategoricalDistribution(["float32", "bfloat16"]), "batch": IntDistribution(1, 64, log=True),
             "lr": FloatDistribution(1e-4, 1e-1, log=True)}
    for i in range(3):
        t = study.ask(dists)
        t.set_user_attr("z", i)
        t.set_user_attr("a", {"i": i})
        t.set_constraint("fits", -1.0)
        study.tell(t, [float(i), float("inf") if i == 2 else 0.5])
    t = study.ask(dists)
    study.tell(t, state=TrialState.FAIL)
    study.tell(study.ask(dists), state=TrialState.PRUNED)
    study.ask()  # RUNNING, before its parameters
    study.enqueue_trial({"batch": 8})  # WAITING
    return study


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, Any, sqlite3.Connection]:
    path = tmp_path / "optuna.db"
    study = written(f"sqlite:///{path}")
    con = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    yield path, study, con
    con.close()


def test_trial_counts_are_optunas_by_state(db: tuple[Path, Any, sqlite3.Connection], tmp_path: Path) -> None:
    path, study, _ = db
    by_state: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        by_state[t.state.name] = by_state.get(t.state.name, 0) + 1
    assert sql.trial_counts(path, "mixed") == by_state == {"COMPLETE": 3, "FAIL": 1, "PRUNED": 1, "RUNNING": 1,
                                                            "WAITING": 1}
    assert sql.trial_counts(path, "other") == {"COMPLETE": 1}
    assert sql.trial_counts(path, "absent") == {}
    assert sql.trial_counts(tmp_path / "no.db", "mixed") == {} and not (tmp_path / "no.db").exists()
    (tmp_path / "notes.db").write_text("not a database\n" * 100)
    assert sql.trial_counts(tmp_path / "notes.db", "mixed") is None
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert sql.trial_counts(empty, "mixed") is None  # no Optuna tables: unreadable, nothing created
    assert sqlite3.connect(empty).execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_tables_and_schema_revision_are_optunas(db: tuple[Path, Any, sqlite3.Connection]) -> None:
    import optuna
    from optuna.storages._rdb import models

    path, _, con = db
    assert set(models.BaseModel.metadata.tables) <= sql.table_names(con)
    revision = sql.schema_revision(con)
    assert revision == optuna.storages.RDBStorage(f"sqlite:///{path}").get_current_version()
    assert revision in sql.SCHEMAS


def test_study_id_directions_and_user_attrs(db: tuple[Path, Any, sqlite3.Connection]) -> None:
    _, study, con = db
    sid = sql.study_id_of(con, "mixed")
    assert sid == study_id(study) and sql.study_id_of(con, "other") not in (None, sid)
    assert sql.study_id_of(con, "absent") is None
    assert sql.directions(con, sid) == [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    attrs = sql.study_user_attributes(con, sid)
    assert [k for k, _ in attrs] == ["zeta", "alpha"]  # the order they were set in
    assert {k: json.loads(v) for k, v in attrs} == study.user_attrs


def test_trials_and_their_params_values_and_attrs(db: tuple[Path, Any, sqlite3.Connection]) -> None:
    _, study, con = db
    sid = study_id(study)
    frozen = study.get_trials(deepcopy=False)
    ids = {trial_id(t): t for t in frozen}
    rows = sql.trials(con, sid)
    assert [(r[0], r[1], r[2]) for r in rows] == [(trial_id(t), t.number, t.state.name) for t in frozen]
    assert [(r[3], r[4]) for r in rows] == [
        (str(t.datetime_start) if t.datetime_start else None, str(t.datetime_complete) if t.datetime_complete else None)
        for t in frozen]

    params: dict[int, list[tuple[str, float]]] = {}
    for tid, name, value, dist in sql.trial_params(con, sid):
        params.setdefault(tid, []).append((name, value))
        assert json.loads(dist)["name"] == type(ids[tid].distributions[name]).__name__
    assert params == {tid: [(n, t.distributions[n].to_internal_repr(v)) for n, v in t.params.items()]
                      for tid, t in ids.items() if t.params}

    values: dict[int, dict[int, float]] = {}
    for tid, objective, value, kind in sql.trial_values(con, sid):
        values.setdefault(tid, {})[objective] = {"INF_POS": float("inf"), "INF_NEG": float("-inf")}.get(kind, value)
    assert values == {tid: dict(enumerate(t.values)) for tid, t in ids.items() if t.values is not None}
    assert any(kind == "INF_POS" and value is None for _, _, value, kind in sql.trial_values(con, sid))

    for read, attr in ((sql.trial_user_attributes, "user_attrs"), (sql.trial_system_attributes, "system_attrs")):
        got: dict[int, dict[str, Any]] = {}
        for tid, key, value_json in read(con, sid):
            got.setdefault(tid, {})[key] = json.loads(value_json)
        assert got == {tid: getattr(t, attr) for tid, t in ids.items() if getattr(t, attr)}, attr
    assert ["z", "a"] == [k for tid, k, _ in sql.trial_user_attributes(con, sid) if tid == trial_id(frozen[0])]  # as set


def beaten_study(url: str) -> tuple[Any, int, Any, Any]:
    """A study on a storage with heartbeats: one RUNNING trial with a heartbeat, one without, one
    told (with a heartbeat). Returns the storage, the study's id and the two RUNNING trials."""
    import optuna

    rdb = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(study_name="beats", storage=rdb, direction="maximize")
    beaten, silent, told = study.ask(), study.ask(), study.ask()
    for t in (beaten, told):
        storage_of(study).record_heartbeat(trial_id(t))
    study.tell(told, 1.0)
    return rdb, study_id(study), beaten, silent


def test_silent_trial_ids_on_sqlite(tmp_path: Path) -> None:
    rdb, sid, _, silent = beaten_study(f"sqlite:///{tmp_path}/beats.db")
    assert sql.silent_trial_ids(rdb.engine, sid) == {trial_id(silent)}
    assert sql.silent_trial_ids(rdb.engine, sid + 1) == set()  # another study's: none


def test_silent_trial_ids_on_postgresql(postgres_url: str) -> None:
    rdb, sid, _, silent = beaten_study(postgres_url)
    assert sql.silent_trial_ids(rdb.engine, sid) == {trial_id(silent)}
    rdb.engine.dispose()


def test_running_heartbeats_on_postgresql(postgres_url: str) -> None:
    """As ``report/check`` reads them: on a connection in UTC, the server's clock, and each
    RUNNING trial's last heartbeat (None: never) and start."""
    import sqlalchemy

    rdb, _, beaten, silent = beaten_study(postgres_url)
    engine = sqlalchemy.create_engine(postgres_url, connect_args={"options": "-c timezone=UTC"},
                                      poolclass=sqlalchemy.pool.NullPool)
    time.sleep(0.05)
    server_now, rows = sql.running_heartbeats(engine, "beats")
    utc_now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert abs((server_now - utc_now).total_seconds()) < 5
    by_number = {n: (beat, start) for n, beat, start in rows}
    assert set(by_number) == {beaten.number, silent.number}  # the told trial is not RUNNING
    beat, start = by_number[beaten.number]
    assert beat is not None and 0 <= (server_now - beat).total_seconds() < 5
    assert by_number[silent.number][0] is None and by_number[silent.number][1] is not None
    assert sql.running_heartbeats(engine, "absent")[1] == []
    engine.dispose()
    rdb.engine.dispose()
