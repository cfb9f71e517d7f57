"""A trial's descendants that left its process group (``setsid``) still end with it
(``harness.subreaper``): real processes, a real orphan re-parented to a real subreaper. Each
subreaper here is a process of its own (the test process must not become one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.harness import subreaper
from orchestrator.launch.process import is_alive
from procs import process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")

PARENT = """
import subprocess, sys, time
from orchestrator.harness import subreaper
if sys.argv[2] == "subreaper":
    assert subreaper.become()
# a child that starts a grandchild in a session of its own, then exits: the grandchild is an orphan
subprocess.run([sys.executable, "-c", "import subprocess; print(subprocess.Popen(['sleep', '120'], "
                "start_new_session=True, stdin=subprocess.DEVNULL).pid)"], check=True, stdout=open(sys.argv[1], "w"))
if sys.argv[3] == "adopted":
    print(subreaper.adopted(set()), flush=True)
time.sleep(120)
"""


def _orphan(tmp_path: Path, mode: str, report: str = "-") -> tuple[subprocess.Popen[str], int]:
    """A process (a subreaper or not) whose grandchild called setsid and was orphaned."""
    pid_file = tmp_path / f"{mode}.pid"
    proc = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file), mode, report], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    return proc, int(pid_file.read_text())


def _parent_of(pid: int) -> int:
    proc = process(pid)
    assert proc is not None, f"{pid} has ended"
    return proc.ppid


def test_an_orphan_that_called_setsid_stays_in_a_subreaper_s_tree_and_ends_with_it(tmp_path: Path) -> None:
    proc, orphan = _orphan(tmp_path, "subreaper")
    try:
        time.sleep(0.2)  # the middle process has exited: the orphan is re-parented
        assert _parent_of(orphan) == proc.pid  # kept in the tree, not given to init
        assert os.getsid(orphan) == orphan != os.getsid(proc.pid)  # out of the group: killpg misses it
        assert orphan in subreaper.descendants(proc.pid)
        assert subreaper.end_descendants(proc.pid) >= 1
        deadline = time.monotonic() + 5
        while is_alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not is_alive(orphan)
    finally:
        proc.kill()
        proc.wait()
        _kill(orphan)


def test_without_a_subreaper_the_orphan_escapes_the_tree(tmp_path: Path) -> None:
    """Why it is needed: the same orphan, its parent no subreaper, is out of reach of a walk."""
    proc, orphan = _orphan(tmp_path, "plain")
    try:
        time.sleep(0.2)
        assert _parent_of(orphan) != proc.pid and orphan not in subreaper.descendants(proc.pid)
        assert is_alive(orphan)
    finally:
        proc.kill()
        proc.wait()
        _kill(orphan)


def test_a_subreaper_sees_what_it_adopted_and_not_what_it_started(tmp_path: Path) -> None:
    proc, orphan = _orphan(tmp_path, "subreaper", "adopted")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"[{orphan}]"
    finally:
        proc.kill()
        proc.wait()
        _kill(orphan)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_group_s_killing_ends_what_left_it_first_and_stops_nothing() -> None:
    """``kill_group``'s order (a tour): what left the group (``setsid``) dies first, the leader and
    the rest of its group (a DataLoader's workers) after, together; nothing is stopped (a leader
    stopped meanwhile stayed stopped for good where the orchestrator was killed in between)."""
    from orchestrator.launch.process import kill_group

    leader = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "subprocess.Popen(['sleep', '600'])\n"  # in the group: a worker
        "subprocess.Popen(['sleep', '601'], start_new_session=True)\n"  # out of it
        "print('up', flush=True); time.sleep(600)\n")], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline() == "up\n"
        inside, outside = sorted(subreaper.descendants(leader.pid), key=lambda p: os.getpgid(p) != leader.pid)
        assert os.getpgid(inside) == leader.pid and os.getpgid(outside) != leader.pid
        subreaper.end_outside_group(leader.pid, leader.pid)
        assert not is_alive(outside) and is_alive(inside) and leader.poll() is None  # the group: not yet
        kill_group(leader.pid)
        assert leader.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while is_alive(inside) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not is_alive(inside)
    finally:
        leader.kill()


ENDING = """
import multiprocessing, os, signal, sys
from orchestrator.harness import subreaper
lock = multiprocessing.get_context("spawn").Lock()
print(lock._semlock.name, flush=True)
if sys.argv[1] == "trial":
    subreaper.end_descendants()  # as a trial ends once its window is over
elif sys.argv[1] == "forked":  # a trial forked from a server that made it: not the trial's to unlink
    child = os.fork()
    if child == 0:
        os._exit(subreaper.unlink_semaphores())
    print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
    sys.exit(0)  # its own finalizer unlinks it
else:  # as it ended before: its descendants (the resource tracker) killed, nothing unlinked
    for pid in subreaper.descendants(os.getpid()):
        os.kill(pid, signal.SIGKILL)
os._exit(0)
"""


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="named semaphores are files in /dev/shm on Linux")
def test_a_trial_s_spawn_semaphores_are_unlinked_as_it_ends() -> None:
    """A ``spawn`` (or ``forkserver``) context's lock keeps its name until its maker's finalizers
    or its resource tracker unlink it; a trial ends by ``os._exit`` with its descendants (the
    tracker among them) killed, and left 14 a trial with a spawn DataLoader. Ended as a trial
    ends, the process unlinks them; ended by ``os._exit`` alone, the name stays (the control)."""
    import _multiprocessing

    left = {}
    for how in ("trial", "control"):
        out = subprocess.run([sys.executable, "-c", ENDING, how], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        name = out.stdout.strip()
        left[how] = (Path("/dev/shm") / f"sem.{name.lstrip('/')}").exists()
        if left[how]:
            _multiprocessing.sem_unlink(name)
    assert left == {"trial": False, "control": True}
    forked = subprocess.run([sys.executable, "-c", ENDING, "forked"], capture_output=True, text=True, timeout=60)
    assert forked.returncode == 0 and forked.stdout.split()[1:] == ["0"], forked.stdout + forked.stderr  # unlinked none
    assert "Traceback" not in forked.stderr and "leaked" not in forked.stderr, forked.stderr  # its own exit unlinked it
