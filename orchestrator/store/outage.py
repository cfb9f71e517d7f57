"""A store that goes away for a while (the study's database restarts, the tracking server is
redeployed) costs a wait, not the sweep.

Every call to the study's storage and to MLflow goes through an ``Outage`` guard: a call that fails
because the connection was lost is tried again with backoff (0.5 s doubling to 10 s), for up to
``search.outage_s`` from the first failure; the trial processes run on meanwhile, and a result
that could not be written waits in its trial's folder until the store is back. Past
``outage_s`` the guard raises ``StoreDown``: one line naming the store, exit code 75
(``exits.STORE_DOWN``), and the study resumes with the same command. A store that answers but
refuses the write (a full disk, a read-only database, a revoked grant) is not waited for: it is
``writefault.StoreUnwritable`` at once.

- ``RetryingStorage`` wraps Optuna's storage (the ``BaseStorage`` the study is given) this way,
  with the two writes that are not idempotent made safe to repeat: a retried ``tell`` whose first
  attempt had in fact been committed is recognised as done, not as a conflict.
- ``RetryingClient`` wraps ``MlflowClient`` the same way (MLflow's own HTTP retries are shortened
  so that ours, bounded by ``outage_s``, decide).
- ``server_started_at`` lets ``recovery.fail_stale`` excuse an outage: heartbeats that could not
  be written while the database was down do not make live trials look dead once it is back.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence, TypeVar

from orchestrator import exits
from orchestrator.errors import OrchestratorError, first_line
from orchestrator.redact import scrub
from orchestrator.store.writefault import unwritable

if TYPE_CHECKING:
    from optuna.storages import BaseStorage
    from optuna.study import StudyDirection
    from optuna.trial import TrialState
    from sqlalchemy.engine import Engine
    from logging import LogRecord

BACKOFF_S = (0.5, 10.0)
LOST = ("server closed the connection", "connection refused", "could not connect", "terminating connection",
        "connection reset", "connection timed out", "max retries exceeded", "broken pipe",
        "the database system is starting up", "the database system is shutting down",
        "server conn crashed", "ssl connection has been closed", "connection already closed",
        "remote end closed connection", "failed to establish a new connection", "temporarily unavailable",
        "name or service not known", "no route to host", "network is unreachable")
"""Words of a lost connection, as psycopg2, SQLAlchemy, requests and MLflow say it."""


class StoreDown(OrchestratorError):
    """A store stayed unreachable for longer than ``search.outage_s``. ``outcome``: what it
    means for the study, said by the code that knows (``sweep.run``: whether the study was opened)."""

    exit_code = exits.STORE_DOWN

    def __init__(self, what: str, outcome: str = "run the same command once it is back") -> None:
        self.what, self.outcome = what, outcome
        super().__init__(f"{what}; {outcome}")

    def with_outcome(self, outcome: str) -> "StoreDown":
        again = StoreDown(self.what, outcome)
        again.exit_code = self.exit_code
        return again


NOTICE_S = 5.0
"""A store call with no answer for this long, or a first failed one, is said on stderr, once per
outage: the wait that follows can last ``search.outage_s``."""


def _say(line: str) -> None:
    import sys

    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and what caused it, eight deep at most."""
    for _ in range(8):
        if exc is None:
            return
        yield exc
        exc = exc.__cause__ or exc.__context__


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the connection to a store was lost: a failure to
    wait out, not a mistake to report."""
    for e in _causes(exc):
        name = type(e).__name__
        text = str(e).lower()
        if name in ("OperationalError", "InterfaceError", "DisconnectionError", "ConnectionError",
                    "ConnectTimeout", "ReadTimeout", "RemoteDisconnected", "NewConnectionError"):
            if name != "OperationalError" or not _sqlite_lock(text):
                return True
        if any(word in text for word in LOST):
            return True
    return False


def _lost_cause(exc: BaseException) -> BaseException:
    """The exception that says the connection was lost, where a library wrapped it: Optuna's
    ``StorageInternalError`` says "invalid data in the commit, e.g. exceeding max length" of a
    server that went away; what caused it says "connection refused"."""
    return next((e for e in _causes(exc) if any(word in str(e).lower() for word in LOST)), exc)


def _sqlite_lock(text: str) -> bool:
    return "database is locked" in text or "no such table" in text


class Stopping(Protocol):
    """What an outage's wait reads of the sweep's ``launch.StopFlag`` (the store wing does not
    import the launcher): whether Ctrl-C or SIGTERM came, and which."""

    signum: int | None

    @property
    def tripped(self) -> bool:
        """A signal came: stop waiting."""


T = TypeVar("T")


class Guard(Protocol):
    """What a guarded storage or client calls through: an ``Outage`` (a server's store), or
    ``writefault.WriteGuard`` (SQLite's: a full disk said in one line)."""

    def call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``fn(*args, **kwargs)``, guarded."""


class Outage:
    """Retries a store's calls through a lost connection for up to ``limit_s`` (see the module).
    One per store; thread-safe (the heartbeat and the MLflow writer threads use it too)."""

    def __init__(self, store: str, limit_s: float, sleep: Callable[[float], None] = time.sleep,
                 stop: Stopping | None = None, say: Callable[[str], None] = _say) -> None:
        """``store``: how the one-line error names it (a URL already masked: ``redact.shown``);
        ``stop``: the sweep's ``launch.StopFlag``: Ctrl-C ends the wait; ``say``: where the line
        that it is waiting goes (stderr)."""
        self.store, self.limit_s, self.sleep, self.stop, self.say = store, limit_s, sleep, stop, say
        self._lock = threading.Lock()
        self._calls: dict[int, float] = {}
        """Calls in progress: their thread's id -> when they began (monotonic)."""
        self._told = False
        """The waiting line was said for the wait in progress."""
        self._watch: threading.Thread | None = None
        self.down_since: float | None = None
        """Monotonic time of the first failure of the outage in progress (None: none)."""
        self.last_ended: float | None = None
        """Monotonic time the last outage ended (a call succeeded again)."""
        self.outages = 0
        self.gave_up: StoreDown | None = None
        self.before_retry: list[Callable[[], None]] = []
        """Run before each retry (``coordination.StudyLock.ensure``: a lock held on a connection
        the outage killed is taken again before the work it guards goes on)."""

    def call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        me = threading.get_ident()
        with self._lock:
            self._calls[me] = time.monotonic()
            if self._watch is None:
                self._watch = threading.Thread(target=self._watching, name="outage-notice", daemon=True)
                self._watch.start()
        try:
            return self._call(fn, *args, **kwargs)
        finally:
            with self._lock:
                self._calls.pop(me, None)
                if not self._calls and self.down_since is None:
                    self._told = False

    def _watching(self) -> None:
        """A call with no answer for ``NOTICE_S`` (a host that drops packets: no failure to see
        for a connection timeout or two) is said, once per wait."""
        while True:
            time.sleep(1.0)
            with self._lock:
                oldest = min(self._calls.values(), default=None)
                due = oldest is not None and time.monotonic() - oldest > NOTICE_S and not self._told
                if due:
                    self._told = True
            if due:
                self.say(f"orchestrate: waiting for {self.store}: no answer for {NOTICE_S:g} s; retrying for up to "
                         f"search.outage_s={self.limit_s:g} s (Ctrl-C stops, and the same command resumes)")

    def _call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        delay = BACKOFF_S[0]
        retry = False
        while True:
            if self.gave_up is not None:
                raise self.gave_up
            try:
                if retry:
                    for hook in self.before_retry:
                        hook()
                retry = True
                value = fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - sorted below: only a lost connection is waited out
                if (refused := unwritable(self.store, exc)) is not None:
                    raise refused from None  # a full disk or a revoked grant: no wait brings it back
                if not connection_lost(exc):
                    raise
                self._failed(exc)
                if self.stop is not None and self.stop.tripped:
                    stopped = StoreDown(f"stopped while {self.store} was unreachable")
                    stopped.exit_code = exits.for_signal(self.stop.signum or 2)
                    raise stopped from None
                self.sleep(delay)
                delay = min(delay * 2, BACKOFF_S[1])
                continue
            if self.down_since is not None:
                self._recovered()
            return value

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            now = time.monotonic()
            if self.down_since is None:
                self.down_since = now
                self.outages += 1
            tell = not self._told
            self._told = True
            if now - self.down_since > self.limit_s:
                self.gave_up = StoreDown(
                    f"{self.store} was unreachable for {now - self.down_since:.0f} s, more than "
                    f"search.outage_s={self.limit_s:g} ({scrub(first_line(_lost_cause(exc)))})")
                raise self.gave_up from None
        if tell:
            self.say(f"orchestrate: {self.store} is unreachable ({scrub(first_line(_lost_cause(exc)))}); retrying for up to "
                     f"search.outage_s={self.limit_s:g} s (Ctrl-C stops, and the same command resumes)")

    def _recovered(self) -> None:
        """The outage is over: said where its start was (a tour saw "is unreachable", then "no
        answer for 5 s" of the next slow call, and no line saying it had come back)."""
        with self._lock:
            told, since = self._told, self.down_since
            if since is not None:
                self.down_since, self.last_ended = None, time.monotonic()
                self._told = False
        if told and since is not None:
            self.say(f"orchestrate: {self.store} answers again, after {time.monotonic() - since:.0f} s; going on")

    def recently(self, within_s: float) -> bool:
        """An outage is in progress or ended less than ``within_s`` ago."""
        now = time.monotonic()
        return self.down_since is not None or (self.last_ended is not None and now - self.last_ended < within_s)


def create(outage: Guard, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``outage.call`` for a call that creates a store's tables (MLflow's and Optuna's first
    connection to a new database): two orchestrators whose creation an outage interrupted can
    meet in it (a driver's own reconnect loop may finish one after the study lock was lost), and
    the one that loses the race sees "already exists"; by then the tables are there, so it tries
    again, a few times."""
    for attempt in range(5):
        try:
            return outage.call(fn, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - only the creation race is retried
            text = str(exc).lower()
            if attempt == 4 or not ("already exists" in text or "uniqueviolation" in text or
                                    "duplicate key" in text):
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


class _Guarded(Protocol):
    """The ``RetryingStorage`` its methods see: Optuna's storage, and the guard each call goes through."""

    inner: BaseStorage
    outage: Guard


def retrying_storage(inner: BaseStorage, outage: Guard) -> BaseStorage:
    """``inner`` (an Optuna ``BaseStorage`` with heartbeats) with every call guarded."""
    from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError

    from orchestrator.store.optuna_internals import storage_interface

    bases, names = storage_interface()  # Optuna's private names stay behind the door

    def guarded(name: str) -> Callable[..., Any]:
        def method(self: _Guarded, *args: object, **kwargs: object) -> object:
            return self.outage.call(getattr(self.inner, name), *args, **kwargs)
        method.__name__ = name
        return method

    def set_trial_state_values(self: _Guarded, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        """A retried ``tell`` whose first try was committed after all is done, not a conflict."""
        tries = [0]

        def tell() -> bool:
            tries[0] += 1
            try:
                return self.inner.set_trial_state_values(trial_id, state, values)
            except UpdateFinishedTrialError:
                if tries[0] > 1:
                    done = self.inner.get_trial(trial_id)
                    if done.state == state and (values is None or list(done.values or []) == list(values)):
                        return True
                raise
        return self.outage.call(tell)

    def create_new_study(self: _Guarded, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        tries = [0]

        def create() -> int:
            tries[0] += 1
            try:
                return self.inner.create_new_study(directions, study_name)
            except DuplicatedStudyError:
                if tries[0] > 1 and study_name is not None:
                    return self.inner.get_study_id_from_name(study_name)
                raise
        return self.outage.call(create)

    def getattr_(self: _Guarded, name: str) -> Any:  # the inner storage's other public attributes
        if name.startswith("_") and not name.startswith("__"):
            raise AttributeError(f"{name}: a private name of Optuna's storage is reached through "
                                 "store/optuna_internals.py, not passed on")
        target = getattr(self.inner, name)
        return (lambda *a, **k: self.outage.call(target, *a, **k)) if callable(target) else target

    namespace: dict[str, Any] = {n: guarded(n) for n in names}
    namespace.update(set_trial_state_values=set_trial_state_values, create_new_study=create_new_study,
                     __getattr__=getattr_, __doc__="Optuna's storage, each call through an Outage guard.")
    storage = type("RetryingStorage", bases, namespace)()
    storage.inner, storage.outage = inner, outage
    return storage


class RetryingClient:
    """``MlflowClient`` with every call through ``outage`` (see the module)."""

    def __init__(self, client: object, outage: Guard) -> None:
        self._client, self._outage = client, outage

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if not callable(target):
            return target
        return lambda *a, **k: self._outage.call(target, *a, **k)


def shorten_mlflow_retries() -> None:
    """MLflow retries an HTTP request 7 times with a doubling backoff (minutes) before it gives up;
    ours, bounded by ``search.outage_s``, should decide instead. Only where the user set nothing."""
    for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1"), ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")):
        os.environ.setdefault(name, value)


class _LostConnectionFilter:
    """Drops MLflow's own log records of a lost connection (its SQL store logs each with a
    traceback): the guard waits them out and, past ``outage_s``, says so in one line."""

    def filter(self, record: LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and connection_lost(exc):
            return False
        return not (record.name.startswith("mlflow") and any(word in record.getMessage().lower() for word in LOST))


def quiet_lost_connections() -> None:
    """Install ``_LostConnectionFilter`` on MLflow's loggers (once)."""
    import logging

    for name in ("mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store", "mlflow.utils.rest_utils",
                 "mlflow.tracking"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _LostConnectionFilter) for f in logger.filters):
            logger.addFilter(_LostConnectionFilter())


def mlflow_pool() -> None:
    """MLflow's connections to a tracking database, bounded like the study's (``study.POOL``):
    its writer thread and the loop's calls, at most 3. Only where the user set nothing."""
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_POOL_SIZE", "2")
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW", "1")


def server_started_at(engine: Engine | None) -> float | None:
    """How many seconds ago the PostgreSQL server (re)started, by its own clock; None elsewhere."""
    if engine is None or engine.dialect.name != "postgresql":
        return None
    import sqlalchemy

    with engine.connect() as conn:
        return float(conn.execute(sqlalchemy.text(
            "SELECT EXTRACT(EPOCH FROM (now() - pg_postmaster_start_time()))")).scalar())  # type: ignore[arg-type]  # the query always gives a number
