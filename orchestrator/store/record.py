"""One trial's record: what the orchestrator keeps about a trial in Optuna's user attributes.

The only module that reads or writes a trial's user attributes. ``TrialRecord.of(trial)`` reads
them (from an Optuna ``FrozenTrial``, a live ``Trial`` or a ``studyread.StoredTrial``) into typed
fields; ``write(trial, ...)`` and ``enqueue(study, params, ...)`` write them, by the record's field
names, each value as stored since the first version (a ``Status`` as its string). Nothing else
names a key.

What is stored, by who writes it:
  - the outcome (``records.tell``): ``status``, ``metrics``, ``detail``, and where and how it
    ran: ``duration_s``, ``trial_dir``, ``process_peak_rss_gib``, ``slot``, ``host``,
    ``gpu_index``, ``gpu_uuid``, ``cpu_cores``, ``started_at``, ``slot_free_at``, ``processes``,
    ``repeat_metrics``, ``env``, ``mlflow_run_id``; a predicted OOM: ``reason``, ``predicted_by``;
  - a proposal answered without a process (``proposer``): ``status`` ``repeat`` with
    ``repeat_of``, or ``deferred`` with ``deferred_to``; the asking orchestrator: ``orchestrator``;
  - a queued configuration (``proposer``, ``recovery``): ``chosen_by``, ``neighbour_of``,
    ``retry_of``, ``retry_reason``, ``remeasure_of``; a measured-again result: ``measurements``;
  - a trial cut off (``loop``, ``recovery``): ``status`` ``interrupted``, ``detail``.

A status this version does not know (written by a newer one) reads as ``Status.UNKNOWN``: not a
result, not run again; ``status_text`` keeps the string for the report's rows and the MLflow tag
a repair writes. Attributes it does not know are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Iterable, Protocol, TypedDict

from orchestrator.outcome import INFEASIBLE, Status
from orchestrator.store.moved import trial_dir

if TYPE_CHECKING:
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial
    from optuna import Study
    from typing_extensions import Unpack


class HasAttrs(Protocol):
    """A trial as the record reads it: an Optuna ``FrozenTrial`` or ``Trial``, or a ``studyread.StoredTrial``."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


class Writable(Protocol):
    """A trial the record writes to: an Optuna ``Trial`` (or ``FrozenTrial``)."""

    def set_user_attr(self, key: str, value: object) -> None: ...


class RecordValues(TypedDict, total=False):
    """What ``write``, ``write_stored`` and ``enqueue`` take: ``TrialRecord``'s fields by name (a
    ``Status`` or its string for ``status``; None stores null)."""

    status: Status | str | None
    metrics: dict[str, Any] | None
    detail: str | None
    duration_s: float | None
    process_peak_rss_gib: float | None
    trial_dir: str | None
    slot: str | None
    host: str | None
    gpu_index: int | None
    gpu_uuid: str | None
    cpu_cores: str | None
    started_at: float | None
    slot_free_at: float | None
    processes: int | None
    repeat_metrics: list[Any] | None
    env: dict[str, str] | None
    mlflow_run_id: str | None
    reason: str | None
    predicted_by: int | None
    repeat_of: int | None
    deferred_to: int | None
    neighbour_of: int | None
    retry_of: int | None
    retry_reason: str | None
    chosen_by: str | None
    remeasure_of: int | None
    measurements: int | None
    orchestrator: str | None
    worker: str | None

NOT_RESULTS = ("repeat_of", "deferred_to")
"""Attributes of trials that ran nothing (they answered a proposal from the record)."""


@dataclass(frozen=True)
class TrialRecord:
    """A trial's user attributes, typed. A field is None when the trial has no such attribute
    (or it was stored as null)."""

    status: Status | None = None
    """None until the trial is told (in flight, queued); ``UNKNOWN`` for a string this version
    does not know."""
    status_text: str | None = None
    """The status as stored: ``status``'s value, or the unknown string itself (shown, and copied to
    MLflow by a repair, as it is)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The measured metrics by name (``metrics``), empty when none were."""
    detail: str | None = None
    """What went wrong, or why it was not run, for a person."""
    duration_s: float | None = None
    """Wall time of the trial's process(es)."""
    process_peak_rss_gib: float | None = None
    trial_dir: str | None = None
    """The trial's folder (``config.json``, ``result.json``, ``trial.log``)."""
    slot: str | None = None
    """The device slot it ran on (``cpu``, ``cuda:0``, ...)."""
    host: str | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    cpu_cores: str | None = None
    started_at: float | None = None
    """When its process started, on the sweep's clock."""
    slot_free_at: float | None = None
    """When the slot's previous process had exited, on the sweep's clock."""
    processes: int | None = None
    """Processes run for it (``trial.repeats`` > 1 only)."""
    repeat_metrics: list[Any] | None = None
    env: dict[str, str] | None = None
    """Environment variables the trial was given."""
    mlflow_run_id: str | None = None
    reason: str | None = None
    """Why it was not run (``predicted_oom``)."""
    predicted_by: int | None = None
    """The trial whose OOM predicted this one's."""
    repeat_of: int | None = None
    """Answered from this trial's result (status ``repeat``)."""
    deferred_to: int | None = None
    """Stepped aside for this trial in flight (-1: the configuration failed in this run)."""
    neighbour_of: int | None = None
    """Queued as the nearest unmeasured configuration to this trial's."""
    retry_of: int | None = None
    """Runs again the configuration of this trial, which ended ``retry_reason``."""
    retry_reason: str | None = None
    chosen_by: str | None = None
    """Why the ``auto`` search queued it."""
    remeasure_of: int | None = None
    """Measures this trial's configuration again (the ``auto`` search, ``trial.repeats: auto``):
    its result combines both trials' measurements, and supersedes that trial's."""
    measurements: int | None = None
    """Trials that measured its configuration, this one included (with ``remeasure_of``)."""
    orchestrator: str | None = None
    """The orchestrator that asked for it (shared studies)."""
    worker: str | None = None

    @classmethod
    def of(cls, trial: HasAttrs) -> TrialRecord:
        """The record of ``trial`` (anything with Optuna's ``user_attrs``)."""
        attrs = trial.user_attrs
        known = {k: v for k, v in attrs.items() if k in FIELDS}
        known["status"] = settled(Status.read(attrs.get("status")), trial)
        known["status_text"] = attrs.get("status")
        known["metrics"] = attrs.get("metrics") or {}
        known["trial_dir"] = trial_dir(attrs.get("trial_dir"))  # where it is now, if the project moved
        return cls(**known)

    @property
    def is_attempt(self) -> bool:
        """It ran (or skipped) its configuration, as opposed to answering it from the record."""
        return self.repeat_of is None and self.deferred_to is None

    @property
    def ran_here(self) -> bool:
        """Its folder is on this host's disk (recorded here, or before hosts were recorded)."""
        import socket

        return self.host is None or self.host == socket.gethostname()

    @property
    def process_count(self) -> int:
        return self.processes if self.processes is not None else 1

    def metric(self, name: str) -> Any:
        return self.metrics.get(name)

    def stored(self, name: str) -> bool:
        """Whether the attribute ``name`` is set (not None)."""
        return getattr(self, name) is not None


