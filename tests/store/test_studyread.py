"""orchestrator/store/studyread.py against Optuna itself: studies written by Optuna 5 into SQLite, read
by the module's own reader and by ``optuna.load_study(...).get_trials()``, must agree field by
field (every trial state, categorical/int/float/log parameters, infinite objective values,
constraints in both of Optuna's formats, multi-objective studies). Other storages and other
schema revisions go through Optuna; nothing is ever created."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.errors import StudyError
from orchestrator.store.studyread import SCHEMAS, StoredTrial, TrialState, read_study

FIELDS = ("number", "params", "values", "user_attrs", "system_attrs", "constraints", "datetime_start",
          "datetime_complete")


def dists() -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    return {"dtype": CategoricalDistribution(["float32", "bfloat16"]),
            "mixed": CategoricalDistribution([True, None, 16, 0.5, "x"]),
            "batch_size": IntDistribution(1, 4096, log=True),
            "layers": IntDistribution(2, 12, step=2),
            "lr": FloatDistribution(1e-5, 1e-1, log=True),
            "dropout": FloatDistribution(0.0, 0.5, step=0.1),
            "x": FloatDistribution(-1.0, 1.0)}


def every_state(url: str) -> Any:
    """A single-objective study holding each trial state and each way Optuna stores a value."""
    import optuna
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial

    study = optuna.create_study(study_name="every_state", storage=url, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=3))
    study.set_user_attr("orchestrate.fingerprint", {"device": "cpu", "space": {"dtype": ["float32", "bfloat16"]}})
    study.set_user_attr("orchestrate.uid", "0123abcd")
    for i in range(4):  # measured, feasible or not by the memory budget
        t = study.ask(dists())
        t.set_user_attr("status", "ok")
        t.set_user_attr("metrics", {"samples_per_s": 100.0 + i, "peak_memory_gib": 0.5 * i, "note": None})
        t.set_constraint("fits_in_memory", -1.0)
        t.set_constraint("peak_memory_gib", 0.5 * i - 1.0)
        study.tell(t, 100.0 + i)
    t = study.ask(dists())  # out of memory: infeasible, no value
    t.set_user_attr("status", "oom")
    t.set_user_attr("detail", "RuntimeError: DefaultCPUAllocator: can't allocate memory — ünïcode")
    t.set_constraint("fits_in_memory", 1.0)
    study.tell(t, state=OptunaState.PRUNED)
    t = study.ask(dists())
    t.set_user_attr("status", "error")
    study.tell(t, state=OptunaState.FAIL)
    study.tell(study.ask(), state=OptunaState.FAIL)  # killed before its parameters were suggested
    for value in (float("inf"), float("-inf")):  # stored as NULL with value_type INF_POS / INF_NEG
        study.tell(study.ask(dists()), value)
    t = study.ask(dists())  # constraints in Optuna's older format: one list
    study._storage.set_trial_system_attr(t._trial_id, "constraints", [0.5, -1.0])
    study.tell(t, 1.0)
    study.add_trial(create_trial(params={"dtype": "bfloat16", "layers": 4}, value=7.0,
                                 distributions={k: v for k, v in dists().items() if k in ("dtype", "layers")},
                                 user_attrs={"status": "ok", "nested": {"a": [1, 2.5, None, "b"]}},
                                 system_attrs={"fixed_params": {"dtype": "bfloat16"}}))
    study.ask(dists())  # RUNNING
    study.enqueue_trial({"dtype": "float32", "layers": 6})  # WAITING
    return study


def multi_objective(url: str) -> Any:
    import optuna
    from optuna.trial import TrialState as OptunaState

    study = optuna.create_study(study_name="pareto", storage=url, directions=["maximize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=5))
    for i in range(6):
        t = study.ask(dists())
        t.set_user_attr("status", "ok")
        t.set_constraint("fits_in_memory", -1.0)
        study.tell(t, [10.0 * i, (i - 3) ** 2 + 0.25])
    t = study.ask(dists())
    t.set_constraint("fits_in_memory", 1.0)
    t.set_user_attr("status", "oom")
    study.tell(t, state=OptunaState.PRUNED)
    return study


def assert_same_trials(stored: list[StoredTrial], frozen: list[Any]) -> None:
    assert len(stored) == len(frozen)
    for s, f in zip(stored, frozen):
        assert isinstance(s, StoredTrial)
        assert s.state.name == f.state.name and s.state.is_finished() == f.state.is_finished(), s.number
        for name in FIELDS:
            assert getattr(s, name) == getattr(f, name), (s.number, name, getattr(s, name), getattr(f, name))
        assert list(s.params) == list(f.params), s.number  # the order they were suggested in
        assert [type(v) for v in s.params.values()] == [type(v) for v in f.params.values()], s.number


@pytest.fixture
def stores(tmp_path: Path) -> tuple[str, Any, Any]:
    url = f"sqlite:///{tmp_path}/optuna.db"
    return url, every_state(url), multi_objective(url)


def test_every_state_and_parameter_kind_reads_as_optuna_reads_it(stores: tuple[str, Any, Any]) -> None:
    import optuna

    url, _, _ = stores
    study = read_study(url, "every_state")
    frozen = optuna.load_study(study_name="every_state", storage=url).get_trials()
    assert_same_trials(study.trials, frozen)
    assert {t.state for t in study.trials} == set(TrialState)  # every state is in the study
    assert study.name == "every_state" and study.directions == ("maximize",)
    assert study.user_attrs == optuna.load_study(study_name="every_state", storage=url).user_attrs
    assert [t.values for t in study.trials if t.values and abs(t.values[0]) == float("inf")] == [
        [float("inf")], [float("-inf")]]
    old = next(t for t in study.trials if "constraints" in t.system_attrs)
    assert old.constraints == {"0": 0.5, "1": -1.0}
    assert study.trials[0].constraints == {"fits_in_memory": -1.0, "peak_memory_gib": -1.0}


def test_multi_objective_study_reads_as_optuna_reads_it(stores: tuple[str, Any, Any]) -> None:
    import optuna

    url, _, _ = stores
    study = read_study(url, "pareto")
    assert study.directions == ("maximize", "minimize")
    assert_same_trials(study.trials, optuna.load_study(study_name="pareto", storage=url).get_trials())


@pytest.mark.parametrize("name, metrics", [
    ("every_state", (("samples_per_s", "maximize"),)),
    ("pareto", (("samples_per_s", "maximize"), ("peak_memory_gib", "minimize"))),
])
def test_records_rank_the_read_study_as_they_rank_optunas(stores: tuple[str, Any, Any], name: str,
                                                          metrics: tuple[tuple[str, str], ...]) -> None:
    """The orchestrator's own rules (results, feasibility, the best or the Pareto front) give the
    same trials over either reading."""
    import optuna

    from orchestrator.store.records import best_trials, is_feasible, rank, results_of

    url, _, _ = stores
    spec = SimpleNamespace(objective=SimpleNamespace(metrics=metrics))
    study = read_study(url, name)
    optuna_study = optuna.load_study(study_name=name, storage=url)
    ours, theirs = results_of(study.trials), results_of(optuna_study.get_trials())
    assert [t.number for t in ours] == [t.number for t in theirs] and ours
    assert [is_feasible(t) for t in study.trials] == [is_feasible(t) for t in optuna_study.get_trials()]
    assert [t.number for t in rank(ours, spec)] == [t.number for t in rank(theirs, spec)] != []
    assert [t.number for t in best_trials(study, spec)] == [t.number for t in best_trials(optuna_study, spec)]


@pytest.mark.slow
def test_a_sweeps_own_study_reads_as_optuna_reads_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The study the real ``orchestrate`` wrote for tests/report/test_report.py (statuses, metrics, the
    fingerprint and the parent run's id as the sweep sets them)."""
    import optuna

    from report.test_report import finished_sweep

    url = f"sqlite:///{finished_sweep(tmp_path_factory)}/mlruns/optuna.db"
    study = read_study(url, "tiny_report")
    optuna_study = optuna.load_study(study_name="tiny_report", storage=url)
    assert_same_trials(study.trials, optuna_study.get_trials())
    assert study.user_attrs == optuna_study.user_attrs and "orchestrate.fingerprint" in study.user_attrs


