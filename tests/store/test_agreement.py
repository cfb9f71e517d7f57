"""Which failures are a store refusing a write (``writefault``), and what differs between a study
and MLflow (``agreement.compare``): tables over real exceptions, real MLflow run entities and the
study's own trial records. The faults for real (a full tmpfs, a read-only mount, a SIGKILL) are in
tests/scenarios/test_full_disk.py."""

from __future__ import annotations

import errno
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store import writefault as W
from orchestrator.store.agreement import compare, recorded
from orchestrator.store.studyread import StoredStudy, StoredTrial, TrialState

# The messages as each library raises them (SQLite's from sqlite3, PostgreSQL's from psycopg2's
# server errors, the OS's from errno), and errors that are no write failure.
CAUSES = [
    (sqlite3.OperationalError("database or disk is full"), W.DISK_FULL),
    (OSError(errno.ENOSPC, "No space left on device"), W.DISK_FULL),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), W.DISK_FULL),
    (Exception('could not extend file "base/16384/16401": No space left on device\nHINT:  Check free disk space.'),
     W.DISK_FULL),
    (sqlite3.OperationalError("attempt to write a readonly database"), W.READ_ONLY),
    (OSError(errno.EROFS, "Read-only file system"), W.READ_ONLY),
    (Exception("cannot execute INSERT in a read-only transaction"), W.READ_ONLY),
    (PermissionError(errno.EACCES, "Permission denied"), W.DENIED),
    (Exception("permission denied for table trials"), W.DENIED),
    (sqlite3.OperationalError("database is locked"), W.LOCKED),
    (sqlite3.OperationalError("unable to open database file"), W.CANT_OPEN),
    (sqlite3.OperationalError("disk I/O error"), W.IO_ERROR),
    (sqlite3.IntegrityError("UNIQUE constraint failed: trials.number"), None),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), None),
    (FileNotFoundError(errno.ENOENT, "No such file or directory"), None),
    (ValueError("Cannot tell a COMPLETE trial"), None),
]


@pytest.mark.parametrize("exc, expected", CAUSES, ids=[f"{type(e).__name__}:{str(e)[:30]}" for e, _ in CAUSES])
def test_each_write_failure_has_its_cause_and_nothing_else_has_one(exc: BaseException, expected: str | None) -> None:
    assert W.cause(exc) == expected


def _wrapped(inner: BaseException) -> BaseException:
    """``inner`` as SQLAlchemy and then MLflow raise it (``raise ... from``), as the stores do."""
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    try:
        try:
            raise sqlalchemy.exc.OperationalError("INSERT INTO runs ...", {}, inner)
        except sqlalchemy.exc.OperationalError as exc:
            raise MlflowException(str(exc)) from exc
    except MlflowException as outer:
        return outer


def test_a_write_failure_wrapped_by_sqlalchemy_and_mlflow_is_one_line_naming_store_cause_and_driver() -> None:
    found = W.unwritable(W.named("MLflow's store", "sqlite:///mlruns/mlflow.db"),
                         _wrapped(sqlite3.OperationalError("database or disk is full")))
    assert found is not None and found.exit_code == 75
    text = str(found)
    assert "\n" not in text
    assert text == (f"MLflow's store sqlite:///{Path('mlruns/mlflow.db').resolve()} cannot be written: "
                     "the disk is full (database or disk is full)")


def test_the_line_masks_the_password_of_the_store_s_url() -> None:
    found = W.unwritable(W.named("the study's store", "postgresql://sweeper:hunter22@db:5432/optuna"),
                         Exception("permission denied for table trials"))
    assert "hunter22" not in str(found) and "sweeper:***@db" in str(found)


def test_a_server_s_full_disk_is_refused_at_once_not_waited_out_as_an_outage() -> None:
    import sqlalchemy.exc

    from orchestrator.store.outage import Outage

    def full() -> None:
        raise sqlalchemy.exc.OperationalError("INSERT INTO trials ...", {}, Exception(
            'could not extend file "base/16384/16401": No space left on device'))

    def lost() -> None:
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))

    waits: list[float] = []
    outage = Outage("the study's database postgresql://db/optuna", 300, sleep=waits.append)
    with pytest.raises(W.StoreUnwritable, match="the disk is full"):
        outage.call(full)
    assert waits == [] and outage.down_since is None
    calls = iter([lost, lambda: "back"])
    assert outage.call(lambda: next(calls)()) == "back" and waits == [0.5]  # a lost connection is still waited out


