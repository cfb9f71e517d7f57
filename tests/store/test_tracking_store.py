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
