"""The sweep's stores, as ``run.run`` opens and holds them: the study (created or resumed, checked
against the spec, locked) and MLflow's parent run; what a killed predecessor left, repaired; and
what a store failing means by how far the run got."""

from __future__ import annotations

import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from orchestrator import trialdir
from orchestrator.launch import StopFlag
from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec
from orchestrator.timeline import event
from orchestrator.urls import absolute_uri, is_sqlite

if TYPE_CHECKING:
    from optuna.study import Study

    from orchestrator.search.space import Plan
    from orchestrator.store.outage import Outage
    from orchestrator.sweep.state import Run

STOPPED = ("the sweep stopped: no trial was started after it, the trial(s) in flight run again when it resumes, "
           "and the study keeps every result told before it: run the same command once it can be written")
MOVED = ("the sweep stopped, no trial was started after it: the results told before it are in that file; if it was "
         "moved, put it back and run the same command to resume, else start a new study with --new-study")
"""The study's SQLite file gone from its path mid-sweep (``writefault.MOVED``): what to do instead
of waiting for it to be writable. (MLflow's file gone: the sweep goes on, and the next run writes
its records anew from the study, as after a full disk.)"""


@contextmanager
def study_held(r: Run) -> Iterator[None]:
    """The study's lock (one orchestrator per SQLite study), from before the probe to the end: a
    ``report`` or ``best`` run while the probe and the smoke step make no study yet is told that
    a sweep is starting (``study.starting``), not to run the sweep first. The ``mlruns`` folder it
    makes for the lock is removed again, empty, where the run ends before its stores were opened
    (a broken experiment leaves nothing behind)."""
    from orchestrator.store.study import study_lock
    from orchestrator.store.writefault import StoreUnwritable

    made = not os.path.lexists("mlruns")
    Path("mlruns").mkdir(exist_ok=True)  # the default study's folder, where its lock file is
    try:
        with ExitStack() as held:
            try:
                held.enter_context(study_lock(r.spec.storage, r.spec.name))
            except StoreUnwritable as exc:  # its folder read-only, say: only taking it is said here
                raise exc.with_outcome("nothing was started: run the same command once it can be written") from None
            yield
    finally:
        if made:
            try:
                os.rmdir("mlruns")  # only where nothing was made in it
            except OSError:
                pass


@contextmanager
def stores_held(r: Run) -> Iterator[None]:
    """While the sweep runs, a store that fails says what that means by how far the run got; the
    heartbeat stops at the end."""
    from orchestrator.store.outage import StoreDown
    from orchestrator.store.writefault import MOVED as FILE_MOVED, StoreUnwritable

    try:
        yield
    except StoreDown as exc:  # unreachable past search.outage_s: what it means depends on how far it got
        if r.study is None:
            raise exc.with_outcome("nothing was started: run the same command once it is back") from None
        raise exc.with_outcome("the study keeps every result told before it: run the same command to resume "
                               "once it is back") from None
    except KeyError as exc:  # Optuna's "Record does not exist.": the study deleted under the sweep
        if r.study is None or not _study_gone(r):
            raise
        from orchestrator.errors import StudyError

        raise StudyError(f"study '{r.spec.name}' in {shown(absolute_uri(r.spec.storage))} was deleted while this "
                         "sweep ran (orchestrate delete, from another host?): its trials in flight were stopped and "
                         "nothing more was written; run the same command with --new-study to start it again") from exc
    except StoreUnwritable as exc:  # a full disk, say: one line, and what it means for the sweep
        if r.tracker is None:
            raise exc.with_outcome("nothing was started: run the same command once it can be written") from None
        from orchestrator.store.converge import abandon

        abandon(r.tracker, None if r.shared else r.work_dir)
        raise exc.with_outcome(MOVED if exc.cause == FILE_MOVED else STOPPED) from None
    finally:
        if r.heartbeat is not None:
            r.heartbeat.stop()


def _study_gone(r: Run) -> bool:
    """Whether the sweep's study is no longer in its database."""
    import optuna

    try:
        return r.spec.name not in optuna.get_all_study_names(r.spec.storage)
    except Exception:  # noqa: BLE001 - unreadable: not known to be gone
        return False


