"""The SQLite study's lock file: held by one orchestrator at a time, removed when the run ends (and
when a later run finds one left by a killed run), never letting two hold the study at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import StudyError
from orchestrator.store.study import _is_at, check_not_locked, study_lock

HOLD = """
import sys, time
from orchestrator.store.study import study_lock
with study_lock(sys.argv[1], "s"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_the_lock_file_is_there_while_held_and_gone_after(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/optuna.db"
    lock = tmp_path / "optuna.db.s.lock"
    with study_lock(url, "s"):
        assert lock.read_text() == str(os.getpid())
    assert not lock.exists()
    with study_lock(url, "s"):  # and it is taken again as before
        assert lock.is_file()
    assert list(tmp_path.iterdir()) == []


def test_a_second_orchestrator_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/optuna.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for attempt in (lambda: check_not_locked(url, "s"), lambda: study_lock(url, "s").__enter__()):
            with pytest.raises(StudyError, match=rf"being run by another orchestrate \(pid {holder.pid}\)"):
                attempt()
        assert (tmp_path / "optuna.db.s.lock").is_file()  # the refused one removed nothing
    finally:
        holder.communicate("\n", timeout=30)
    assert holder.returncode == 0 and not (tmp_path / "optuna.db.s.lock").exists()


def test_a_lock_file_left_by_a_killed_run_is_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/optuna.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # SIGKILL: the OS releases the flock, the file stays
    holder.wait()
    stale = tmp_path / "optuna.db.s.lock"
    assert stale.read_text() == str(holder.pid)
    check_not_locked(url, "s")  # what a run of a finished study does before it answers
    assert not stale.exists()
    stale.write_text("12345")
    with study_lock(url, "s"):
        assert stale.read_text() == str(os.getpid())
    assert not stale.exists()


def test_a_file_removed_after_it_was_opened_is_not_the_lock(tmp_path: Path) -> None:
    """The race ``study_lock`` closes: an orchestrator that opened the file just before its holder
    removed it would lock a file no longer at the path; it must take the one at the path."""
    path = tmp_path / "x.lock"
    path.write_text("")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _is_at(fd, path)
        path.unlink()
        assert not _is_at(fd, path)
        path.write_text("")  # a new file at the same path
        assert not _is_at(fd, path)
    finally:
        os.close(fd)
