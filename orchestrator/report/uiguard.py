"""The MLflow server's guard: ``orchestrate ui`` starts its server in a session of its own (so that a
terminal's Ctrl-C reaches the server once, through ``orchestrate ui``), which also means nothing
stops that server if ``orchestrate ui`` is killed outright (``kill -9``, the OOM killer): it went
on serving the port. This process holds the read end of a pipe whose write end only ``orchestrate
ui`` holds; at end of file without ``DONE`` first (that process ended, however it ended) it stops
the server's process group: SIGTERM (MLflow passes it on to uvicorn, which shuts down gracefully),
then SIGKILL to what is left after ``GRACE_S``. ``orchestrate ui`` writes ``DONE`` once its server
has exited, and the guard leaves without touching a group whose number the system may reuse.

    python -m orchestrator.report.uiguard PGID

Pipes and process groups only: the same on Linux and macOS.
"""

from __future__ import annotations

import os
import signal
import sys
import time

DONE = b"done\n"
"""What ``orchestrate ui`` writes once its server has exited: nothing left to stop."""
GRACE_S = 10.0
"""How long the server has to stop on SIGTERM before the rest of its group is killed."""


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a group of another user's: never ours to stop
        return False
    return True


def stop_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM to the group, then SIGKILL to whatever of it is left after ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals are for `orchestrate ui`, which passes them on
        signal.signal(s, signal.SIG_IGN)
    pgid = int(argv[0])
    said = b""
    while chunk := os.read(0, 64):  # end of file: the last holder of the write end has closed it
        said += chunk
    if said != DONE:
        stop_group(pgid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
