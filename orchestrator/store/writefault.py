"""A store that cannot be written: a full disk, a read-only file system, a permission taken away,
a database locked past its timeout. One line, not a traceback.

``cause(exc)`` reads an exception (and what caused it: SQLAlchemy wraps sqlite3 and psycopg2,
Optuna and MLflow wrap SQLAlchemy) and says which of these it is, in a few words, or None for
anything else: by error codes and exception types first (an errno, SQLite's result code,
PostgreSQL's SQLSTATE, Optuna's and MLflow's errors of the normal flow), and only where none
carries one by the driver's own first line, its quoted values left out, never the SQL statement
or its parameters (a study named ``diskfull`` is not a full disk). ``corrupt(exc)`` says whether
an SQLite file is damaged or not a database: ``StoreCorrupt``, exit 2, with what to do. ``WriteGuard.call`` runs a store's call and turns such a failure into
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
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from orchestrator import exits
from orchestrator.errors import OrchestratorError
from orchestrator.redact import scrub
from orchestrator.urls import absolute_uri, sqlite_path

if TYPE_CHECKING:
    from logging import LogRecord

T = TypeVar("T")

DISK_FULL = "the disk is full"
READ_ONLY = "the store is read-only"
DENIED = "permission denied"
LOCKED = "the database is locked by another process, for longer than its timeout"
CANT_OPEN = "the database file cannot be opened (a permission, a missing folder or a full disk)"
IO_ERROR = "a disk I/O error (a full or failing disk)"
MOVED = "its file was deleted, moved or replaced while the sweep ran"
IN_THE_WAY = "a file is where a folder belongs, or a folder where a file belongs: move it aside"
SQLITE_DBMOVED = 1032
"""SQLITE_READONLY_DBMOVED, the extended code of a write to an open file no longer at its path:
not read-only, and running again cannot write there."""

ERRNOS = {errno.ENOSPC: DISK_FULL, errno.EDQUOT: DISK_FULL, errno.EROFS: READ_ONLY, errno.EACCES: DENIED,
          errno.EPERM: DENIED, errno.EFBIG: DISK_FULL, errno.ENOTDIR: IN_THE_WAY, errno.EISDIR: IN_THE_WAY}
SQLITE_CODES = {13: DISK_FULL, 8: READ_ONLY, 3: DENIED, 23: DENIED, 5: LOCKED, 6: LOCKED, 14: CANT_OPEN,
                10: IO_ERROR}
"""SQLite's primary result codes (``sqlite_errorcode & 0xff``, which ``sqlite3`` errors carry):
SQLITE_FULL, READONLY, PERM, AUTH, BUSY, LOCKED, CANTOPEN, IOERR. Any other code is no write failure."""
SQLITE_CORRUPT = {11, 26}
"""SQLITE_CORRUPT and SQLITE_NOTADB: the file is damaged or not a database (``corrupt``)."""
PG_CODES = {"53100": DISK_FULL, "25006": READ_ONLY, "42501": DENIED, "55P03": LOCKED}
"""PostgreSQL's SQLSTATEs (psycopg2's ``pgcode``): disk_full, read_only_sql_transaction,
insufficient_privilege, lock_not_available. Any other SQLSTATE is no write failure."""
PG_TYPES = {"DiskFull": DISK_FULL, "ReadOnlySqlTransaction": READ_ONLY, "InsufficientPrivilege": DENIED,
            "LockNotAvailable": LOCKED}
"""psycopg2's classes of the same SQLSTATEs, for an error that carries its class but no code."""
NOT_FAULTS = {"DuplicatedStudyError", "UpdateFinishedTrialError"}
"""Optuna's exceptions of the normal flow (a study that exists, a trial another worker ended)."""
MLFLOW_NOT_FAULTS = {"RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE",
                     "INVALID_STATE", "NOT_FOUND"}
"""MLflow's error codes that say the request, not the store, was wrong."""
WORDS = (  # the last resort: lower-case words of each cause, in a driver's or the OS's own message
    ("database or disk is full", DISK_FULL), ("no space left on device", DISK_FULL),
    ("disk quota exceeded", DISK_FULL), ("could not extend file", DISK_FULL),
    ("attempt to write a readonly database", READ_ONLY), ("read-only file system", READ_ONLY),
    ("readonly database", READ_ONLY), ("read-only transaction", READ_ONLY),
    ("permission denied", DENIED), ("insufficient privilege", DENIED),
    ("database is locked", LOCKED), ("unable to open database file", CANT_OPEN), ("disk i/o error", IO_ERROR),
)
CORRUPT_WORDS = ("database disk image is malformed", "file is not a database")
_UNDECIDED = object()
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]")


