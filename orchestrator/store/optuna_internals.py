"""The one module that uses Optuna's private API: each use is a small named function here.

Optuna's public API has no way to say some of what an ask/tell orchestrator with its own heartbeat
thread needs: which storage a study writes through, a trial's id in that storage, the stale-trial
check that ``optuna.storages.fail_stale_trials`` runs (which sets no attributes before the state,
``recovery.fail_stale``). Every function below says why the private name is needed; each was
checked against Optuna 5.0.0 (pyproject pins ``optuna>=5,<6``), and ``tests/store/
test_optuna_internals.py`` runs each against the installed Optuna, so an upgrade that moves one
fails there, in one place. ``tests/project/test_optuna_door.py`` keeps every other module off
Optuna's private names. Raw SQL against Optuna's tables has its own module, ``optuna_sql``.

Optuna is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.storages import BaseStorage, RDBStorage
    from optuna.trial import Trial
    from sqlalchemy.engine import Engine
    from optuna import Study

CHECKED_WITH = "5.0.0"
"""The Optuna version every function here was checked against (pyproject: ``optuna>=5,<6``)."""


def storage_of(study: Study) -> Any:
    """The storage ``study`` reads and writes through (what ``open_study`` gave it: a
    ``RetryingStorage`` around Optuna's ``_CachedStorage``). Private: ``Study._storage``; there is
    no public accessor, and the heartbeat and the stale-trial check are calls on the storage."""
    return study._storage


def study_id(study: Study) -> int:
    """``study``'s id in its storage, what the storage's calls take. Private: ``Study._study_id``
    (the public API names a study by its name only)."""
    return study._study_id


def trial_id(trial: Any) -> int:
    """A trial's id in its storage (an ``optuna.Trial`` or a ``FrozenTrial``), what
    ``record_heartbeat`` and the storage's other per-trial calls take. Private: ``_trial_id``
    (the public API numbers trials within a study, ``trial.number``, a different counter)."""
    return trial._trial_id


def trial_of(study: Study, frozen: object) -> Trial:
    """A live ``optuna.Trial`` for a stored ``FrozenTrial`` of ``study``, to set attributes on a
    RUNNING trial another process asked for (``recovery``: one cut off by a kill). The constructor
    ``Trial(study, trial_id)`` is public; the id it takes is private (``trial_id``)."""
    import optuna

    return optuna.trial.Trial(study, trial_id(frozen))


def heartbeat_enabled(storage: BaseStorage) -> bool:
    """Whether ``storage`` keeps heartbeats (a server database opened with a heartbeat interval).
    Private: ``optuna.storages._heartbeat.is_heartbeat_enabled`` (no public export)."""
    from optuna.storages._heartbeat import is_heartbeat_enabled

    return is_heartbeat_enabled(storage)


def stale_trial_ids(study: Study) -> list[int]:
    """Storage ids of ``study``'s RUNNING trials whose last heartbeat is older than the storage's
    grace period: the check ``optuna.storages.fail_stale_trials`` runs before it fails them itself,
    which would set the state before the trial's ``status`` (a finished trial's attributes cannot
    change). Private: ``BaseHeartbeat._get_stale_trial_ids``."""
    return storage_of(study)._get_stale_trial_ids(study_id(study))


def storage_interface() -> tuple[tuple[type, ...], frozenset[str]]:
    """What a wrapper of the study's storage (``outage.RetryingStorage``) must be, and the methods
    it must pass on: Optuna's ``BaseStorage`` and ``BaseHeartbeat`` (so that Optuna still sees
    heartbeats), and their methods: the public ones, and the private ones that Optuna calls on a
    storage and a storage must implement (``BaseHeartbeat._get_stale_trial_ids``, abstract:
    ``fail_stale_trials`` and ``stale_trial_ids`` call it). Private module:
    ``optuna.storages._heartbeat`` (no public export)."""
    from optuna.storages import BaseStorage
    from optuna.storages._heartbeat import BaseHeartbeat

    bases = (BaseStorage, BaseHeartbeat)
    names = frozenset(n for base in bases for n in vars(base)
                      if (not n.startswith("_") or n in base.__abstractmethods__) and callable(getattr(base, n)))
    return bases, names


def heartbeat_base() -> type:
    """Optuna's ``BaseHeartbeat``, the interface a storage with heartbeats implements
    (``storage_interface``)."""
    return storage_interface()[0][1]


def cached(rdb: RDBStorage) -> BaseStorage:
    """``rdb`` (an ``RDBStorage``) behind Optuna's own cache of finished trials, as
    ``optuna.create_study`` wraps a storage given by URL (``optuna.storages.get_storage``, itself
    "only for internal usage"). Private: ``optuna.storages._cached_storage._CachedStorage``."""
    from optuna.storages._cached_storage import _CachedStorage

    return _CachedStorage(rdb)


def engine_of(storage: object) -> Engine | None:
    """The SQLAlchemy engine behind a study's storage (``RDBStorage.engine``, through the
    ``RetryingStorage``'s ``inner`` and the ``_CachedStorage``), or None (not an RDB storage).
    Private: ``_CachedStorage._backend``."""
    for _ in range(3):
        if hasattr(storage, "engine"):
            return storage.engine
        storage = getattr(storage, "inner", None) or getattr(storage, "_backend", None)
    return None


def import_storage() -> None:
    """Import what opening an RDB storage imports (Optuna, and its table models, which
    ``RDBStorage`` imports lazily on first use), so that it can be done beside other work
    (``sweep/startup.warm_imports``). Private module: ``optuna.storages._rdb.models``."""
    import optuna  # noqa: F401
    import optuna.storages._rdb.models  # noqa: F401
