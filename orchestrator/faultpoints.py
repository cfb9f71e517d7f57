"""Named points where the reliability tests kill the orchestrator, or make a store's writes fail.

``ORCHESTRATE_KILL_AT=after_tell:2`` kills this process with SIGKILL the 2nd time it reaches
``after_tell``. Points, in trial order: ``after_ask``, ``after_run_start``, ``trial_running``,
``after_tell``, ``after_finish``.

``ORCHESTRATE_STOP_AT=after_tell:1`` stops this process (SIGSTOP) there instead: a test changes the
stores meanwhile (deletes the study, say), then sends SIGCONT; ``after_tell:1,after_tell:2`` stops
it at both.

``ORCHESTRATE_FAIL_AT=mlflow_write:5`` makes the 5th write to the MLflow store, and every one
after it, fail as SQLite fails on a full disk (``sqlite3.OperationalError: database or disk is
full``), until the process ends: a disk that filled up mid-sweep, where a test cannot mount a
small file system to fill for real. ``study_write:N`` does the same to the study's store.
Several points: comma-separated. Unset (always, outside tests) each costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_seen: dict[str, int] = {}


def _nths(variable: str, point: str) -> set[int]:
    """The times ``point`` fires when reached (the 1st, the 3rd...), per ``variable``; none where unset."""
    target = os.environ.get(variable)
    if not target:
        return set()
    return {int(nth or 1) for name, _, nth in (item.strip().partition(":") for item in target.split(",")) if name == point}


def reached(point: str) -> None:
    for variable, sig in (("ORCHESTRATE_KILL_AT", signal.SIGKILL), ("ORCHESTRATE_STOP_AT", signal.SIGSTOP)):
        nths = _nths(variable, point)
        if not nths:
            continue
        _seen[variable + point] = _seen.get(variable + point, 0) + 1
        if _seen[variable + point] in nths:
            os.kill(os.getpid(), sig)


def failing(point: str) -> None:
    """Raise SQLite's full-disk error from the ``nth`` write at ``point`` on (see the module)."""
    nths = _nths("ORCHESTRATE_FAIL_AT", point)
    if not nths:
        return
    _seen[point] = _seen.get(point, 0) + 1
    if _seen[point] >= min(nths):
        import sqlite3

        raise sqlite3.OperationalError("database or disk is full")
