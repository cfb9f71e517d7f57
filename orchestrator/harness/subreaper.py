"""Nothing outlives a trial: every descendant of a trial process ends with it, those that left its
process group (``setsid``: a server, some data-loader or compile workers) included. Standard
library only (both sides import it; the orchestrator never imports torch).

A trial runs in a session of its own, so killing its process group ends what stays in the group;
a descendant that calls ``setsid`` leaves it. On Linux, process supervisors (tini, s6, systemd)
keep such processes from escaping by being a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): an
orphan is re-parented to the nearest living subreaper above it instead of to init, so the
subreaper can see and kill it. Here:

- each trial process is a subreaper (``become``): while it runs, every descendant stays in its
  tree, however many times it forks or calls ``setsid``, and the trial ends them all when it ends
  (``end_descendants``: at its exit, on its watchdog's SIGTERM) and the launcher before it kills a
  trial's group (``launch.process.kill_group``);
- the fork server is a subreaper too (``harness/forkserver.py``): a trial killed with SIGKILL
  (a timeout, Ctrl-C) cannot end its descendants itself, so they are re-parented to the server,
  which kills every child it did not fork itself as soon as one of its trials has exited
  (``adopted``).

Nor do the named semaphores of its multiprocessing (``unlink_semaphores``): a trial ends by
``os._exit`` with its descendants killed, its resource tracker among them, so neither its own
finalizers nor the tracker unlink them.

macOS has no subreaper. There the same walks run over ``ps``'s process table: a trial ends its
descendants when it ends, and the launcher ends them before it kills a trial's group. What it
cannot reach is a descendant re-parented to ``launchd`` before that walk: one whose own parent
exited first (a double-forked daemon).
"""

from __future__ import annotations

from collections.abc import Collection
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36


def become() -> bool:
    """Make this process a child subreaper (Linux); False where it is not one (macOS, or the
    kernel refused)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _table() -> dict[int, tuple[int, str]]:
    """Every process's parent and state: ``{pid: (ppid, state)}`` (Linux ``/proc``, else ``ps``)."""
    out: dict[int, tuple[int, str]] = {}
    if os.path.isdir("/proc/self"):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[int(name)] = (int(fields[1]), fields[0].decode())
        return out
    try:
        text = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = (int(parts[1]), parts[2][:1])
    return out


def _children(pid: int) -> list[int] | None:
    """``pid``'s children as Linux lists them per thread (``/proc/PID/task/TID/children``: a few
    small reads, where a walk of the whole process table reads hundreds); None where the kernel
    does not list them (then ``_table`` is read instead)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [] if os.path.isdir("/proc/self/task") else None
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return out


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True  # gone


def descendants(pid: int) -> list[int]:
    """The live (not zombie) descendants of ``pid``, parents before their children."""
    out, todo = [], [pid]
    while todo:  # Linux: the children lists, process by process
        found = _children(todo.pop(0))
        if found is None:
            break
        out += [p for p in found if not _zombie(p)]
        todo += found
    else:
        return out
    table = _table()
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(p)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        if table[p][1] != "Z":
            out.append(p)
        todo += children.get(p, [])
    return out


def end_descendants(pid: int | None = None, rounds: int = 20) -> int:
    """SIGKILL every descendant of ``pid`` (default: this process), again until none is left (one
    may fork between the walk and its kill: its child is re-parented to a subreaper in the tree,
    or appears under it, and is found by the next walk); this process's own dead children are
    reaped. Returns how many were killed. Called for this process as it ends: the handler a
    DataLoader sets for SIGCHLD is taken off first, for it would raise in this process as its
    workers die (a busy machine's smoke step "failed" with "DataLoader worker ... is killed by
    signal", its answer ok; a trial's ok result was overwritten with that error)."""
    me = os.getpid()
    pid = me if pid is None else pid
    if pid == me:
        unlink_semaphores()
    if pid == me and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    killed = 0
    for _ in range(rounds):
        found = descendants(pid)
        if not found:
            break
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        if pid == me:
            _reap_all()
        time.sleep(0.01)
    if pid == me:
        _reap_all()
    return killed


def end_outside_group(pid: int, pgid: int, rounds: int = 20) -> None:
    """SIGKILL every descendant of ``pid`` that left the process group ``pgid`` (``setsid``), again
    until none is left, ``pid`` alive meanwhile (a subreaper: what they fork stays under it); the
    caller then kills the group, ``pid`` with it. In that order nothing in the group sees its own
    children die before it does: a DataLoader's SIGCHLD handler raised as its workers were killed
    ("DataLoader worker ... is killed by signal"), and the trial wrote ``error`` in place of its
    timeout or its interruption. (Stopping ``pid`` meanwhile left it stopped for good where the
    orchestrator was killed in between.)"""
    for _ in range(rounds):
        found = [p for p in descendants(pid) if _group(p) not in (pgid, None)]
        if not found:
            return
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def unlink_semaphores() -> int:
    """Unlinks the named semaphores this process's ``multiprocessing`` made and has not unlinked
    (a ``spawn`` or ``forkserver`` DataLoader's queues: their names live until the maker's
    finalizers, or its resource tracker, unlink them; ``fork`` unlinks them at once), before the
    process ends without running either: a script tour's trials left 14 ``/dev/shm/sem.mp-*`` each,
    and on macOS, where ``spawn`` is the default, named semaphores are a system-wide resource. Open
    handles stay valid (workers may still wait on them). Only this process's own: a forked trial
    inherits its server's finalizers, which are not its to run (``Finalize`` checks its ``_pid``
    too). How many; 0 where ``multiprocessing``'s locks were never imported, or anything went wrong
    (it runs on the way out, before the kills that must follow). Reads
    ``multiprocessing.util._finalizer_registry``."""
    util, synchronize = sys.modules.get("multiprocessing.util"), sys.modules.get("multiprocessing.synchronize")
    if util is None or synchronize is None:
        return 0
    unlinked, me = 0, os.getpid()
    try:
        for final in list(getattr(util, "_finalizer_registry", {}).values()):
            if getattr(final, "_callback", None) is synchronize.SemLock._cleanup and getattr(final, "_args", None) \
                    and getattr(final, "_pid", None) == me:
                try:
                    synchronize.sem_unlink(final._args[0])  # _multiprocessing's, as SemLock._cleanup calls it
                    unlinked += 1
                except OSError:  # unlinked already
                    pass
    except Exception:  # noqa: BLE001 - the process ends next, and its descendants must still be killed
        pass
    return unlinked


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def adopted(known: Collection[int]) -> list[int]:
    """This process's live children that are not in ``known`` (those it started itself): orphans
    re-parented to it as a subreaper."""
    me = os.getpid()
    return [p for p, (ppid, state) in _table().items() if ppid == me and p not in known and state != "Z"]


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
