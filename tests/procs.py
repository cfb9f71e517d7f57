"""The machine's processes as Linux's ``/proc`` shows them, read in one place for the tests that
check what a command started, signalled or left running.

``processes()`` is one pass over ``/proc``: each process's pid, state letter, parent, process
group and command line, read when the pass reaches it; a process that ends meanwhile is left out.
Its working folder and environment are read on demand (``Proc.cwd``, ``Proc.environ``): ``None``
once it has ended, or where this process may not read them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    state: str
    """The state letter of ``/proc/PID/stat``: ``R``, ``S``, ``D``, ``T`` (stopped), ``Z`` (a zombie:
    it has exited, its parent has not reaped it yet)."""
    ppid: int
    pgid: int
    cmdline: str
    """Its arguments joined by spaces (empty for a kernel thread or a zombie)."""

    @property
    def live(self) -> bool:
        return self.state != "Z"

    def cwd(self) -> str | None:
        try:
            return os.readlink(PROC / str(self.pid) / "cwd")
        except OSError:
            return None

    def environ(self) -> list[bytes] | None:
        """Its environment's ``NAME=value`` entries, as it was started."""
        try:
            return (PROC / str(self.pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            return None


def process(pid: int) -> Proc | None:
    """Process ``pid``, or None once it is gone (a zombie is still there: ``live`` is False)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        argv = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    try:
        state, ppid, pgid = stat.rsplit(")", 1)[1].split()[:3]  # the name, in parentheses, may hold anything
        return Proc(pid, state, int(ppid), int(pgid), argv.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace"))
    except (IndexError, ValueError):
        return None


def processes(zombies: bool = False) -> list[Proc]:
    """Every process but this one (zombies only where asked for)."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        proc = process(int(entry.name))
        if proc is not None and (zombies or proc.live):
            found.append(proc)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    proc = process(pid)
    return proc is not None and proc.live


def state_of(pid: int) -> str:
    """Process ``pid``'s state letter (``T``: stopped), or "" once it is gone."""
    proc = process(pid)
    return "" if proc is None else proc.state


def descendants(pid: int) -> list[int]:
    """Every process started, directly or not, by ``pid`` (zombies included)."""
    parents = {p.pid: p.ppid for p in processes(zombies=True)}
    found, frontier = [], [pid]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        found += frontier
    return found
