"""The MLflow server's guard: ``orchestrate ui`` starts its server in a session of its own (so that a
terminal's Ctrl-C reaches the server once, through ``orchestrate ui``), which also means nothing
stops that server if ``orchestrate ui`` is killed outright (``kill -9``, the OOM killer): it went
on serving the port. This process holds the read end of a pipe whose write end only ``orchestrate
ui`` holds; at end of file without ``DONE`` first (that process ended, however it ended) it stops
the server's process group: SIGTERM (MLflow passes it on to uvicorn, which shuts down gracefully),
then SIGKILL to what is left after ``GRACE_S``. ``orchestrate ui`` writes ``DONE`` once its server
has exited, and the guard leaves without touching a group whose number the system may reuse.
SIGTERM to the guard itself stops the group too (the protection does not go quietly).

    python -m orchestrator.report.uiguard PGID

Pipes and process groups only: the same on Linux and macOS.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

DONE = b"done\n"
"""What ``orchestrate ui`` writes once its server has exited: nothing left to stop."""
GRACE_S = 10.0
"""How long the server has to stop on SIGTERM before the rest of its group is killed."""


def alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs. Where ``/proc`` is (Linux), one that has exited
    and waits to be reaped (a zombie: uvicorn once ``mlflow`` was killed, where no init reaps it)
    does not count; elsewhere the group exists."""
    proc = Path("/proc")
    if proc.is_dir():
        for stat in proc.glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's: never ours to stop
        return False
    return True


def gone(pgid: int, wait_s: float) -> bool:
    """Whether group ``pgid`` has ended within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM to the group, then SIGKILL to whatever of it is left after ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    if gone(pgid, grace_s):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals are for `orchestrate ui`, which passes them on
        signal.signal(s, signal.SIG_IGN)
    pgid = int(argv[0])
    def leave(_signum: int, _frame: object) -> None:  # asked to leave: not without stopping the group
        stop_group(pgid)
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    said = b""
    while chunk := os.read(0, 64):  # end of file: the last holder of the write end has closed it
        said += chunk
    if said != DONE:
        stop_group(pgid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