FIELDS = frozenset(f.name for f in fields(TrialRecord)) - {"status_text"}
"""The attributes a trial may have (``status_text`` is ``status`` as stored, not an attribute)."""


def status_of(trial: HasAttrs) -> Status | None:
    """``TrialRecord.of(trial).status``, without reading the rest (for loops over every trial)."""
    return settled(Status.read(trial.user_attrs.get("status")), trial)


def metrics_of(trial: FrozenTrial) -> dict[str, Any]:
    """``TrialRecord.of(trial).metrics``, without reading the rest."""
    return trial.user_attrs.get("metrics") or {}


def settled(status: Status | None, trial: object) -> Status | None:
    """The status, unless Optuna's final state contradicts it: then ``INTERRUPTED``. ``tell`` writes
    the attributes, then the state (ok: COMPLETE; not fitting: PRUNED; the rest: FAIL). Another
    orchestrator that declared the trial dead (no heartbeat, ``recovery.fail_stale``) writes
    ``interrupted`` and then FAIL; when the trial's own tell wrote its attributes in between, the
    trial is FAIL with the late ``ok``, and its result was discarded by its orchestrator (its
    configuration runs again): it must not count as a result."""
    state = getattr(trial, "state", None)
    if status is None or status in (Status.UNKNOWN, Status.INTERRUPTED) or state is None or not state.is_finished():
        return status
    expected = "COMPLETE" if status is Status.OK else "PRUNED" if status in INFEASIBLE else "FAIL"
    return status if state.name == expected else Status.INTERRUPTED


def is_attempt(trial: FrozenTrial) -> bool:
    """``TrialRecord.of(trial).is_attempt``, without reading the rest."""
    attrs = trial.user_attrs
    return not any(k in attrs for k in NOT_RESULTS)


def has_status(trial: FrozenTrial) -> bool:
    """Whether the trial was told a status (any, known or not)."""
    return "status" in trial.user_attrs


def attrs_of(trial: HasAttrs, names: tuple[str, ...]) -> dict[str, Any]:
    """The attributes ``names`` the trial has, as stored (MLflow tags copy some: ``records.TRACE_ATTRS``)."""
    _check(names)
    attrs = trial.user_attrs
    return {k: attrs[k] for k in names if k in attrs}


def write(trial: Writable, **values: Unpack[RecordValues]) -> None:
    """Set the trial's attributes ``values`` (names of ``TrialRecord``'s fields), in that order; a
    ``Status`` is stored as its string, None as null."""
    _check(values)
    for k, v in values.items():
        trial.set_user_attr(k, _plain(v))


def write_stored(storage: BaseStorage, trial_id: int, **values: Unpack[RecordValues]) -> None:
    """``write`` for a trial known only by its storage id (another orchestrator's, being failed
    by ``recovery.fail_stale``)."""
    _check(values)
    for k, v in values.items():
        storage.set_trial_user_attr(trial_id, k, _plain(v))


def enqueue(study: Study, params: dict[str, Any], **values: Unpack[RecordValues]) -> None:
    """Queue ``params`` in Optuna with the attributes ``values`` (``write``'s names); none: none."""
    _check(values)
    study.enqueue_trial(params, user_attrs={k: _plain(v) for k, v in values.items()} if values else None)


def _plain(value: object) -> object:
    return value.value if isinstance(value, Status) else value


def _check(names: Iterable[str]) -> None:
    wrong = [k for k in names if k not in FIELDS]
    if wrong:
        raise TypeError(f"not fields of TrialRecord: {', '.join(wrong)} (fields: {', '.join(sorted(FIELDS))})")
