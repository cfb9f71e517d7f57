"""The Optuna study behind a spec: open or resume it, refuse a mismatched one, lock it.

Optuna's storage is used as it is (RDBStorage over the spec's URL); this module only adds what a
resumable sweep needs around it: a study made from the same spec, and one orchestrator at a time
on an SQLite study (several share a server database: ``coordination``).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from orchestrator.errors import StudyError, first_line
from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec
from orchestrator.store.fingerprint import as_stored, changed, mismatch
from orchestrator.store.studyrecord import StudyRecord, write_study
from orchestrator.urls import database_remedy, is_sqlite, sqlite_folder, sqlite_path, sqlite_url

if TYPE_CHECKING:
    from optuna import Study
    from optuna.storages import BaseStorage


def check_url_opens(url: str, what: str, timeout_s: float | None = None, rebuild: str = "the same command") -> None:
    """Fail early (before anything is created) when a storage URL cannot work: among others, an
    SQLite file that is damaged or not a database (``sqlitefile.damage``), with what to do
    (``what``: ``storage`` or ``tracking_uri``; ``rebuild``: the command that rebuilds MLflow's
    records from the study once its file is moved aside); ``timeout_s``: how long a PostgreSQL or
    MySQL server has to answer (else the driver's own, which may be none)."""
    path = sqlite_path(url)
    if path is not None:
        link = Path("mlruns")
        if link.is_symlink() and not link.exists() and path.absolute().is_relative_to(link.absolute()):
            raise StudyError(f"{what} {shown(url)}: mlruns is a link to {os.readlink(link)}, which does not exist "
                             "(a volume not mounted?); mount it, or remove the link")  # a fault tour's traceback
        if path.exists() and not path.is_file():
            raise StudyError(f"{what} {shown(url)}: {path} is not a file")
        parent = path.resolve().parent
        if (above := next((p for p in (parent, *parent.parents) if p.exists()), None)) and not above.is_dir():
            fix = ("move it aside: the sweep keeps its stores and trial folders in the folder mlruns"
                   if above == Path("mlruns").resolve() else "fix the URL")
            raise StudyError(f"{what} {shown(url)}: {above} is a file, not a folder; {fix}")
        if not parent.exists() and parent != Path("mlruns").resolve():
            raise StudyError(f"{what} {shown(url)}: folder {parent} does not exist; create it or fix the URL")
        if parent.exists() and not os.access(parent, os.W_OK):
            raise StudyError(f"{what} {shown(url)}: folder {parent} is not writable")
        if not parent.exists() and above is not None and not os.access(above, os.W_OK):  # mlruns, to be made
            raise StudyError(f"{what} {shown(url)}: folder {above} is not writable, so {parent} cannot be "
                             "created in it (nor the trials' folders, mlruns/.trials); run from a folder "
                             "you can write")
        check_file(url, what, rebuild)
        return
    if url.split(":", 1)[0] in ("http", "https", "databricks"):
        return
    from orchestrator.store.serverdb import foreign, table_names, unreachable

    args = {"connect_timeout": max(2, round(timeout_s))} if timeout_s is not None and \
        url.split(":", 1)[0].split("+")[0] in ("postgresql", "mysql") else {}
    try:
        tables = table_names(url, args)
    except Exception as exc:  # noqa: BLE001 - any driver error means the URL cannot be used
        said = first_line(exc)
        if unreachable(exc):
            raise StoreUnreachable(f"{what} {shown(url)}: cannot connect ({said})", said) from None
        raise StudyError(f"{what} {shown(url)}: cannot connect ({said}){database_remedy(said)}") from None
    if what == "storage" and (other := foreign(url, tables)) is not None:
        raise other


class StoreUnreachable(StudyError):
    """``check_url_opens``: a server that did not answer (refused, timed out, shutting down): a run
    waits for it up to ``search.outage_s`` as for an outage mid-sweep; a name or a password that
    is wrong is a ``StudyError`` (waiting cannot mend it). ``why``: the driver's line."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def check_file(url: str, what: str, rebuild: str = "the same command", thorough: bool = False) -> None:
    """An SQLite store's file that is damaged or not a database (``sqlitefile.damage``): one
    line naming it, with what to do (``check_url_opens``'s arguments); read-only, for the
    commands that only read too (``check``, ``report``)."""
    from orchestrator.store.sqlitefile import damage
    from orchestrator.store.writefault import damaged_remedy

    path = sqlite_path(url)
    if path is not None and (why := damage(path, thorough)) is not None:
        raise StudyError(f"{what} {shown(url)}: {path} {why}; {damaged_remedy(path, what, rebuild)}")


def create_sqlite_atomically(url: str, init: Callable[[str], None]) -> None:
    """Build a new SQLite store under a temporary name and rename it into place when its schema
    is complete. A SIGKILL during the first migrations (MLflow's alembic, Optuna's tables) would
    otherwise leave a half-made database that no later run can open."""
    path = sqlite_path(url)
    if path is None or path.exists():
        return
    for stale in path.parent.glob(f".{path.name}.init-*"):  # left by a run killed while creating
        if not _alive(stale.name.rsplit("-", 1)[-1]):  # another's, still making its own: left alone
            stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.init-{os.getpid()}")
    try:
        init(sqlite_url(tmp.resolve()))
        try:  # never over a store another run made meanwhile (two first runs in one folder)
            os.link(tmp, path)
        except FileExistsError:
            pass  # theirs is as new and as empty as ours: both use it
        except OSError:  # a file system without hard links
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half-made store (and gets its space back)


def _alive(pid: str) -> bool:
    """Whether process ``pid`` (a temporary store's suffix) still runs on this host."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, OSError):
        return True  # not a number we wrote, or another user's process: not ours to judge
    return True


@contextmanager
def study_lock(url: str, name: str, alone: str | None = None) -> Iterator[None]:
    """One orchestrator per SQLite study: SQLite cannot coordinate workers safely (notes).
    ``flock`` is released by the OS when the holder dies, even by SIGKILL. The lock file is removed
    when the run ends, still locked (a file left by a killed run goes at the next run's end): an
    orchestrator that opened it just before is told it is held, or, having locked it just after,
    finds it no longer at its path and takes the new one, so two never hold the study at once."""
    path = sqlite_path(url)
    if path is None:  # a server database: coordination is the scale-out design's job
        yield
        return
    import fcntl

    lock_path = _lock_path(path, name)
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _unwritable(url, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _held(fd, name, lock_path, alone)
            os.close(fd)
            raise held from None
        if _is_at(fd, lock_path):
            break
        os.close(fd)  # the file its last holder removed: lock the one at the path now
    try:
        os.ftruncate(fd, 0)
        try:
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as exc:
            raise _unwritable(url, exc) from None
        yield
    finally:
        try:
            os.unlink(lock_path)  # while still held: nobody else holds this file
        except OSError:
            pass
        os.close(fd)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the one at ``path`` (not one removed since it was opened)."""
    try:
        here = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def check_not_locked(url: str, name: str, alone: str | None = None) -> None:
    """Refuse at once, before the probe imports torch beside the running sweep's trials, when
    another orchestrator holds the SQLite study's lock (creates nothing; ``study_lock`` still
    decides a race). A lock file nobody holds, left by a killed run, is removed."""
    path = sqlite_path(url)
    if path is None:
        return
    import fcntl

    lock_path = _lock_path(path, name)
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _held(fd, name, lock_path, alone) from None
    else:
        if _is_at(fd, lock_path):  # left by a run that was killed: removed, still locked (study_lock)
            try:
                os.unlink(lock_path)
            except OSError:
                pass
    finally:
        os.close(fd)  # releases the lock if it was taken


def starting(url: str, name: str) -> str | None:
    """The pid of the orchestrate that holds SQLite study ``name``'s lock now (a sweep takes it
    before its probe, so one may hold it before its study exists), else None: the lock tested as
    ``check_not_locked`` tests it, shared and let go at once, the lock file left as it is."""
    import fcntl

    path = sqlite_path(url)
    if path is None:
        return None
    try:
        fd = os.open(_lock_path(path, name), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released as the file is closed
    except BlockingIOError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
    return None


def _lock_path(db: Path, name: str) -> Path:
    return db.with_name(f"{db.name}.{name}.lock")


def _held(fd: int, name: str, lock_path: Path, alone: str | None = None) -> StudyError:
    """``alone``: a command that changes a study no sweep runs (``check --repair``, ``delete``),
    named in the way forward instead of a sweep's."""
    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    forward = (f"{alone} changes a study only while no sweep runs it: run it again once that one has ended"
               if alone else "SQLite serves one orchestrator per study: wait for it, or run several at once on a "
               "PostgreSQL study (--storage postgresql://...; see docs/scale.md)")
    return StudyError(f"study {name!r} is being run by another orchestrate (pid {holder}); lock {lock_path}. {forward}")


POOL = {"pool_size": 2, "max_overflow": 2}
"""Connections one orchestrator holds to a server database for the study: the loop and the
heartbeat thread (and the MLflow writer linking a run) at once, at most 4; the study lock takes one
more while it is held (``coordination.StudyLock``)."""


def open_study(spec: SweepSpec, storage_url: str, fingerprint: dict[str, Any], sampler: Callable[[int], Any],
               outage: object = None, absent: Callable[[str], None] | None = None):
    """Create the study, or load it and check it was made from the same spec, with the sampler
    ``sampler(n)`` gives for a study of ``n`` trials (``strategy.make_sampler``). With a server
    database the storage keeps heartbeats (``coordination.Heartbeat`` records them; a trial silent
    for ``search.grace_period_s`` is stale), and every call goes through ``outage``
    (``outage.Outage``: a lost connection is waited out for up to ``search.outage_s``).
    ``absent(why)``: called where the study's SQLite file is missing or empty, or a server
    database holds no study of its name, before anything is created (it may refuse where an
    earlier study of the name left runs: ``lost``; ``orchestrate delete`` leaves none)."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from orchestrator.store.lost import why_missing
    from orchestrator.store.sqlitefile import is_empty

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = [d for _, d in spec.objective.metrics]
    kwargs = _storage_kwargs(storage_url, spec.search.grace_period_s)
    path = sqlite_path(storage_url)
    if absent is not None and path is not None and is_empty(path):
        absent(why_missing(storage_url, path))
    try:
        create_sqlite_atomically(storage_url, lambda url: new_database(url, kwargs))
        storage = _storage(storage_url, kwargs, outage)
        try:
            n_existing = storage.get_n_trials(storage.get_study_id_from_name(spec.name))
        except KeyError:  # no such study yet
            n_existing = 0
            if absent is not None and path is None:  # a server: the study gone, or --storage names another database
                absent("no study of this name in that database: it names another one, or the study was "
                       "deleted without orchestrate delete")
        study = optuna.create_study(study_name=spec.name, storage=storage, directions=directions,
                                    sampler=sampler(n_existing), load_if_exists=True)
    except SQLAlchemyError as exc:
        from orchestrator.store.writefault import LOCKED, driver_line

        found = _unwritable(storage_url, exc, None)
        if found is not None and found.cause == LOCKED:
            raise found.with_outcome(
                "another program holds a write lock; close it (an open optuna-dashboard?) and retry") from None
        if found is not None:
            raise found.with_outcome("nothing was started") from None
        raise StudyError(f"storage {shown(storage_url)}: {driver_line(getattr(exc, 'orig', None) or exc)}; the "
                         "file may be corrupt: move it aside to start a new study") from None
    except (RuntimeError, ValueError) as exc:  # e.g. a schema from an unknown Optuna version
        raise StudyError(f"storage {shown(storage_url)}: {first_line(exc, typed=False)}") from None

    stored_dirs = [d.name.lower() for d in study.directions]
    if stored_dirs != directions:
        raise mismatch(spec, storage_url, f"objective directions: stored {stored_dirs}, spec {directions}")
    attrs = StudyRecord.of(study)  # one read of the study's attributes
    stored = attrs.fingerprint
    if stored is None:
        if study.trials:
            raise mismatch(spec, storage_url, "the study was not created by orchestrate")
        write_study(study, fingerprint=fingerprint)
    if attrs.uid is None:
        import uuid

        write_study(study, uid=uuid.uuid4().hex)
    elif (what := changed(spec, storage_url, stored, as_stored(fingerprint), study.trials)) is not None:  # type: ignore[arg-type]  # no fingerprint: a new study, which has no uid yet
        write_study(study, fingerprint=fingerprint)  # no result yet: it takes the spec as it is now
        print(f"orchestrate: study {spec.name!r} has no result yet: it takes the spec as it is now ({what})",
              file=sys.stderr)
    if attrs.recorded is not None:  # this run writes MLflow: it is compared again at its end
        write_study(study, recorded=None)
    return study


def load_study(url: str, name: str, grace_s: float) -> Study:
    """Study ``name`` (which exists) to repair its records, its storage as ``open_study``'s."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=_storage(url, _storage_kwargs(url, grace_s), None))


def _storage_kwargs(url: str, grace_s: float) -> dict[str, Any]:
    """``RDBStorage``'s arguments: SQLite waits 30 s for a lock; a server database keeps
    heartbeats (a trial silent for ``grace_s`` is stale) on a bounded pool."""
    import warnings

    import optuna

    kwargs: dict[str, Any] = {}
    if is_sqlite(url):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 30}}
        return kwargs
    kwargs.update(heartbeat_interval=max(1, int(grace_s / 4)), grace_period=max(2, int(grace_s)))
    kwargs["engine_kwargs"] = {"pool_pre_ping": True, **POOL}
    if url.startswith("postgresql"):
        # Optuna compares heartbeats written with the server's now() against naive UTC
        # datetimes; a server in another time zone would make every trial look stale.
        kwargs["engine_kwargs"]["connect_args"] = {"options": "-c timezone=UTC"}
    # ask/tell with a heartbeat storage: Optuna warns that its own heartbeat thread runs only in
    # optimize(); ours (coordination.Heartbeat) does that job.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return kwargs