def test_the_fault_point_fails_the_nth_write_and_every_one_after_but_no_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator import faultpoints

    monkeypatch.setenv("ORCHESTRATE_FAIL_AT", "after_ask:9,mlflow_write:2")
    monkeypatch.setattr(faultpoints, "_seen", {})
    guard = W.WriteGuard("MLflow's store X", "mlflow_write")

    def log_batch() -> str:
        return "written"

    def search_runs() -> str:
        return "read"
    assert guard.call(log_batch) == "written"
    assert guard.call(search_runs) == "read"
    for _ in range(2):
        with pytest.raises(W.StoreUnwritable, match="MLflow's store X cannot be written: the disk is full"):
            guard.call(log_batch)
    assert guard.call(search_runs) == "read"


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the exception is the value under test
        return exc
    raise AssertionError("nothing raised")


def _sqlite_full(tmp_path: Path) -> None:
    """A real SQLITE_FULL: a database capped at a few pages, written past its cap."""
    con = sqlite3.connect(tmp_path / "capped.db")
    con.execute("CREATE TABLE t (x BLOB)")
    con.execute("PRAGMA max_page_count = 3")
    con.execute("INSERT INTO t VALUES (zeroblob(100000))")


def _sqlite_read_only(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "ro.db").execute("CREATE TABLE t (x)").connection.commit()
    sqlite3.connect(f"file:{tmp_path / 'ro.db'}?mode=ro", uri=True).execute("INSERT INTO t VALUES (1)")


def _duplicate_study(tmp_path: Path, name: str) -> None:
    """Optuna's own DuplicatedStudyError, chained from SQLAlchemy's IntegrityError whose text
    quotes the statement's parameters: the study's name."""
    import optuna

    url = f"sqlite:///{tmp_path}/optuna.db"
    optuna.create_study(study_name=name, storage=url)
    optuna.create_study(study_name=name, storage=url)


def test_codes_and_types_decide_before_words_and_a_user_s_value_is_never_read(tmp_path: Path) -> None:
    """The issue's study named ``diskfull`` (and one named as SQLite's full-disk message): a
    duplicate is no write failure, whatever the parameters quoted in SQLAlchemy's text say; real
    SQLite errors are read by their result codes."""
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    for name in ("diskfull", "database or disk is full", "no space left on device"):
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        exc = _raised(lambda: _duplicate_study(folder, name))
        assert type(exc).__name__ == "DuplicatedStudyError" and W.cause(exc) is None, exc
    wrapped = sqlalchemy.exc.IntegrityError("INSERT INTO studies (study_name) VALUES (?)", ("database or disk is full",),
                                            sqlite3.IntegrityError("UNIQUE constraint failed: studies.study_name"))
    assert "database or disk is full" in str(wrapped) and W.cause(wrapped) is None
    exists = MlflowException("Experiment 'database or disk is full' already exists.", error_code="RESOURCE_ALREADY_EXISTS")
    assert W.cause(exists) is None
    quoted = Exception("Experiment(name='no space left on device') cannot be created [parameters: ('read-only file system',)]")
    assert W.cause(quoted) is None  # no code: the words, but not those inside quotes and brackets
    full = _raised(lambda: _sqlite_full(tmp_path))
    assert full.sqlite_errorcode == 13 and W.cause(full) == W.DISK_FULL  # type: ignore[attr-defined]
    read_only = _raised(lambda: _sqlite_read_only(tmp_path))
    assert read_only.sqlite_errorcode & 0xFF == 8 and W.cause(read_only) == W.READ_ONLY  # type: ignore[attr-defined]
    found = W.unwritable("the study's store X", sqlalchemy.exc.OperationalError("INSERT ...", ("diskfull",), full))
    assert found is not None and str(found) == "the study's store X cannot be written: the disk is full (database or disk is full)"


def test_psycopg2_errors_are_read_by_their_class_and_sqlstate() -> None:
    import psycopg2.errors

    assert W.cause(psycopg2.errors.DiskFull("could not write")) == W.DISK_FULL
    assert W.cause(psycopg2.errors.ReadOnlySqlTransaction("cannot execute")) == W.READ_ONLY
    assert W.cause(psycopg2.errors.UniqueViolation('duplicate key value: Key (study_name)=(diskfull)')) is None
    assert W.cause(psycopg2.OperationalError("server closed the connection unexpectedly")) is None


