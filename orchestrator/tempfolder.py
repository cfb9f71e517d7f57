"""Folders of an orchestrator's own in the system's temp folder, outside the project: the forked
probe's request and answers (``orchestrate-probe-<pid>-*``), each trial's and smoke step's
multiprocessing folder (``pymp-<pid>-*``) and ``doctor --check``'s trials
(``orchestrate-doctor-<pid>-*``). The orchestrator removes each when done with it; the ones an
orchestrator killed with SIGKILL left behind (its pid in the name, and gone) are removed by the
next one (``own``). Standard library only."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PROBE, MULTIPROCESSING, DOCTOR = "orchestrate-probe-", "pymp-", "orchestrate-doctor-"
PREFIXES = (PROBE, MULTIPROCESSING, DOCTOR)
"""The kinds of folder, each named ``<prefix><pid>-*`` (multiprocessing's own ``pymp-*`` have no
``-`` after their random part, and are never touched)."""
_swept = False
"""Whether this process has removed the folders of orchestrators now gone (once, at its first)."""


def own(prefix: str) -> Path:
    """A new folder ``<prefix><pid>-*`` of this process's, made by ``mkdtemp``; the first call
    removes every kind's folders whose process is gone (another user's are left alone)."""
    global _swept
    if not _swept:
        _swept = True
        for kind in PREFIXES:
            for old in Path(tempfile.gettempdir()).glob(f"{kind}*-*"):
                pid = old.name[len(kind):].split("-")[0]
                if pid.isdigit() and not _alive(int(pid)):
                    shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (killed, its parent not yet done with it) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (macOS), or it has just gone
        return True