def test_a_missing_file_study_or_table_is_none_and_nothing_is_created(stores: tuple[str, Any, Any],
                                                                      tmp_path: Path) -> None:
    url, _, _ = stores
    assert read_study(url, "no_such_study") is None
    assert read_study(f"sqlite:///{tmp_path}/absent/optuna.db", "every_state") is None
    assert not (tmp_path / "absent").exists()
    empty = tmp_path / "empty.db"
    empty.touch()  # a file SQLite opens, without Optuna's tables: Optuna would create them here
    assert read_study(f"sqlite:///{empty}", "every_state") is None and empty.stat().st_size == 0


def test_a_relative_url_is_read_from_the_working_directory(stores: tuple[str, Any, Any], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert read_study("sqlite:///optuna.db", "pareto").directions == ("maximize", "minimize")


def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.db"
    bad.write_text("these are my notes, not a database\n" * 200)
    with pytest.raises(StudyError, match=rf"^storage sqlite:///{bad}: file is not a database$"):
        read_study(f"sqlite:///{bad}", "every_state")


def test_another_schema_revision_goes_through_optuna(stores: tuple[str, Any, Any], tmp_path: Path) -> None:
    """An SQLite file of an Optuna this module does not know: Optuna itself answers (here: the
    revision does not exist, as for a file written by a newer Optuna), in one line."""
    url, _, _ = stores
    other = tmp_path / "other.db"
    shutil.copyfile(url[len("sqlite:///"):], other)
    con = sqlite3.connect(other)
    with con:
        con.execute("UPDATE alembic_version SET version_num = 'v9.9.9.z'")
    con.close()
    assert "v9.9.9.z" not in SCHEMAS
    with pytest.raises(StudyError, match=rf"^storage sqlite:///{other}: ") as raised:
        read_study(f"sqlite:///{other}", "every_state")
    assert "\n" not in str(raised.value)


def test_sqlite_reading_does_not_import_optuna_or_sqlalchemy(stores: tuple[str, Any, Any]) -> None:
    url, _, _ = stores
    code = ("import sys; from orchestrator.store.studyread import read_study; "
            f"s = read_study({url!r}, 'every_state'); "
            "print(len(s.trials), sorted(m for m in ('optuna', 'sqlalchemy', 'alembic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["13", "[]"]


def test_a_postgresql_study_is_read_through_optuna_and_its_password_never_shown(postgres: Any) -> None:
    """A role with a password: the study reads as Optuna reads it; an error names the URL with the
    password masked."""
    import optuna

    secret = postgres.new_database_with_password("studyread", "pa55-w0rd")
    multi_objective(secret)
    study = read_study(secret, "pareto")
    assert_same_trials_or_frozen(study.trials, optuna.load_study(study_name="pareto", storage=secret).get_trials())
    assert study.directions == ("maximize", "minimize") and read_study(secret, "absent") is None
    wrong = secret.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(StudyError) as raised:
        read_study(wrong, "pareto")
    text = str(raised.value)
    assert "pa55-w0rd" not in text and text.startswith(f"storage {wrong.replace('pa55-w0rd', '***')}: ")
    assert "no_such_database" in text and "\n" not in text


def assert_same_trials_or_frozen(read: list[Any], frozen: list[Any]) -> None:
    """Through Optuna the trials are Optuna's own."""
    assert [json.dumps([t.number, t.state.name, t.params, t.values, t.user_attrs]) for t in read] == \
        [json.dumps([t.number, t.state.name, t.params, t.values, t.user_attrs]) for t in frozen]


def test_the_states_are_optunas() -> None:
    """``TrialState`` stands in for Optuna's own enum (whose import would cost the reader its
    speed): the same names, values and finished states, so that a new Optuna state fails here."""
    from optuna.trial import TrialState as OptunaState

    assert [(s.name, s.value, s.is_finished()) for s in TrialState] == [
        (s.name, s.value, s.is_finished()) for s in OptunaState]