def named(what: str, url: str) -> str:
    """How a line names a store: ``what`` (``the study's store``) and its URL, an SQLite file's
    path made absolute, its password masked."""
    from orchestrator.redact import shown

    return f"{what} {shown(absolute_uri(url))}"


class StoreUnwritable(OrchestratorError):
    """A store could not be written (see the module)."""

    exit_code = exits.STORE_DOWN

    def __init__(self, store: str, cause: str, detail: str, outcome: str | None = None) -> None:
        self.store, self.cause, self.detail, self.outcome = store, cause, detail, outcome
        super().__init__(f"{store} cannot be written: {cause} ({detail})" + (f"; {outcome}" if outcome else ""))

    def with_outcome(self, outcome: str) -> "StoreUnwritable":
        """The same failure, its line ending with what happens now (``outcome``), unless the
        code nearer the failure said that already."""
        return self if self.outcome else type(self)(self.store, self.cause, self.detail, outcome)


class StoreCorrupt(StoreUnwritable):
    """A store's SQLite file is damaged or not a database (truncated, overwritten): running again
    cannot help, so the line says what to do with the file (``outcome``), exit 2."""

    exit_code = exits.USAGE

    def __init__(self, store: str, cause: str, detail: str, outcome: str | None = None) -> None:
        if outcome is None:
            url = store.rsplit(" ", 1)[-1]  # ``named``'s: what, then the URL
            path = sqlite_path(url)
            move = f" ({aside(path)})" if path is not None else ""
            outcome = (f"move it aside{move}: the sweep's command, or `orchestrate check` with --repair, then "
                       "rebuilds MLflow's records from the study" if store.startswith("MLflow") else
                       f"restore it from a backup, or move it aside{move} and start a new study with --new-study")
        StoreUnwritable.__init__(self, store, cause, detail, outcome)
        self.args = (f"{store} cannot be read: {cause} ({detail}); {outcome}",)


CORRUPT = "the file is damaged or is not an SQLite database"


def aside(path: Path) -> str:
    """The command that moves a store's damaged file ``path`` aside, for a line to quote."""
    import shlex

    return f"mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.corrupt')}"


