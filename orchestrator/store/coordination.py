"""Several orchestrators on one study (Optuna's distributed mode on a server database).

- ``StudyLock``: held while an orchestrator reads what is in flight and writes its next trial's
  parameters, so two never pick the same configuration (Optuna's queue and samplers give no
  such exclusivity across processes). PostgreSQL: a session advisory lock keyed by the study,
  released by the server if the holder dies. SQLite: nothing to do (one orchestrator per study,
  ``study.study_lock``); other servers: none (documented: duplicates are possible there).
  ``NoLock`` stands in where no other orchestrator can share the study (a replay); both are a
  ``ProposalLock``, what the proposer holds.
- ``Heartbeat``: a thread that keeps this orchestrator's running trials alive in Optuna's
  heartbeat table (``storage.record_heartbeat``; Optuna's own heartbeat runs only inside
  ``study.optimize``, optuna/optuna#3293). Another orchestrator's ``recovery.fail_stale`` fails a
  trial whose heartbeat is older than ``search.grace_period_s`` and runs its configuration again.
"""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from orchestrator.timeline import event
from orchestrator.urls import is_sqlite

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from orchestrator.store.outage import Outage
    from optuna.trial import FrozenTrial


def is_shared(storage_url: str) -> bool:
    """Whether several orchestrators may share a study in this storage (a server database)."""
    return not is_sqlite(storage_url)


class ProposalLock(Protocol):
    """What the proposer holds from reading what is in flight to writing a new trial: ``StudyLock``
    (a server database's advisory lock), or ``NoLock`` where no other orchestrator shares the study."""

    retaken: int
    """How often the lock was taken again after its session died (another orchestrator may have
    held it meanwhile: what was read before is read again)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> bool | None: ...

    def confirm(self) -> None:
        """While held: take the lock again if it was lost unseen (the database restarted)."""


class NoLock:
    """The lock of a study no other orchestrator shares (a replay's, a test's): nothing to take,
    never lost (``ProposalLock``)."""

    retaken = 0

    def __enter__(self) -> "NoLock":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def confirm(self) -> None:
        return None


class StudyLock:
    """A re-entrant, cross-process lock for one study (see the module)."""

    def __init__(self, storage_url: str, study_name: str, outage: Outage | None = None, idle_s: float = 60.0) -> None:
        """``outage``: an ``outage.Outage`` guard; taking the lock waits out a lost connection.
        ``idle_s``: the lock's session is ended by the server after this long without a statement
        (PostgreSQL 14's ``idle_session_timeout``), so that a holder frozen mid-proposal (SIGSTOP,
        a suspended VM: its session stays open) does not keep every other orchestrator waiting for
        good; a live holder that took so long finds its lock gone at ``confirm`` and takes it again."""
        self._idle_ms = int(idle_s * 1000)
        self._local = threading.RLock()
        self._depth = 0
        self._conn: Connection | None = None
        self._outage = outage
        self._swap = threading.Lock()  # _conn between the holder and ``ensure`` (another thread's retry)
        self._held = False
        """The lock was taken (``__enter__`` returned) and not yet released."""
        self.retaken = 0
        """How often ``ensure`` took the lock again after its session died: meanwhile another
        orchestrator may have held it, and what was decided before is to be checked again."""
        if storage_url.startswith("postgresql"):
            import sqlalchemy

            digest = hashlib.sha256(f"orchestrate:{study_name}".encode()).digest()
            self._key = int.from_bytes(digest[:8], "big", signed=True)
            self._engine = sqlalchemy.create_engine(storage_url, poolclass=sqlalchemy.pool.NullPool)
            self._text = sqlalchemy.text
            if outage is not None:
                outage.before_retry.append(self.ensure)

    def __enter__(self) -> "StudyLock":
        self._local.acquire()
        self._depth += 1
        if self._depth == 1 and hasattr(self, "_engine"):
            event("lock_wait")  # bench/cluster.py: how long proposals wait for and hold the lock
            try:
                conn = self._outage.call(self._take) if self._outage is not None else self._take()
            except BaseException:
                self._depth -= 1
                self._local.release()
                raise
            with self._swap:
                self._conn, self._held = conn, True
            event("lock_held")
        return self

    def ensure(self) -> None:
        """While held: if the lock's connection died (the server restarted, and the lock with its
        session), take the lock again on a new one before the guarded work is retried; another
        orchestrator may hold it meanwhile, and this waits for it."""
        with self._swap:
            if not self._held:
                return  # not held (or still being taken): nothing to take again
            conn = self._conn
            if conn is not None:
                try:
                    conn.execute(self._text("SELECT 1"))
                    conn.commit()
                    return
                except Exception:  # noqa: BLE001 - dead: its lock went with its session
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                self._conn = None
            self._conn = self._take()  # raises while the server is still down: the retry waits
            self.retaken += 1

    def confirm(self) -> None:
        """While held: ``ensure``, waiting out an outage. Where the database restarted between two
        calls, Optuna's pool reconnects unseen (``pool_pre_ping``): no call fails, no retry runs
        ``ensure``, and the lock is lost without a word; a proposal confirms it before its trial
        runs (CI saw two orchestrators measure one configuration across a restart, twice)."""
        if self._outage is not None:
            self._outage.call(self.ensure)
        else:
            self.ensure()

    def _take(self) -> Connection:
        conn = self._engine.connect()
        try:
            try:
                conn.execute(self._text(f"SET idle_session_timeout = {self._idle_ms}"))
                conn.commit()
            except Exception:  # noqa: BLE001 - before PostgreSQL 14: no such setting (a frozen holder then waits)
                conn.rollback()
            conn.execute(self._text("SELECT pg_advisory_lock(:k)"), {"k": self._key})
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def __exit__(self, *exc: object) -> None:
        try:
            self._depth -= 1
            if self._depth == 0 and hasattr(self, "_engine"):
                with self._swap:
                    conn, self._conn, self._held = self._conn, None, False
                if conn is not None:
                    self._release(conn)
                    event("lock_released")
        finally:
            self._local.release()

    def _release(self, conn: Connection) -> None:
        try:
            conn.execute(self._text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
            conn.commit()
        except Exception:  # noqa: BLE001 - the connection was lost: so was the lock, with its session
            pass
        finally:
            try:
                conn.close()  # closing the session releases the lock in any case
            except Exception:  # noqa: BLE001
                pass


class Heartbeat:
    """Records a heartbeat for each trial of ``track``'s source every ``interval_s`` seconds."""

    def __init__(self, storage: Any, interval_s: float) -> None:
        self.storage, self.interval_s = storage, interval_s
        self._trial_ids: Callable[[], Iterable[int]] = lambda: ()
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def track(self, trial_ids: Callable[[], Iterable[int]]) -> None:
        """From now on, keep the trials ``trial_ids()`` lists alive (the sweep's running ones)."""
        self._trial_ids = trial_ids

    def beat(self, ids: Iterable[int]) -> None:
        for trial_id in ids:
            try:
                self.storage.record_heartbeat(trial_id)
            except Exception:  # noqa: BLE001 - a missed beat is retried; grace covers several
                self.errors += 1

    def beat_one(self, trial: FrozenTrial) -> None:
        """A trial just asked for: alive from its first moment."""
        from orchestrator.store.optuna_internals import trial_id

        self.beat([trial_id(trial)])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat(list(self._trial_ids()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