def test_a_damaged_sqlite_file_is_corrupt_not_a_write_failure(tmp_path: Path) -> None:
    """A real damaged file: its pages overwritten past its schema; its error is SQLITE_CORRUPT."""
    db = tmp_path / "x.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,)] * 200)
    con.commit()
    con.close()
    with open(db, "r+b") as f:
        f.seek(4096 * 2)
        f.write(b"\xff" * 4096 * 5)
    exc = _raised(lambda: sqlite3.connect(db).execute("SELECT sum(length(x)) FROM t").fetchall())
    assert W.corrupt(exc) and W.cause(exc) is None
    found = W.unwritable("MLflow's store sqlite:////p/mlflow.db", exc)
    assert isinstance(found, W.StoreCorrupt) and found.exit_code == 2
    assert str(found).startswith("MLflow's store sqlite:////p/mlflow.db cannot be read: the file is damaged")
    assert "mv /p/mlflow.db /p/mlflow.db.corrupt" in str(found) and "--repair" in str(found)
    assert not W.corrupt(sqlite3.OperationalError("database is locked"))


def test_a_vague_sqlite_error_is_made_precise_by_looking_at_the_folder(tmp_path: Path) -> None:
    # a writable folder with room: nothing to say, SQLite's own words stay
    vague = sqlite3.OperationalError("unable to open database file")
    assert W.unwritable("s", vague, tmp_path).cause == W.CANT_OPEN
    assert W.diagnose(tmp_path) is None


# -- agreement.compare -------------------------------------------------------------------------------

def trial(number: int, status: str = "ok", state: str = "COMPLETE", metrics: dict[str, float] | None = None,
          **attrs: Any) -> StoredTrial:
    user = {"status": status, "metrics": metrics if metrics is not None else {"samples_per_s": 1234.5678},
            "duration_s": 2.5, **attrs}
    if state == "RUNNING":
        user = {}
    return StoredTrial(number, TrialState[state], {"batch_size": 8 * (number + 1)}, None, user, {},
                       datetime(2026, 1, 1), None if state == "RUNNING" else datetime(2026, 1, 1))


def run(number: int, status: str = "FINISHED", tag: str = "ok", metrics: dict[str, float] | None = None,
        params: dict[str, str] | None = None, run_id: str | None = None) -> Any:
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    metrics = metrics if metrics is not None else {"samples_per_s": 1234.568, "duration_s": 2.5}
    params = params if params is not None else {"batch_size": str(8 * (number + 1))}
    info = RunInfo(run_id or f"run{number}", "1", "u", status, 0, None, "active")
    data = RunData([Metric(k, v, 0, 0) for k, v in metrics.items()], [Param(k, v) for k, v in params.items()],
                   [RunTag("status", tag), RunTag("trial_number", str(number))])
    return Run(info, data)


def kinds(trials: list[Any], runs: dict[int, list[Any]], **kw: Any) -> list[tuple[str, int | None]]:
    return [(d.kind, d.number) for d in compare(trials, runs, lambda n: Path("/nonexistent") / str(n), **kw)]


COMPARED = [
    ("they agree", [trial(0)], {0: [run(0)]}, []),
    ("a missing run", [trial(0)], {}, [("no_run", 0)]),
    ("two runs for a trial", [trial(0)], {0: [run(0), run(0, run_id="other")]}, [("duplicate_runs", 0)]),
    ("a run left RUNNING", [trial(0)], {0: [run(0, "RUNNING")]}, [("run_unfinished", 0)]),
    ("a run FAILED for ok", [trial(0)], {0: [run(0, "FAILED")]}, [("run_status", 0)]),
    ("a status tag that differs", [trial(0)], {0: [run(0, tag="oom")]}, [("status_tag", 0)]),
    ("a metric that differs", [trial(0)], {0: [run(0, metrics={"samples_per_s": 1.0, "duration_s": 2.5})]},
     [("metric", 0)]),
    ("a metric MLflow lacks", [trial(0)], {0: [run(0, metrics={"samples_per_s": 1234.568})]}, [("metric", 0)]),
    ("a param that differs", [trial(0)], {0: [run(0, params={"batch_size": "16"})]}, [("param", 0)]),
    ("a run of no trial", [trial(0)], {0: [run(0)], 7: [run(7)]}, [("orphan_run", 7)]),
    ("a trial cut off", [trial(0), trial(1, state="RUNNING")], {0: [run(0)], 1: [run(1, "RUNNING")]},
     [("cut_off", 1)]),
    ("a NaN metric (diverged) is not logged, so not compared",
     [trial(0, "diverged", "FAIL", {"loss": float("nan")})], {0: [run(0, "FAILED", "diverged", {"duration_s": 2.5})]},
     []),
    ("an interrupted trial's run is KILLED", [trial(0, "interrupted", "FAIL", {})],
     {0: [run(0, "KILLED", "interrupted", {"duration_s": 2.5})]}, []),
]