def open_stores(r: Run, new_study: bool) -> None:
    """The study, created or resumed and checked against the spec, and MLflow's parent run, under
    the study's coordination lock (several orchestrators starting at once: one creates, the
    others load); what the machine allows, recorded with the study."""
    from orchestrator.machine import facts
    from orchestrator.search.space import fingerprint
    from orchestrator.search.strategy import make_sampler
    from orchestrator.store.coordination import StudyLock
    from orchestrator.store.moved import moved_lines
    from orchestrator.store.study import open_study
    from orchestrator.store.studyrecord import StudyRecord, write_study
    from orchestrator.store.tracking import Tracker

    spec, plan = r.spec, r.plan
    assert plan is not None
    r.db, runs = outages(spec, r.stop)
    r.lock = StudyLock(spec.storage, spec.name, r.db, idle_s=max(30.0, 2 * spec.search.grace_period_s))
    with r.lock:
        r.sync = Tracker(spec.tracking_uri, spec.name, runs, swept=tuple(plan.searched))
        for line in moved_lines(r.sync.moved, spec.tracking_uri):
            print(f"orchestrate: {line}")
        worker = os.getpid() if r.shared else 0
        r.study = study = open_study(spec, spec.storage, fingerprint(spec, plan), lambda n: make_sampler(spec, n, worker),
                                     outage=r.db, absent=None if new_study else _not_replaced(spec, r.sync))
        from orchestrator.store.studyread import beside_spec

        if (beside := beside_spec(spec)) is not None and not study.get_trials(deepcopy=False):  # new here
            r.beside = beside
        recorded = StudyRecord.of(study)  # one read of the study's attributes
        r.limit_gib, r.native = memory_limit(spec, plan, r.found), native_half_of(plan)  # read once
        now = {**facts(plan.devices), "slots": [s.name for s in r.slots]}  # read once, for both
        r.elsewhere = elsewhere(recorded.machine, study, now)
        record_machine(study, now, r.limit_gib, r.native, recorded.machine)
        r.measured_otherwise = measured_otherwise(spec, study, recorded.measured_with)
        parent = r.sync.open_parent(spec.name, shown(absolute_uri(spec.storage)), spec.path, recorded.uid)  # type: ignore[arg-type]  # open_study wrote the uid
        if recorded.parent_run_id != parent:
            write_study(study, parent_run_id=parent)
    event("stores_opened")
    r.work_dir = trialdir.root(spec.name, recorded.uid)  # type: ignore[arg-type]  # open_study wrote the uid


MEASURING = ("warmup_steps", "measure_steps", "min_measure_s", "precision", "repeats")
"""The trial settings that shape a measurement (``timeout_s`` only ends one)."""


def measured_otherwise(spec: SweepSpec, study: "Study", before: dict[str, Any] | None) -> str | None:
    """What shapes this run's measurements (``MEASURING``, a script spec's file digest), kept with
    the study; a line where it changed since the study's last run and the study holds results,
    which are then ranked with results measured otherwise (a tour: a script slowed 5x between two
    runs, and windows of 1.5 s and 0.3 s, ranked together with nothing said)."""
    from orchestrator.scriptsource import digest
    from orchestrator.store.fingerprint import holds_results
    from orchestrator.store.studyrecord import write_study

    now: dict[str, Any] = {"trial": {k: getattr(spec.trial, k) for k in MEASURING},
                           "script_sha256": digest(str(spec.script_file)) if spec.script_file is not None else None}
    if before == now:
        return None
    write_study(study, measured_with=now)
    if before is None or not holds_results(study.get_trials(deepcopy=False)):
        return None
    was = before.get("trial") or {}
    changes = [f"trial.{k} {was.get(k)} -> {now['trial'][k]}" for k in MEASURING if was.get(k) != now["trial"][k]]
    old_sha, new_sha = before.get("script_sha256"), now["script_sha256"]
    if old_sha and new_sha and old_sha != new_sha:
        changes.append(f"{spec.script} changed (sha256 {old_sha[:8]} -> {new_sha[:8]})")
    if not changes:
        return None
    return (f"  since this study's last run: {'; '.join(changes)}: the results measured before are ranked with "
            "those measured now; give the spec a new `name:` to measure apart")


def recover(r: Run, retry: tuple[str, ...]) -> None:
    """What a killed predecessor left is repaired (``recovery``), ``--retry``'s results queued
    again; then MLflow's writer starts, and the heartbeat where several share the study."""
    from orchestrator.store.coordination import Heartbeat
    from orchestrator.store.optuna_internals import storage_of
    from orchestrator.store.recovery import Recovery
    from orchestrator.store.tracking import AsyncTracker

    assert r.study is not None and r.sync is not None and r.lock is not None and r.work_dir is not None
    from orchestrator.search.space import contains

    plan = r.plan
    assert plan is not None
    r.recovery = Recovery(r.study, r.sync, r.work_dir, r.shared, r.spec.search.grace_period_s, r.db,
                          lambda params: contains(plan, params))
    with r.lock:
        r.recovery.recover()  # the trials cut off become interrupted: queued below, counted in the header
        r.queued, r.superseded = r.recovery.retry_queue(retry)
    r.tracker = AsyncTracker(r.sync)
    assert r.runner is not None
    r.runner.open(r.work_dir)
    if r.shared:
        r.heartbeat = Heartbeat(storage_of(r.study), max(1.0, r.spec.search.grace_period_s / 4))


