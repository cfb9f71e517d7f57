"""The launcher's orders to a trial process (``protocol.py``: its configuration, ``go``, leave), read
from a pipe of their own, and the process's stdin made ``/dev/null``.

The orders came on stdin, which a user's script shares: one that read it (``input()``, a prompt, a
tool that asks before it overwrites) took the launcher's line or waited on it, and every trial
timed out, a final result (a tour's ``read_stdin.py``). The script now reads an empty stdin, as
under ``nohup`` or a scheduler, and fails at once with its own error.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

_orders: TextIO | None = None


def take(fd: int | None = None) -> None:
    """Read the orders from ``fd`` (default: this process's stdin as it was started) from now on,
    and give stdin ``/dev/null``. Called before the first order is read (nothing buffered is lost)."""
    global _orders
    _orders = os.fdopen(os.dup(0) if fd is None else fd, "r", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)


def readline() -> str:
    """The next order's line ("" at the end: the launcher is gone)."""
    if _orders is None:
        take()
    assert _orders is not None
    return _orders.readline()
