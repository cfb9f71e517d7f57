"""One ``orchestrate SPEC`` as its steps (``run.run``) fill it in: what each step found, for the
steps after it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.launch import StopFlag
from orchestrator.machineload import LoadLog
from orchestrator.spec.load import SweepSpec
from orchestrator.urls import Origins

if TYPE_CHECKING:
    from optuna.study import Study

    from orchestrator.launch import ProcessRunner
    from orchestrator.launch.slots import Slot
    from orchestrator.search.space import Plan
    from orchestrator.store.coordination import Heartbeat, StudyLock
    from orchestrator.store.outage import Outage
    from orchestrator.store.recovery import Recovery
    from orchestrator.store.tracking import AsyncTracker, Tracker


@dataclass
class Run:
    """One ``orchestrate SPEC`` as its steps fill it in, in the order they run."""

    spec: SweepSpec
    origins: Origins
    load: LoadLog
    """The machine's load, read before anything of the sweep's runs (others' work), then noted."""
    stop: StopFlag = field(default_factory=StopFlag)
    shared: bool = False
    """Several orchestrators may share the study (a server database)."""
    # -- the probe's: ``check_experiment``
    plan: Plan | None = None
    found: dict[str, Any] = field(default_factory=dict)
    """The probe's answer: the device, its name, torch's version, the device's memory."""
    slots: list[Slot] = field(default_factory=list)
    runner: ProcessRunner | None = None
    # -- the stores': ``open_stores``, ``recover``
    study: Study | None = None
    tracker: AsyncTracker | None = None
    """The MLflow writer, once the trials may be written."""
    sync: Tracker | None = None
    lock: StudyLock | None = None
    db: Outage | None = None
    work_dir: Path | None = None
    recovery: Recovery | None = None
    queued: dict[str, int] = field(default_factory=dict)
    superseded: dict[str, int] = field(default_factory=dict)
    limit_gib: float | None = None
    native: frozenset[str] | None = None
    heartbeat: Heartbeat | None = None
    elsewhere: str | None = None
    """A line: the study's earlier trials ran on other devices (``stores.elsewhere``)."""
    beside: str | None = None
    """A new study, where the spec's own folder holds one of its name (``studyread.beside_spec``)."""
    measured_otherwise: str | None = None
    """A line: the trial settings or the script's code changed since the study's last run
    (``stores.measured_otherwise``)."""
