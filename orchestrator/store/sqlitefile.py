"""An SQLite store's file, looked at before a command opens it: damaged, foreign, empty or missing.

Read-only and cheap (its 100-byte header, its size, its schema's table names): every command
that opens a store looks at its file first (``study.check_url_opens``), so that a file truncated
by a full disk or a copy cut short, or overwritten by another program, is one line that names it
and says what to do, not a driver's traceback from wherever it is first read. A file damaged
deeper than its schema is caught where it is read (``writefault.corrupt``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

HEADER = b"SQLite format 3\x00"


def damage(path: Path, thorough: bool = False) -> str | None:
    """What is wrong with the SQLite file at ``path``, as the rest of a sentence that
    names it (``"is not an SQLite database"``, ``"is truncated: ..."``, ``"is damaged (the
    driver's words)"``), or None: it reads, or it is
    missing or empty (those are the callers' business: a new store, or a lost one). ``thorough``:
    every page read too (``PRAGMA quick_check``, ``check``'s: a fault tour's 20 KB of garbage in the
    middle of mlflow.db read as a store that agreed, and a report wrote into it)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return None
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError:
        return None
    if head[:16] != HEADER:
        return "is not an SQLite database"
    if len(head) < 100:
        return f"is truncated: {size:,} bytes, shorter than an SQLite header"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if head[24:28] == head[92:96] and pages and size < pages * page:  # the header's size is valid
        return f"is truncated: {size:,} bytes, its header says {pages * page:,}"
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None  # cannot be opened (a permission, say): the store's own checks say why
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        said = con.execute("PRAGMA quick_check(1)").fetchone()[0] if thorough else "ok"
        if said != "ok":  # "*** in database main ***\nPage 17: btreeInitPage() returns error code 11"
            first = next((ln for ln in said.splitlines() if ln.strip() and not ln.startswith("***")), said)
            return f"is damaged (database disk image is malformed: {first.strip()})"
    except sqlite3.DatabaseError as exc:
        from orchestrator.store.writefault import corrupt, driver_line

        return f"is damaged ({driver_line(exc)})" if corrupt(exc) else None
    finally:
        con.close()
    return None


def is_empty(path: Path) -> bool:
    """Whether the file at ``path`` is missing or holds 0 bytes (a new store, or one lost)."""
    try:
        return path.stat().st_size == 0
    except OSError:
        return True
