"""A new MLflow store is a copy of the first one this mlflow version built (MLflow's own build runs
every schema migration: seconds on a small CPU, for every new project). Real MLflow, real SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.store.tracking import Tracker, _schema_head, template_path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def open_tracker(project: Path, monkeypatch: pytest.MonkeyPatch, experiment: str = "exp") -> Tracker:
    project.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(project)
    (project / "mlruns").mkdir(exist_ok=True)
    return Tracker("sqlite:///mlruns/mlflow.db", experiment)


def default_experiment(db: Path) -> tuple[str, str]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT name, artifact_location FROM experiments WHERE experiment_id = 0").fetchone()
    finally:
        con.close()


def test_the_first_store_is_kept_and_the_next_ones_are_copies_that_work(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = open_tracker(tmp_path / "first", monkeypatch)
    template = template_path()
    assert template.is_relative_to(cache) and template.is_file()
    second = open_tracker(tmp_path / "second project", monkeypatch, "other")
    db = tmp_path / "second project" / "mlruns" / "mlflow.db"
    # written as MLflow writes it from the working directory, not where the template was made
    assert default_experiment(db) == ("Default", str(tmp_path / "second project" / "mlruns" / "0"))
    assert default_experiment(tmp_path / "first" / "mlruns" / "mlflow.db")[1] == str(tmp_path / "first" / "mlruns" / "0")
    con = sqlite3.connect(db)
    assert con.execute("SELECT version_num FROM alembic_version").fetchone() == (_schema_head(),)
    con.close()
    for tracker in (first, second):  # both stores take and give back a run
        parent = tracker.open_parent("s", "sqlite:///x.db", Path(__file__), "uid")
        run = tracker.start_trial(0, {"batch_size": 8}, {})
        tracker.finish_trial(run, "ok", {"samples_per_s": 12.5}, {}, [])
        got = tracker.client.get_run(run)
        assert got.data.metrics["samples_per_s"] == 12.5 and got.data.params["batch_size"] == "8"
        assert got.data.tags["mlflow.parentRunId"] == parent
    assert len(second.client.search_experiments()) == 2  # Default and its own: nothing of the first's


def test_a_template_that_cannot_be_trusted_is_rebuilt(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = template_path()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"not a database\n" * 100)
    open_tracker(tmp_path / "a", monkeypatch)
    con = sqlite3.connect(template)  # MLflow built the store, and its build replaced the junk
    assert con.execute("SELECT version_num FROM alembic_version").fetchone() == (_schema_head(),)
    con.close()
    assert not [p for p in (tmp_path / "a" / "mlruns").iterdir() if p.name.startswith(".mlflow.db")]
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # no cache to keep a template in: still a store
    tracker = open_tracker(tmp_path / "b", monkeypatch)
    assert tracker.client.get_experiment(tracker.experiment_id).name == "exp"


def test_a_long_trial_log_keeps_its_start_and_end_in_mlflow_and_whole_in_its_folder(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script printing 100 KB a step left an 82 MB log in its folder and the same again in its
    MLflow run. The run now keeps at most ``logcopy.LIMIT`` bytes: the log's first MiB, a line
    naming what was left out and where the whole log is, and its last bytes; the folder keeps
    the log whole, and a short log is copied as it is."""
    from orchestrator.store import logcopy

    tracker = open_tracker(tmp_path / "p", monkeypatch)
    tracker.open_parent("s", "sqlite:///x.db", Path(__file__), "uid")
    folder = tmp_path / "p" / "trial-0000"
    folder.mkdir()
    log = folder / "trial.log"
    middle = b"step output that nobody reads\n" * ((logcopy.LIMIT + 3 * 2**20) // 30)
    log.write_bytes(b"FIRST LINE: the script's settings\n" + middle + b"LAST LINE: RuntimeError: it failed\n")
    short = folder / "result.json"
    short.write_text('{"ok": true}\n')
    run = tracker.start_trial(0, {"batch_size": 8}, {})
    tracker.finish_trial(run, "error", {}, {}, [(log, None), (short, None)])

    got = Path(tracker.client.download_artifacts(run, "trial.log", str(tmp_path / "down")))
    data = got.read_bytes()
    assert len(data) <= logcopy.LIMIT + 200 and log.stat().st_size > logcopy.LIMIT + 2**20  # the folder's is whole
    assert data.startswith(b"FIRST LINE: the script's settings\n") and data.endswith(b"LAST LINE: RuntimeError: it failed\n")
    cut = log.stat().st_size - logcopy.LIMIT
    assert f"[orchestrate: {cut:,} bytes of this log left out here; the whole log ({log.stat().st_size:,} bytes) is {log}]".encode() in data
    assert Path(tracker.client.download_artifacts(run, "result.json", str(tmp_path / "down"))).read_text() == '{"ok": true}\n'