@pytest.mark.parametrize("name, trials, runs, expected", COMPARED, ids=[c[0] for c in COMPARED])
def test_compare_finds_each_difference_and_only_it(name: str, trials: list[Any], runs: dict[int, list[Any]],
                                                   expected: list[tuple[str, int | None]]) -> None:
    assert kinds(trials, runs) == expected


def test_a_trial_in_flight_is_not_compared_and_a_folder_of_no_trial_is_a_difference(tmp_path: Path) -> None:
    trials = [trial(0), trial(1, state="RUNNING"), trial(2)]
    assert kinds(trials, {0: [run(0)]}, in_flight={1, 2}) == []
    found = compare([trial(0)], {0: [run(0)]}, lambda n: tmp_path, folders={0: tmp_path / "a", 3: tmp_path / "b"})
    assert [(d.kind, d.repairable) for d in found] == [("folder", False)]
    assert str(tmp_path / "b") in found[0].text


def test_a_trial_whose_folder_is_missing_is_a_difference_only_where_folders_are_compared(tmp_path: Path) -> None:
    """The issue's check that said "agree" with 0 of 2 folders: a trial that ran names its folder."""
    (tmp_path / "trial-0000").mkdir()
    trials = [trial(0, trial_dir=str(tmp_path / "trial-0000")),
              trial(1, trial_dir=str(tmp_path / "trial-0001"), mlflow_run_id="run-1"),
              trial(2, "skipped")]  # skipped: no process, no folder
    runs = {n: [run(n, tag=t.user_attrs["status"])] for n, t in enumerate(trials)}
    held = {"run-1": {"config.json", "result.json", "trial.log"}}
    found = compare(trials, runs, lambda n: tmp_path / f"trial-{n:04d}", folders={0: tmp_path / "trial-0000"},
                    artifacts=lambda run_id, sub: held.get(run_id, set()) if sub is None else set())
    assert [(d.kind, d.number, d.repairable) for d in found] == [("no_folder", 1, True)]  # from its run (--repair)
    assert f"trial 1: its folder {tmp_path / 'trial-0001'} is missing" in found[0].text
    assert "which --repair writes back" in found[0].text
    held.clear()  # the run's copies gone too: nothing to write it back from, and no repair offered
    lost = compare(trials, runs, lambda n: tmp_path / f"trial-{n:04d}", folders={0: tmp_path / "trial-0000"},
                   artifacts=lambda run_id, sub: held.get(run_id, set()))
    assert [(d.kind, d.number, d.repairable) for d in lost] == [("lost_folder", 1, False)]
    assert lost[0].text.endswith("and its MLflow run holds no copy of them)")
    assert compare(trials, runs, lambda n: tmp_path / f"trial-{n:04d}", folders={0: tmp_path / "trial-0000"},
                   artifacts=lambda run_id, sub: held.get(run_id, set()), lost={1}) == []  # check --repair's record
    assert compare(trials, runs, lambda n: tmp_path) == []  # the sweep's converge does not look

    def failing(run_id: str, sub: str | None) -> set[str]:
        raise OSError(5, "Input/output error")
    unlisted = compare(trials, runs, lambda n: tmp_path / f"trial-{n:04d}", folders={0: tmp_path / "trial-0000"},
                       artifacts=failing)  # it was "none lacking": check could say the stores agree
    assert [(d.kind, d.number, d.repairable) for d in unlisted] == [("unlisted", 0, False), ("unlisted", 1, False)]
    assert unlisted[1].text == "trial 1: its MLflow run's files could not be listed (OSError: [Errno 5] Input/output error); " \
        "check again", unlisted[1].text
    # its record naming no run (made after the trial ended, on a loaded machine): its run by its number
    unnamed = [trial(0, trial_dir=str(tmp_path / "trial-0000")), trial(1, trial_dir=str(tmp_path / "trial-0001")),
               trial(2, "skipped")]
    found = compare(unnamed, runs, lambda n: tmp_path / f"trial-{n:04d}", folders={0: tmp_path / "trial-0000"},
                    artifacts=lambda run_id, sub: {"run1": {"config.json", "result.json"}}.get(run_id, set()))
    assert [(d.kind, d.number) for d in found] == [("no_folder", 1)], found  # was "lost_folder": no copy known