def new_database(url: str, kwargs: dict[str, Any]) -> None:
    """An empty Optuna SQLite database at ``url``: a copy of the first one this Optuna version
    built, which Optuna opens and checks (``templates``), else Optuna builds it."""
    import optuna

    from orchestrator.store.templates import from_template

    def opened(at: str) -> None:  # Optuna checks the schema's version as it opens a database
        optuna.storages.RDBStorage(at, **kwargs).engine.dispose()

    from_template(url, f"optuna-{optuna.__version__}-empty.db", opened, opened)


def _storage(url: str, kwargs: dict[str, Any], outage: Any) -> BaseStorage:
    """Optuna's storage for ``url``, every call through a guard: ``outage`` for a server
    database (a lost connection is waited out), else a ``writefault.WriteGuard``; either way a
    write the store refuses (a full disk, say) comes out as one line (``StoreUnwritable``)."""
    import optuna

    from orchestrator.store.optuna_internals import cached
    from orchestrator.store.outage import create, retrying_storage
    from orchestrator.store.writefault import WriteGuard, named

    if outage is None or is_sqlite(url):
        guard = WriteGuard(named("the study's store", url), "study_write", sqlite_folder(url))
        return retrying_storage(cached(guard.call(optuna.storages.RDBStorage, url, **kwargs)), guard)
    rdb = create(outage, optuna.storages.RDBStorage, url, **kwargs)
    return retrying_storage(cached(rdb), outage)


def _unwritable(url: str, exc: BaseException, default: Any = StudyError) -> Any:
    """``exc`` as the study store's ``StoreUnwritable``; where it is no write failure, a
    ``StudyError`` with its first line (or ``default``, None: None)."""
    from orchestrator.store.writefault import named, unwritable

    found = unwritable(named("the study's store", url), exc, sqlite_folder(url))
    if found is not None or default is None:
        return found
    return default(f"storage {shown(url)}: {first_line(exc, typed=False)}")
