"""A trial log's copy for its MLflow run, bounded: a script that prints 100 KB a step writes a log
of tens of megabytes per trial, and MLflow would keep a second whole copy of it. The trial folder
keeps the whole log (what a user reads when a trial fails); the run keeps at most ``LIMIT`` bytes:
the log's first ``HEAD`` bytes (the script's start, its settings) and its last bytes (how it
ended), with a line between that says how much was left out and where the whole log is."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

LIMIT = 8 * 2**20
"""The most of a trial's log its MLflow run keeps, in bytes."""
HEAD = 2**20
"""Of those, how many from the log's start."""


@contextlib.contextmanager
def bounded(path: Path, limit: int = LIMIT, head: int = HEAD) -> Iterator[Path]:
    """``path`` itself when it holds at most ``limit`` bytes, else a copy of the same name (in a
    folder of its own, removed afterwards) of its first ``head`` and last ``limit - head`` bytes
    with a line between them."""
    size = path.stat().st_size
    if size <= limit:
        yield path
        return
    tail = limit - head
    with tempfile.TemporaryDirectory(prefix="orchestrate-log-") as folder:
        copy = Path(folder) / path.name
        with open(path, "rb") as src, open(copy, "wb") as dst:  # the log may still grow: sizes as read first
            dst.write(src.read(head))
            dst.write(f"\n[orchestrate: {size - head - tail:,} bytes of this log left out here; "
                      f"the whole log ({size:,} bytes) is {path}]\n".encode())
            src.seek(size - tail, os.SEEK_SET)
            dst.write(src.read(tail))
        yield copy