def test_a_trial_that_ran_on_another_host_keeps_its_folder_there(tmp_path: Path) -> None:
    """The PostgreSQL tour: check on host B read host A's trial folders (absolute paths on A's disk)
    as missing, and --repair wrote them at those paths on B. A trial recorded on another host is
    not looked for here; one that ran here still is."""
    import socket

    trials = [trial(0, trial_dir=str(tmp_path / "a" / "trial-0000"), host="another-host", mlflow_run_id="run-0"),
              trial(1, trial_dir=str(tmp_path / "b" / "trial-0001"), host=socket.gethostname(), mlflow_run_id="run-1")]
    runs = {n: [run(n)] for n in range(2)}
    held = {"run-0": {"config.json"}, "run-1": {"config.json"}}
    found = compare(trials, runs, lambda n: tmp_path / f"trial-{n:04d}", folders={},
                    artifacts=lambda run_id, sub: held.get(run_id, set()) if sub is None else set())
    assert [(d.kind, d.number) for d in found] == [("no_folder", 1)], [d.text for d in found]


def test_files_the_trial_folder_holds_and_mlflow_lacks_are_a_difference(tmp_path: Path) -> None:
    folder = tmp_path / "trial-0000"
    folder.mkdir()
    for name in ("trial.log", "result.json"):
        (folder / name).write_text("{}")
    held = {None: {"trial.log"}}
    found = compare([trial(0, trial_dir=str(folder))], {0: [run(0)]}, lambda n: folder,
                    artifacts=lambda run_id, sub: held[sub])
    assert [(d.kind, d.text) for d in found] == [("files", "trial 0: MLflow lacks its file(s) result.json")]


def test_the_mark_matches_only_the_same_store_and_number_of_trials(tmp_path: Path) -> None:
    from orchestrator.redact import shown

    uri = "https://user:pw@mlflow.example"
    mark = {"tracking_uri": shown(uri), "parent_run_id": "p", "trials": 2}
    study = StoredStudy("s", ("maximize",), {"orchestrate.recorded": mark}, [trial(0), trial(1)])
    assert recorded(study, uri)  # a server: the mark alone decides
    assert not recorded(study, "https://other.example")
    assert not recorded(StoredStudy("s", ("maximize",), {"orchestrate.recorded": mark}, [trial(0)]), uri)
    assert not recorded(StoredStudy("s", ("maximize",), {}, [trial(0), trial(1)]), uri)
    # an SQLite store: the store must still hold that many finished runs (here: none, no file)
    sqlite = f"sqlite:///{tmp_path / 'mlflow.db'}"
    marked = StoredStudy("s", ("maximize",), {"orchestrate.recorded": {**mark, "tracking_uri": sqlite}},
                         [trial(0), trial(1)])
    assert not recorded(marked, sqlite)


def test_files_gone_from_a_folder_that_is_there_are_the_ones_its_run_holds(tmp_path: Path) -> None:
    """``lacking_files``: only what MLflow can give back is lacking (a trial cut off before its
    result has none in its run either); a second process's files are under ``repeat-2/``."""
    from orchestrator.store.agreement import lacking_files

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "repeat-2").mkdir()
    (tmp_path / "repeat-2" / "trial.log").write_text("")
    held = {None: {"config.json", "result.json", "trial.log"}, "repeat-2": {"trial.log", "result.json"}}
    assert lacking_files(tmp_path, 1, lambda folder: held[folder]) == ["trial.log", "result.json"]
    assert lacking_files(tmp_path, 2, lambda folder: held[folder]) == ["trial.log", "result.json", "repeat-2/result.json"]
    assert lacking_files(tmp_path, 1, lambda folder: {"config.json"}) == []
