"""``orchestrate SPEC``: check, open, recover, then drive the sweep loop and print its summary.

Start-up overlaps its slow parts (``startup.py``): the slot's fork server starts first and answers
the experiment probe (one import of torch, which the trials then share), while MLflow and Optuna
are imported; nothing is written to disk before the spec, the storage URLs and the experiment
have been checked.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import exits
from orchestrator.errors import SpecError, StudyError
from orchestrator import machineload
from orchestrator.launch import StopFlag
from orchestrator.invocation import command
from orchestrator.machineload import LoadLog, kept
from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec
from orchestrator.sweep.startup import Startup, warm_imports
from orchestrator.urls import Origins, is_sqlite
from orchestrator.timeline import event

if TYPE_CHECKING:
    from optuna.study import Study

    from orchestrator.launch import ProcessRunner
    from orchestrator.launch.slots import Slot
    from orchestrator.outcome import Outcome
    from orchestrator.search.space import Plan
    from orchestrator.store.outage import Outage
    from orchestrator.store.recovery import Recovery
    from orchestrator.store.tracking import AsyncTracker
    from orchestrator.sweep.loop import Sweep, SweepResult

STOPPED = ("the sweep stopped: no trial was started after it, the trial(s) in flight run again when it resumes, "
           "and the study keeps every result told before it: run the same command once it can be written")


def run(spec: SweepSpec, export: Path | None = None, retry: tuple[str, ...] = (), check: bool = True,
        devices_flag: bool = False, origins: Origins = Origins(), new_study: bool = False) -> int:
    from orchestrator.sweep import checks
    from orchestrator.store.coordination import is_shared
    from orchestrator.search.space import guess_device, make_plan
    from orchestrator.store.study import check_not_locked
    from orchestrator.sweep.preflight import preflight

    load = LoadLog(machineload.read())  # before anything of the sweep's runs: others' work
    if export is not None and not (export.parent.resolve().is_dir() and os.access(export.parent.resolve(), os.W_OK)):
        raise SpecError(f"cannot write {export}: folder {export.parent.resolve()} does not exist or "
                        "is not writable", file="--export")
    preflight(spec, origins)  # the workload, its names, the stores, a hub model: every failure at once
    shared = is_shared(spec.storage)
    if not shared:
        check_not_locked(spec.storage, spec.name)
        if not retry:
            from orchestrator.report.resume import finished

            lines = finished(spec, origins)
            if lines is not None:  # nothing to run: no probe, no device, no MLflow
                print("\n".join(lines))
                return exits.OK
    guess = "cpu" if "device" in spec.space else spec.device if spec.device != "auto" else guess_device()
    guessed = make_plan(spec, guess)
    smoke = checks.smoke_params(spec, guessed) if check and (shared or not _has_ok_result(spec)) else None
    stop = StopFlag()
    start = Startup(spec, guessed, smoke, devices_flag, stop)  # the fork server answers the probe
    try:
        probe = start.probe
        try:
            warm_imports()  # MLflow's and Optuna's, beside the probe's torch
            found = probe.result()
            checks.check_experiment_params(spec, found)
            device = found["device"]
            if device == "cuda":
                checks.check_cuda_fraction(spec)
            plan = guessed if device == guess and "device" not in spec.space else make_plan(spec, device)
            if smoke is not None:
                _check_smoke(spec, probe.smoke())
        finally:
            probe.close()
        slots, runner = start.ready(plan)  # the servers started with the probe, unless it found another device
        return _open_and_drive(spec, plan, found, slots, shared, export, retry, runner, stop, origins, load, new_study)
    finally:
        start.close_runner()


def _has_ok_result(spec: SweepSpec) -> bool:
    """Whether an SQLite study already holds a measured result (read-only, creating nothing):
    then the experiment has worked before and the smoke step is skipped."""
    from orchestrator.store.optuna_sql import trial_counts
    from orchestrator.urls import sqlite_path

    path = sqlite_path(spec.storage)
    return bool(path is not None and (trial_counts(path, spec.name) or {}).get("COMPLETE"))


def _check_smoke(spec: SweepSpec, answer: dict[str, Any] | None) -> None:
    """A broken experiment stops here, before any trial: one line with its own file:line."""
    if answer is None or answer.get("ok", True) or answer.get("oom"):
        return
    where = answer.get("where")
    error = answer.get("error") or "failed"
    if spec.script is not None:
        raise spec.error(("script",), f"{spec.script} failed its smoke step (run with the smallest batch "
                         f"until its first optimizer step, before any trial): {error} (fix the script or its "
                         "args, or skip this check with --no-check)")
    raise spec.error(("experiment",), f"{spec.experiment} failed its smoke step (one training step at "
                     f"the smallest batch, before any trial): {error}" + (f" at {where}" if where else "")
                     + " (fix the experiment, or skip this check with --no-check)")


def _open_and_drive(spec: SweepSpec, plan: Plan, probe: dict[str, Any], slots: list[Slot], shared: bool,
                    export: Path | None, retry: tuple[str, ...], runner: ProcessRunner, stop: StopFlag,
                    origins: Origins, load: LoadLog, new_study: bool = False) -> int:
    from orchestrator import trialdir
    from orchestrator.store.coordination import Heartbeat, StudyLock
    from orchestrator.store.optuna_internals import storage_of
    from orchestrator.store.recovery import Recovery
    from orchestrator.search.space import fingerprint
    from orchestrator.search.strategy import make_sampler
    from orchestrator.store.study import open_study, study_lock
    from orchestrator.store.studyrecord import StudyRecord, write_study
    from orchestrator.sweep.loop import Sweep
    from orchestrator.store.tracking import AsyncTracker, Tracker
    from orchestrator.urls import absolute_uri
    from orchestrator.store.outage import StoreDown
    from orchestrator.store.writefault import StoreUnwritable

    from orchestrator.sweep.output import guarded

    heartbeat = tracker = study = None
    guard = guarded(stop)  # SIGINT, SIGTERM, SIGHUP and a closed pipe stop the sweep alike
    guard.__enter__()
    try:
        Path("mlruns").mkdir(exist_ok=True)
        with study_lock(spec.storage, spec.name):
            db, runs = outages(spec, stop)
            lock = StudyLock(spec.storage, spec.name, db)
            with lock:  # several orchestrators starting at once: one creates, the others load
                sync = Tracker(spec.tracking_uri, spec.name, runs, swept=tuple(plan.searched))
                worker = os.getpid() if shared else 0
                study = open_study(spec, spec.storage, fingerprint(spec, plan),
                                   lambda n: make_sampler(spec, n, worker), outage=db,
                                   absent=None if new_study else _not_replaced(spec, sync))
                recorded = StudyRecord.of(study)  # one read of the study's attributes
                uid = recorded.uid
                limit_gib, native = memory_limit(spec, plan, probe), native_half_of(plan)  # read once
                record_machine(study, plan, limit_gib, native, recorded.machine)
                parent = sync.open_parent(spec.name, shown(absolute_uri(spec.storage)), spec.path, uid)
                if recorded.parent_run_id != parent:
                    write_study(study, parent_run_id=parent)
            event("stores_opened")
            work_dir = trialdir.root(spec.name, uid)
            recovery = Recovery(study, sync, work_dir, shared, spec.search.grace_period_s, db)
            with lock:
                interrupted = recovery.recover()
                queued, superseded = recovery.retry_queue(retry)
            tracker = AsyncTracker(sync)
            runner.open(work_dir)
            if shared:
                heartbeat = Heartbeat(storage_of(study), max(1.0, spec.search.grace_period_s / 4))
            sweep = Sweep(spec, plan, study, tracker, work_dir, stop, runner, lock=lock,
                          recovery=recovery if shared else None, superseded=superseded,
                          heartbeat=heartbeat.beat_one if heartbeat else None,
                          owner=f"{socket.gethostname()}:{os.getpid()}" if shared else None,
                          memory_limit_gib=limit_gib, native_half=native)
            if heartbeat is not None:
                heartbeat.track(sweep.running_trial_ids)
            result = _drive(spec, probe, study, sweep, slots, interrupted, queued, load, origins)
            code = _finish(spec, study, tracker, recovery, sweep, result, origins, shared, load)
            if export is not None and result.code == exits.OK:  # from the study: MLflow's records need not be there
                from orchestrator.report.command import export_best

                try:
                    print(export_best(spec, study, export))
                except StudyError as exc:  # e.g. every trial ran out of memory: the sweep still finished
                    print(f"orchestrate: not exported: {exc}", file=sys.stderr)
            return code
    except StoreDown as exc:  # unreachable past search.outage_s: what it means depends on how far it got
        if study is None:
            raise exc.with_outcome("nothing was started: run the same command once it is back") from None
        raise exc.with_outcome("the study keeps every result told before it: run the same command to resume "
                               "once it is back") from None
    except StoreUnwritable as exc:  # a full disk, say: one line, and what it means for the sweep
        if tracker is None:
            raise exc.with_outcome("nothing was started: run the same command once it can be written") from None
        from orchestrator.store.converge import abandon

        abandon(tracker)
        raise exc.with_outcome(STOPPED) from None
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        guard.__exit__(None, None, None)


def _not_replaced(spec: SweepSpec, tracker: Any) -> Any:
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


def record_machine(study: Study, plan: Plan, limit_gib: float | None, native: frozenset[str] | None,
                   recorded: dict[str, Any] | None) -> None:
    """What the study runs on, for a later run of the finished study to check without a probe
    (``resume``); ``native``: ``native_half_of``; ``recorded``: what the study holds now."""
    from orchestrator.machine import facts
    from orchestrator.store.studyrecord import write_study

    now = {**facts(plan.devices), "memory_limit_gib": limit_gib}
    if native is not None:
        now["native_half"] = sorted(native)
    if recorded != now:
        write_study(study, machine=now)


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


def _drive(spec: SweepSpec, probe: dict[str, Any], study: Study, sweep: Sweep, slots: list[Slot],
           interrupted: int, queued: dict[str, int], load: LoadLog, origins: Origins = Origins()) -> SweepResult:
    from tqdm import tqdm

    from orchestrator.outcome import RUN_AGAIN, Status
    from orchestrator.store.record import TrialRecord
    from orchestrator.store.records import result_trials
    from orchestrator.report.summary import trial_line

    done = len(result_trials(study)) - sum(n for s, n in queued.items() if s not in RUN_AGAIN)
    n = len(sweep.configs) if sweep.configs is not None else None
    where = f"{probe['device']} ({probe.get('device_name')})"
    if len(slots) > 1:
        where = f"{len(slots)} {probe['device']} slots ({', '.join(s.name for s in slots)}; {probe.get('device_name')})"
    again = []
    if interrupted:
        again.append(f"{interrupted} interrupted trial(s) will run again")
    if queued.get(Status.ERROR):
        again.append(f"{queued[Status.ERROR]} configuration(s) whose last trial ended '{Status.ERROR}' will run again")
    for status, count in queued.items():
        if status not in RUN_AGAIN:
            again.append(f"{count} '{status}' result(s) will run again (--retry)")
    print(f"orchestrate: {spec.name} on {where}, torch {probe.get('torch_version')}; "
          f"{n if n is not None else 'continuous'} configurations, {sweep.proposer.strategy.label}; "
          f"{done} of {sweep.target} trials done"
          + "".join(f"; {a}" for a in again), flush=True)
    for k, why in sweep.plan.not_applied.items():
        print(f"  not applied on {probe['device']}: {k} ({why})")
    from orchestrator.launch.slots import pinning_line

    if pinned := pinning_line(slots):
        print(pinned)
    bar = tqdm(total=sweep.target, initial=max(0, done), unit="trial", dynamic_ncols=True, file=sys.stderr,
               disable=None)

    def on_result(trial: Any, outcome: Outcome, _now: float) -> None:
        # the live trial carries what was just told: no re-read of the whole study
        load.note()
        rec = TrialRecord.of(trial)
        bar.write(trial_line(trial.number, trial.params, outcome.status, outcome.metrics,
                             rec.duration_s, outcome.detail, rec.process_count,
                             rec.neighbour_of, rec.slot if len(slots) > 1 else None, rec.retry_of,
                             rec.remeasure_of),
                  file=sys.stdout)
        if outcome.status in (Status.REPEAT, Status.DEFERRED, Status.INTERRUPTED):
            return
        best = sweep.best  # ranked once by the sweep after this result
        if best:
            bar.set_postfix_str(f"best #{best[0].number}: " + ", ".join(
                f"{m}={v:,.1f}" for (m, _), v in zip(spec.objective.metrics, best[0].values)))
        if outcome.status != Status.ERROR and rec.remeasure_of is None:  # measured again: no new result
            bar.update(1)

    try:
        result = sweep.run(on_result, lambda line: bar.write(line, file=sys.stderr))
    finally:
        bar.close()
    if result.message:
        from orchestrator.report.closing import store_flags

        resume = f" Resume with: {command(spec.path, *store_flags(spec, origins))}" if result.code not in (exits.OK, exits.FAILED) else ""
        print(result.message + resume, file=sys.stderr)
    return result


def _finish(spec: SweepSpec, study: Study, tracker: AsyncTracker, recovery: Recovery, sweep: Sweep,
            result: SweepResult, origins: Origins, shared: bool, load: LoadLog) -> int:
    """The summary, once MLflow has what it can take (``converge.settle``); the exit code: 75
    when MLflow still lacks records (nothing ends with 0 while a result is missing from a store)."""
    from orchestrator.report.closing import closed_with, summary, trial_time_s
    from orchestrator.store.converge import settle
    from orchestrator.store.records import rank, results_of

    from orchestrator.store.studyrecord import StudyRecord, write_study

    from orchestrator.store.writefault import StoreUnwritable

    loaded = load.summary()
    try:
        write_study(study, load=kept(StudyRecord.of(study).load, loaded))  # the machine's load, for report
    except StoreUnwritable:  # what explains the noise, not a result: the study's own writes say why
        pass
    trials = study.get_trials(deepcopy=False)  # one read of the study for the summary and the parent run
    results = results_of(trials)
    best = rank(results, spec)
    spent = trial_time_s(trials)
    records = settle(tracker, recovery,
                     closed_with(spec, results, best, spent, sweep.target, result.stopped_because, result.status), shared)
    event("stores_closed")
    code = exits.STORE_DOWN if records.incomplete and result.code == exits.OK else result.code
    if result.code not in (exits.OK, exits.FAILED):
        if records.lines():
            print("\n".join(records.lines()), file=sys.stderr)
        return code
    by_search = result.verdict is not None and result.verdict.done
    print("\n".join(summary(spec, results, best, sweep.target, spent, result.elapsed_s, result.stopped_because,
                            by_search, origins, loaded) + records.lines()))
    if result.code == exits.FAILED:
        from orchestrator.sweep.notices import failure_line

        print(failure_line(result.failures, sweep.work_dir), file=sys.stderr)
    sys.stdout.flush()
    event("summary_printed")
    return code
