"""``store.moved``: which recorded paths are the project's own folder elsewhere (rewritten) and
which are the user's choice (never rewritten); real folders, links and trial folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.store.moved import artifacts_elsewhere, trial_dir


@pytest.fixture
def store(tmp_path: Path) -> str:
    (tmp_path / "new" / "mlruns").mkdir(parents=True)
    return f"sqlite:///{tmp_path / 'new' / 'mlruns' / 'mlflow.db'}"


def test_the_stores_own_folder_elsewhere_is_found_and_a_chosen_location_is_not(tmp_path: Path, store: str) -> None:
    old = tmp_path / "old" / "mlruns"
    assert artifacts_elsewhere(store, "exp", (old / "exp").as_uri()) == str(old)
    assert artifacts_elsewhere(store, "my exp", (old / "my exp").as_uri()) == str(old)  # percent-encoded
    here = tmp_path / "new" / "mlruns"
    for location in ((here / "exp").as_uri(),  # where it is
                     (tmp_path / "artifacts" / "exp").as_uri(),  # a folder of another name: chosen
                     (old / "other").as_uri(),  # another experiment's folder
                     "s3://bucket/mlruns/exp", "mlflow-artifacts:/exp", "", None):
        assert artifacts_elsewhere(store, "exp", location) is None, location
    assert artifacts_elsewhere("postgresql://u@h/db", "exp", (old / "exp").as_uri()) is None


def test_a_link_to_the_same_folder_is_not_a_move(tmp_path: Path, store: str) -> None:
    os.symlink(tmp_path / "new", tmp_path / "link")
    assert artifacts_elsewhere(store, "exp", (tmp_path / "link" / "mlruns" / "exp").as_uri()) is None


def test_a_trial_folder_gone_from_its_path_is_found_under_this_folders_mlruns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    recorded = str(tmp_path / "old" / "mlruns" / ".trials" / "s-1234abcd" / "trial-0003")
    assert trial_dir(recorded) == recorded  # not here either: as recorded (check says it is missing)
    here = tmp_path / "mlruns" / ".trials" / "s-1234abcd" / "trial-0003"
    here.mkdir(parents=True)
    assert trial_dir(recorded) == str(here)
    Path(recorded).mkdir(parents=True)
    assert trial_dir(recorded) == str(here)  # a copy: this project's own (the fault tour's delete took the original's)
    import shutil

    shutil.rmtree(here)
    assert trial_dir(recorded) == recorded  # this folder holds none: where it was recorded (another folder
    (tmp_path / "old" / "mlruns" / "optuna.db").touch()  # of this host that ran it, its study elsewhere)
    (tmp_path / "mlruns" / "optuna.db").touch()  # but each holding a study file of its own: a copy, whose
    assert trial_dir(recorded) == str(here)  # folder is here, deleted (check compared the original's: "agree")
    other = str(tmp_path / "old" / "results" / "trial-0003")
    assert trial_dir(other) == other and trial_dir(None) is None