def _chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and what caused it (SQLAlchemy's ``orig``, ``raise ... from``), outermost first."""
    out: list[BaseException] = []
    while exc is not None and len(out) < 10 and exc not in out:
        out.append(exc)
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return out


def _by_code(exc: BaseException) -> Any:
    """What ``exc``'s error code or type says: a cause, None (decidedly no write failure), or
    ``_UNDECIDED`` (it carries neither)."""
    if isinstance(exc, StoreUnwritable):
        return exc.cause
    if isinstance(exc, OSError) and isinstance(exc.errno, int):
        return ERRNOS.get(exc.errno, _UNDECIDED)
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        if code == SQLITE_DBMOVED:
            return MOVED
        return None if code & 0xFF in SQLITE_CORRUPT else SQLITE_CODES.get(code & 0xFF)
    kinds = [k.__name__ for k in type(exc).__mro__]
    if any(k.__module__.startswith("psycopg2") for k in type(exc).__mro__):
        pgcode = getattr(exc, "pgcode", None)
        if pgcode:
            return PG_CODES.get(pgcode)
        return next((PG_TYPES[k] for k in kinds if k in PG_TYPES), _UNDECIDED)
    if NOT_FAULTS & set(kinds):
        return None
    if getattr(exc, "error_code", None) in MLFLOW_NOT_FAULTS:
        return None
    return _UNDECIDED


def driver_line(exc: BaseException) -> str:
    """The first line of what a driver or the OS said, without SQLAlchemy's statement and
    parameters (an OSError: its ``strerror``, not the file's name)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    text = primary if isinstance(primary, str) and primary else str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    for mark in ("[SQL:", "[parameters:"):
        line = line.split(mark, 1)[0].strip()
    return line


def _words(exc: BaseException) -> str:
    """``driver_line`` without what may be a user's value: quoted text and bracketed groups."""
    return _QUOTED.sub(" ", driver_line(exc)).lower()


def _is_wrapper(exc: BaseException) -> bool:
    """SQLAlchemy's errors quote the statement and its parameters: their driver's own error
    (``orig``, in the chain) is read instead."""
    return getattr(exc, "orig", None) is not None


def cause(exc: BaseException | None) -> str | None:
    """Which write failure ``exc`` (or an exception that caused it) is, or None. Error codes and
    exception types first (an errno, SQLite's result code, PostgreSQL's SQLSTATE, Optuna's and
    MLflow's own errors); only where no exception in the chain carries one, the words of the
    driver's own first line, its quoted values left out: never the SQL statement, its
    parameters or a user's value (a study named ``diskfull`` is not a full disk)."""
    return _decide(exc)[0]


def _decide(exc: BaseException | None) -> tuple[str | None, BaseException | None]:
    """The cause and the exception that decided it (``cause``)."""
    chain = _chain(exc)
    for e in chain:
        verdict = _by_code(e)
        if verdict is not _UNDECIDED:
            return verdict, e
    for e in chain:
        if _is_wrapper(e):
            continue
        text = _words(e)
        for words, what in WORDS:
            if words in text:
                return what, e
    return None, None


def corrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` says an SQLite file is damaged or not a database (SQLITE_CORRUPT,
    SQLITE_NOTADB; by its words where no code is carried)."""
    chain = _chain(exc)
    for e in chain:
        code = getattr(e, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in SQLITE_CORRUPT
    return any(w in _words(e) for e in chain if not _is_wrapper(e) for w in CORRUPT_WORDS)


def detail(exc: BaseException) -> str:
    """The driver's own first line about the cause (``driver_line`` of the exception that
    decided it), without secrets."""
    _, decided = _decide(exc)
    if decided is None:
        return ""
    line = str(decided) if isinstance(decided, OSError) and decided.errno in ERRNOS else driver_line(decided)
    if isinstance(decided, StoreUnwritable):
        line = decided.detail
    return scrub(line.removeprefix("(sqlite3.OperationalError) ")[:200])


def unwritable(store: str, exc: BaseException, folder: Path | None = None) -> StoreUnwritable | None:
    """``exc`` as ``StoreUnwritable`` of ``store`` when it is a write failure, else None.
    ``folder``: where the store's files are (an SQLite store's); SQLite's vaguer words ("unable
    to open database file", "disk I/O error") are then made precise by looking at it."""
    if isinstance(exc, StoreUnwritable):
        return exc
    if corrupt(exc):
        return StoreCorrupt(store, CORRUPT, scrub(driver_line(_chain(exc)[-1])))
    what = cause(exc)
    if what in (CANT_OPEN, IO_ERROR) and folder is not None:
        what = diagnose(folder) or what
    return None if what is None else StoreUnwritable(store, what, detail(exc) or type(exc).__name__)


def folder_unwritable(root: Path, exc: BaseException) -> StoreUnwritable | None:
    """``exc`` (an ``OSError`` writing a trial's files under ``root``, the study's trial folders)
    as one line naming the folders, or None when it is no write failure."""
    what = IN_THE_WAY if isinstance(exc, FileExistsError) else cause(exc)  # mkdir where a file is: the fault
    if what is None:  # tour's trial-0002, a traceback and the trial left RUNNING
        return None
    name = getattr(exc, "filename", None)
    if what == IN_THE_WAY and name is not None and (blocker := _in_the_way(Path(name))) is not None:
        return StoreUnwritable(f"the trial folders {root}", what, f"{blocker} is a file")
    where = root if name is None or Path(name).resolve().is_relative_to(root) else Path(name).resolve().parent
    return StoreUnwritable(f"the trial folders {where}", what, detail(exc) or type(exc).__name__)


def _in_the_way(path: Path) -> Path | None:
    """The file that stands where ``path`` or one of its folders belongs, if one does."""
    for above in [*reversed(path.absolute().parents), path.absolute()]:
        if above.exists() and not above.is_dir():
            return above
    return None


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


class WriteGuard:
    """Runs a store's calls; a write failure comes out as ``StoreUnwritable`` naming the store
    (``outage.retrying_storage`` and ``outage.RetryingClient`` take it as their guard)."""

    def __init__(self, store: str, point: str | None = None, folder: Path | None = None) -> None:
        """``store``: how the line names it (``named``); ``point``: the fault point of its writes
        (``faultpoints.failing``), ``study_write`` or ``mlflow_write``; ``folder``: ``unwritable``'s."""
        self.store, self.point, self.folder = store, point, folder

    def call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
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
    def filter(self, record: LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or cause(exc) is None


def damaged_remedy(path: Path, what: str, rebuild: str = "the same command") -> str:
    """What to do with a store's damaged file: MLflow's is rebuilt from the study once moved
    aside; the study is the source of truth, so its file is restored, or a new study started."""
    if what == "tracking_uri":
        return f"move it aside ({aside(path)}): {rebuild} then rebuilds MLflow's records from the study"
    return (f"restore it from a backup, or move it aside ({aside(path)}) and start a new study with "
            "--new-study (MLflow keeps the old study's runs)")
