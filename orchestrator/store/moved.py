"""A project folder moved or copied: the absolute paths its local stores recorded, pointed here.

A sweep records two kinds of absolute path: each trial's folder (``TrialRecord.trial_dir``, under
the working directory's ``mlruns/.trials/``) and MLflow's artifact locations (the experiment's,
``mlruns/<experiment>``, and each run's under it, beside the local SQLite store). After ``mv
project project2`` (or a copy, or a clone of the folder on another machine) both still name the
old folder: a resumed sweep wrote its runs' files there (making it again where it was gone, or
into the original a copy came from), and ``check`` found every trial folder missing.

- ``trial_dir``: a recorded trial folder found under this working directory's ``mlruns/.trials/``
  by the same two names (the study's folder and the trial's): this project's copy of it.
- ``artifacts_elsewhere`` / ``relocate``: an experiment of a local SQLite store whose artifact
  location is a folder of the store's own name elsewhere (``/old/mlruns/<experiment>`` where the
  store is now ``/new/mlruns/mlflow.db``), and the rewrite of that prefix in the experiment and its
  runs (MLflow has no call that changes an artifact location; its tables are written as
  ``tracking.new_store`` writes them). A location the user chose (another folder's name, or
  another scheme) is never rewritten.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

from orchestrator.urls import absolute_uri, sqlite_folder, sqlite_path

STUDY_FILE = "optuna.db"
"""The default study's file in ``mlruns/`` (``urls.DEFAULT_STORAGE``): a project's own."""
TRIALS = ".trials"
"""The folder of the studies' trial folders in ``mlruns/`` (``trialdir.root``)."""

LOCATIONS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("logged_models", "artifact_location"))
"""MLflow's tables and columns that hold an artifact location (``logged_models``: MLflow 3's)."""


def trial_dir(recorded: str | None) -> str | None:
    """``recorded``, or where its trial folder is now: under this working directory's
    ``mlruns/.trials/``, where it is found by the same two names, the study's folder (its name and
    uid) and the trial's: the project moved, or copied (the original's folder is still at its
    recorded path, and a fault tour's ``delete`` in the copy deleted the original's trial folders
    too, and ``check`` there compared the original's). ``os.path``, not ``pathlib``: every trial's
    record is read often."""
    if not recorded:
        return recorded
    parent, name = os.path.split(recorded)
    above, study = os.path.split(parent)
    if os.path.basename(above) != TRIALS:
        return recorded
    here = os.path.join(_trials_here(os.getcwd()), study, name)
    if here == recorded or os.path.isdir(here):
        return here
    if not os.path.exists(recorded) and os.path.isdir(os.path.dirname(here)):  # gone from both: this project's
        return here  # place for it (moved, then deleted here), where check says it is missing
    project = os.path.dirname(above)  # the recorded folder's mlruns/: another project's, with a study file of its
    if os.path.exists(os.path.join(project, STUDY_FILE)) and os.path.exists(os.path.join(os.path.dirname(
            _trials_here(os.getcwd())), STUDY_FILE)):  # own beside this one's: a copy's original, and the trial's
        return here  # folder here is gone (deleted in the copy: check read the original's, and said "agree")
    return recorded


@functools.lru_cache(maxsize=8)
def _trials_here(cwd: str) -> str:
    """This working directory's ``mlruns/.trials``, resolved once."""
    return str((Path(cwd) / "mlruns" / TRIALS).resolve())


def artifacts_elsewhere(tracking_uri: str, experiment: str, location: str | None) -> str | None:
    """The old folder (``/old/mlruns``) when ``experiment``'s artifact ``location`` is its folder
    beside a local SQLite store that is no longer there; None when it is here, or not ours."""
    here = sqlite_folder(tracking_uri)
    if here is None or not location or not location.startswith("file:"):
        return None
    recorded = Path(unquote(urlparse(location).path))
    old = recorded.parent
    if recorded.name != experiment or old.name != here.name or old == here:
        return None
    try:
        if old.exists() and old.samefile(here):  # the same folder by another path (a link)
            return None
    except OSError:
        pass
    return str(old)


def relocate(tracking_uri: str) -> list[tuple[str, str, int]]:
    """Point every experiment of a local SQLite store whose artifact location is the store's
    folder elsewhere (``artifacts_elsewhere``), and its runs, to the store's folder; returns each
    one's name, old folder and how many of its runs were pointed here."""
    here, path = sqlite_folder(tracking_uri), sqlite_path(tracking_uri)
    if here is None or path is None or not path.is_file():
        return []
    con = sqlite3.connect(path, timeout=60)
    moved: list[tuple[str, str, int]] = []
    try:
        with con:
            tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "experiments" not in tables:
                return []
            for exp_id, name, location in con.execute(
                    "SELECT experiment_id, name, artifact_location FROM experiments").fetchall():
                if (old := artifacts_elsewhere(tracking_uri, name, location)) is None:
                    continue
                before, after = (Path(old) / name).as_uri(), (here / name).as_uri()
                runs = 0
                for table, column in LOCATIONS:
                    if table in tables:
                        cursor = con.execute(
                            f"UPDATE {table} SET {column} = ? || substr({column}, ?) "  # noqa: S608 - LOCATIONS' names
                            f"WHERE experiment_id = ? AND ({column} = ? OR substr({column}, 1, ?) = ?)",
                            (after, len(before) + 1, exp_id, before, len(before) + 1, before + "/"))
                        runs += cursor.rowcount if table == "runs" else 0
                moved.append((name, old, runs))
    finally:
        con.close()
    return moved


def moved_lines(moved: list[tuple[str, str, int]], tracking_uri: str) -> list[str]:
    """What ``relocate`` did, a line per experiment."""
    return [f"MLflow's experiment {name!r} kept its files in {old} (this folder was moved or copied from there): "
            f"it and its {runs} run(s) now keep them in {sqlite_folder(absolute_uri(tracking_uri))}" for name, old, runs in moved]
