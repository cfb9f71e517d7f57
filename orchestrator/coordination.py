"""Several orchestrators on one study (Optuna's distributed mode on a server database).

- ``StudyLock``: held while an orchestrator reads what is in flight and writes its next trial's
  parameters, so two never pick the same configuration (Optuna's queue and samplers give no
  such exclusivity across processes). PostgreSQL: a session advisory lock keyed by the study,
  released by the server if the holder dies. SQLite: nothing to do (one orchestrator per study,
  ``study.study_lock``); other servers: none (documented: duplicates are possible there).
- ``Heartbeat``: a thread that keeps this orchestrator's running trials alive in Optuna's
  heartbeat table (``storage.record_heartbeat``; Optuna's own heartbeat runs only inside
  ``study.optimize``, optuna/optuna#3293). Another orchestrator's ``recovery.fail_stale`` fails a
  trial whose heartbeat is older than ``search.grace_period_s`` and runs its configuration again.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, Iterable


def is_shared(storage_url: str) -> bool:
    """Whether several orchestrators may share a study in this storage (a server database)."""
    return not storage_url.startswith("sqlite")


class StudyLock:
    """A re-entrant, cross-process lock for one study (see the module)."""

    def __init__(self, storage_url: str, study_name: str) -> None:
        self._local = threading.RLock()
        self._depth = 0
        self._conn: Any = None
        if storage_url.startswith("postgresql"):
            import sqlalchemy

            digest = hashlib.sha256(f"orchestrate:{study_name}".encode()).digest()
            self._key = int.from_bytes(digest[:8], "big", signed=True)
            self._engine = sqlalchemy.create_engine(storage_url, poolclass=sqlalchemy.pool.NullPool)
            self._text = sqlalchemy.text

    def __enter__(self) -> "StudyLock":
        self._local.acquire()
        self._depth += 1
        if self._depth == 1 and hasattr(self, "_engine"):
            self._conn = self._engine.connect()
            self._conn.execute(self._text("SELECT pg_advisory_lock(:k)"), {"k": self._key})
            self._conn.commit()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._depth -= 1
            if self._depth == 0 and self._conn is not None:
                try:
                    self._conn.execute(self._text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
                    self._conn.commit()
                finally:
                    self._conn.close()  # closing the session releases the lock in any case
                    self._conn = None
        finally:
            self._local.release()


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

    def beat_one(self, trial: Any) -> None:
        """A trial just asked for: alive from its first moment."""
        self.beat([trial._trial_id])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat(list(self._trial_ids()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