def _not_replaced(spec: SweepSpec, tracker: Any) -> Callable[[str], None]:
    """``open_study``'s ``absent``: a missing study is refused where an earlier one of its name
    left runs (``lost``); ``--new-study`` starts one anyway."""
    from orchestrator.store.lost import found_runs, refuse
    from orchestrator.urls import absolute_uri

    def absent(why: str) -> None:
        found = found_runs(spec.name, tracker.client, tracker.experiment_id, Path("mlruns/.trials").resolve())
        if found:
            raise refuse(spec.name, absolute_uri(spec.storage), why, found)
    return absent


def outages(spec: SweepSpec, stop: StopFlag) -> tuple[Outage | None, Outage | None]:
    """The ``outage.Outage`` guards of the study's database and the tracking store: a lost
    connection to a server is waited out for ``search.outage_s`` (a local SQLite file needs none)."""
    from orchestrator.store.outage import Outage

    def guard(url: str, what: str) -> Outage | None:
        if is_sqlite(url):
            return None
        return Outage(f"the {what} {shown(url)}", spec.search.outage_s, stop=stop)
    return guard(spec.storage, "study's database"), guard(spec.tracking_uri, "tracking store")


def record_machine(study: Study, machine: dict[str, Any], limit_gib: float | None, native: frozenset[str] | None,
                   recorded: dict[str, Any] | None) -> None:
    """What the study runs on, for a later run of the finished study to check without a probe
    (``resume``); ``machine``: ``machine.facts`` and the slots; ``native``: ``native_half_of``;
    ``recorded``: what the study holds now."""
    from orchestrator.store.studyrecord import write_study

    now = {**machine, "memory_limit_gib": limit_gib}
    if native is not None:
        now["native_half"] = sorted(native)
    if recorded != now:
        write_study(study, machine=now)


def elsewhere(recorded: dict[str, Any] | None, study: Study, now: dict[str, Any]) -> str | None:
    """A line for a study whose earlier trials ran on other devices than this run's (``now``:
    ``machine.facts`` and the slots; other GPUs, CPU slots of other widths, another torch): its
    results are ranked with this run's, so the user should know; None where they ran alike, or
    where nothing ran before."""
    if not recorded or not study.get_trials(deepcopy=False):
        return None
    if _measured_on(recorded) == _measured_on(now):
        return None
    return (f"  the study's earlier trials ran on {_said(recorded)}, this run's trials run on {_said(now)}: "
            "their results are ranked together (to keep them apart, give the spec another name)")


def _measured_on(machine: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two trials' figures comparable: torch, the devices' names, and each CPU slot's
    cores (a GPU's index does not matter; a CPU slot's width does)."""
    names = _names(machine)
    cpus = sorted(d for d in machine.get("slots") or machine.get("devices") or () if d.startswith("cpu"))
    return machine.get("torch_version"), names, [_width(d) for d in cpus]


def _width(device: str) -> int | None:
    """A CPU slot's cores (``cpu:2-5``: 4); None for the whole CPU (``cpu``)."""
    first, _, last = device.partition(":")[2].partition("-")
    return int(last or first) - int(first) + 1 if first.isdigit() else None


def _names(machine: dict[str, Any]) -> list[str]:
    return sorted({n for found in (machine.get("device_names") or {}).values() for n in found or ()})


def _said(machine: dict[str, Any]) -> str:
    names = _names(machine)
    return (f"{', '.join(machine.get('slots') or machine.get('devices') or ['?'])} ({', '.join(names) or 'unnamed'}), "
            f"torch {machine.get('torch_version')}")


def native_half_of(plan: Plan) -> frozenset[str] | None:
    """On a CPU, the half precisions its trials have instructions for (the planner's dtype prior):
    from the CPU's flags and a fixed ``cpu_isa`` cap; None elsewhere, or with ``cpu_isa`` swept."""
    from orchestrator.machine import cpu_flags, native_half

    if plan.device != "cpu" or "cpu_isa" in plan.searched:
        return None
    return native_half(cpu_flags(), plan.fixed.get("cpu_isa"))


def memory_limit(spec: SweepSpec, plan: Plan, probe: dict[str, Any]) -> float | None:
    """What one trial may use on the device, in GiB, where the probe knows it: a CUDA GPU's memory
    times a fixed ``memory_fraction`` (a swept fraction, or another device: learned from the
    trials instead, ``feasibility``)."""
    total = probe.get("total_memory_gib")
    if plan.device != "cuda" or not total or "memory_fraction" in plan.searched:
        return None
    return float(total) * float(plan.fixed.get("memory_fraction", 1.0))
