"""A store that cannot be written: a full disk, a read-only file system, a permission taken away,
a database locked past its timeout. One line, not a traceback.

``cause(exc)`` reads an exception (and what caused it: SQLAlchemy wraps sqlite3 and psycopg2,
Optuna and MLflow wrap SQLAlchemy) and says which of these it is, in a few words, or None for
anything else. ``WriteGuard.call`` runs a store's call and turns such a failure into
``StoreUnwritable``: the store, its URL (password masked: ``redact.shown``), the cause and the
driver's own first line, with exit code 75 (``exits.STORE_DOWN``): the same command, run again
once the store can be written, goes on from the study, and writes MLflow's missing records from
it. ``outage.Outage.call`` does the same before it waits out a lost connection, so a server's
full disk is not mistaken for an outage.

``faultpoints.failing(...)`` lets the tests (and CI machines that cannot mount a small file
system) make a store's writes fail with the message SQLite gives on a full disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Callable

from orchestrator import exits
from orchestrator.errors import OrchestratorError
from orchestrator.redact import scrub

DISK_FULL = "the disk is full"
READ_ONLY = "the store is read-only"
DENIED = "permission denied"
LOCKED = "the database is locked by another process, for longer than its timeout"
CANT_OPEN = "the database file cannot be opened (a permission, a missing folder or a full disk)"
IO_ERROR = "a disk I/O error (a full or failing disk)"

ERRNOS = {errno.ENOSPC: DISK_FULL, errno.EDQUOT: DISK_FULL, errno.EROFS: READ_ONLY, errno.EACCES: DENIED,
          errno.EPERM: DENIED, errno.EFBIG: DISK_FULL}
WORDS = (  # lower-case words of each cause, as SQLite, PostgreSQL, the OS and MLflow's server say them
    ("database or disk is full", DISK_FULL), ("no space left on device", DISK_FULL),
    ("disk quota exceeded", DISK_FULL), ("could not extend file", DISK_FULL), ("diskfull", DISK_FULL),
    ("attempt to write a readonly database", READ_ONLY), ("read-only file system", READ_ONLY),
    ("readonly database", READ_ONLY), ("read-only transaction", READ_ONLY), ("readonlysqltransaction", READ_ONLY),
    ("permission denied", DENIED), ("insufficientprivilege", DENIED), ("insufficient privilege", DENIED),
    ("database is locked", LOCKED), ("unable to open database file", CANT_OPEN), ("disk i/o error", IO_ERROR),
)


def named(what: str, url: str) -> str:
    """How a line names a store: ``what`` (``the study's store``) and its URL, an SQLite file's
    path made absolute, its password masked."""
    from orchestrator.redact import shown

    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = "sqlite:///" + str(Path(url[len("sqlite:///"):]).resolve())
    return f"{what} {shown(url)}"


class StoreUnwritable(OrchestratorError):
    """A store could not be written (see the module)."""

    exit_code = exits.STORE_DOWN

    def __init__(self, store: str, cause: str, detail: str, outcome: str | None = None) -> None:
        self.store, self.cause, self.detail, self.outcome = store, cause, detail, outcome
        super().__init__(f"{store} cannot be written: {cause} ({detail})" + (f"; {outcome}" if outcome else ""))

    def with_outcome(self, outcome: str) -> "StoreUnwritable":
        """The same failure, its line ending with what happens now (``outcome``), unless the
        code nearer the failure said that already."""
        return self if self.outcome else StoreUnwritable(self.store, self.cause, self.detail, outcome)


def cause(exc: BaseException | None) -> str | None:
    """Which write failure ``exc`` (or an exception that caused it) is, or None (see the module)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, StoreUnwritable):
            return exc.cause
        code = getattr(exc, "errno", None)
        if isinstance(exc, OSError) and code in ERRNOS:
            return ERRNOS[code]
        text = f"{type(exc).__name__}: {exc}".lower()
        for words, what in WORDS:
            if words in text:
                return what
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def detail(exc: BaseException) -> str:
    """The innermost first line that names the cause (the driver's own words), without secrets."""
    found = None
    seen = 0
    while exc is not None and seen < 10:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        for line in lines:
            if any(w in line.lower() for w, _ in WORDS) or (isinstance(exc, OSError) and exc.errno in ERRNOS):
                found = line
                break
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return scrub((found or "").removeprefix("(sqlite3.OperationalError) ")[:200])


def unwritable(store: str, exc: BaseException, folder: Path | None = None) -> StoreUnwritable | None:
    """``exc`` as ``StoreUnwritable`` of ``store`` when it is a write failure, else None.
    ``folder``: where the store's files are (an SQLite store's); SQLite's vaguer words ("unable
    to open database file", "disk I/O error") are then made precise by looking at it."""
    if isinstance(exc, StoreUnwritable):
        return exc
    what = cause(exc)
    if what in (CANT_OPEN, IO_ERROR) and folder is not None:
        what = diagnose(folder) or what
    return None if what is None else StoreUnwritable(store, what, detail(exc) or type(exc).__name__)


def diagnose(folder: Path) -> str | None:
    """Why files cannot be written in ``folder``, as the file system says: read-only, full, or
    not writable by this user; None when it says nothing is wrong."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None
    if fs.f_flag & os.ST_RDONLY:
        return READ_ONLY
    if fs.f_bavail == 0 or fs.f_favail == 0:
        return DISK_FULL
    return DENIED if not os.access(folder, os.W_OK) else None


def sqlite_folder(url: str) -> Path | None:
    """The folder of an SQLite URL's file (None for any other URL)."""
    return Path(url[len("sqlite:///"):]).resolve().parent if url.startswith("sqlite:///") else None


class WriteGuard:
    """Runs a store's calls; a write failure comes out as ``StoreUnwritable`` naming the store
    (``outage.retrying_storage`` and ``outage.RetryingClient`` take it as their guard)."""

    def __init__(self, store: str, point: str | None = None, folder: Path | None = None) -> None:
        """``store``: how the line names it (``named``); ``point``: the fault point of its writes
        (``faultpoints.failing``), ``study_write`` or ``mlflow_write``; ``folder``: ``unwritable``'s."""
        self.store, self.point, self.folder = store, point, folder

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            if self.point is not None and _writes(fn):
                from orchestrator.faultpoints import failing

                failing(self.point)
            return fn(*args, **kwargs)
        except StoreUnwritable:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted: only a write failure becomes one line
            found = unwritable(self.store, exc, self.folder)
            if found is None:
                raise
            raise found from None


WRITES = ("create_", "set_", "log_", "update_", "delete_", "restore_", "enqueue", "record_heartbeat")


def _writes(fn: Callable[..., Any]) -> bool:
    name = getattr(fn, "__name__", "")
    return name.startswith(WRITES)


def quiet_write_failures() -> None:
    """MLflow's SQL store logs each failed statement with its traceback, before raising it; the
    guard reports a write failure in one line instead."""
    import logging

    logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _WriteFailureFilter) for f in logger.filters):
        logger.addFilter(_WriteFailureFilter())


class _WriteFailureFilter:
    def filter(self, record: Any) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or cause(exc) is None
