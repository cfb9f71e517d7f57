"""``orchestrate SPEC``: ``run`` below is the whole command, one named step after another: the
machine's load, the checks, a finished study's answer, the probe of the experiment, the stores, the
recovery, the sweep loop, the summary, the export. Each step is a function of this file, in that
order, or of ``stores.py`` (the study and MLflow, opened and held).

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
from orchestrator.invocation import command
from orchestrator.machineload import LoadLog, kept
from orchestrator.spec.load import SweepSpec
from orchestrator.sweep.state import Run
from orchestrator.sweep.startup import Startup, warm_imports
from orchestrator.sweep.stores import open_stores, recover, stores_held, study_held
from orchestrator.timeline import event
from orchestrator.redact import shown
from orchestrator.urls import Origins, absolute_uri, is_sqlite

if TYPE_CHECKING:
    from optuna import Study
    from optuna.trial import FrozenTrial
    from orchestrator.outcome import Outcome
    from orchestrator.store.studyread import StoredStudy
    from orchestrator.sweep.loop import Sweep, SweepResult


def run(spec: SweepSpec, export: Path | None = None, retry: tuple[str, ...] = (), check: bool = True,
        origins: Origins = Origins(), new_study: bool = False) -> int:
    """``orchestrate SPEC``, step by step: each step is a function of this file, below in this order,
    but for the stores' (``stores.py``)."""
    from orchestrator.store.coordination import is_shared
    from orchestrator.sweep.output import guarded
    from orchestrator.sweep.preflight import preflight

    from orchestrator.report.closing import retry_command, retry_said

    r = Run(spec, origins, LoadLog(machineload.read()), shared=is_shared(spec.storage))
    check_export(export)
    preflight(spec, origins)  # the workload, its names, the stores, a hub model: every failure at once
    refuse_lost(spec, new_study)
    if not r.shared and (done := finished_already(spec, origins, retry)) is not None:
        lines, stored = done
        print("\n".join(lines))  # nothing to run: no probe, no device, no MLflow
        if (again := retry_command(spec, stored.trials, origins)) is not None:  # as the run that measured
            print(retry_said(again), file=sys.stderr)  # them: 3, not 0 (a tour)
            return exits.FAILED
        export_best(spec, stored, export)
        return exits.OK
    with study_held(r):
        start = start_probe(r, check)  # the slot's fork server answers the probe
        try:
            check_experiment(r, start)
            r.slots, r.runner = start.ready(r.plan)  # type: ignore[arg-type]  # the plan: set by check_experiment  # the servers started with the probe, unless it found another device
            with guarded(r.stop), stores_held(r):  # SIGINT, SIGTERM, SIGHUP and a closed pipe stop the sweep alike
                open_stores(r, new_study)
                recover(r, retry)
                sweep = make_sweep(r)
                result = run_sweep(r, sweep)
                code = summarize(r, sweep, result)
                if result.code == exits.OK:
                    export_best(spec, r.study, export)
                return code
        finally:
            start.close_runner()


def check_export(export: Path | None) -> None:
    """A file ``--export`` cannot write is refused before anything runs."""
    if export is not None and not (export.parent.resolve().is_dir() and os.access(export.parent.resolve(), os.W_OK)):
        raise SpecError(f"cannot write {export}: folder {export.parent.resolve()} does not exist or "
                        "is not writable", file="--export")


def refuse_lost(spec: SweepSpec, new_study: bool) -> None:
    """An SQLite study file lost or emptied where an earlier study of its name left its runs is
    refused here, before the probe and before MLflow's file is made (``report.command.lost_study``:
    read-only), in the words ``open_stores`` would refuse it in; ``--new-study`` starts one. With
    MLflow on a server, ``open_stores`` refuses it, the server asked under its outage guard."""
    from orchestrator.report.command import lost_study
    from orchestrator.urls import absolute_uri, sqlite_path

    if new_study or sqlite_path(absolute_uri(spec.tracking_uri)) is None:
        return
    if (lost := lost_study(spec)) is not None:
        raise lost


def finished_already(spec: SweepSpec, origins: Origins,
                     retry: tuple[str, ...]) -> tuple[list[str], StoredStudy] | None:
    """An SQLite study that another orchestrate holds is refused; a finished one (without
    ``--retry``) answers from its record: the lines to print and the study as read, else None."""
    from orchestrator.store.study import check_not_locked

    check_not_locked(spec.storage, spec.name)
    if retry:
        return None
    from orchestrator.report.resume import finished

    return finished(spec, origins)


def start_probe(r: Run, check: bool) -> Startup:
    """The probe of the experiment on the guessed device, with the smoke step unless ``--no-check``
    (or the study already holds a measured result), and the slots' fork servers (``startup``)."""
    from orchestrator.search.space import make_plan, plan_device
    from orchestrator.sweep import checks

    spec = r.spec
    guess = plan_device(spec)
    guessed = make_plan(spec, guess)
    smoke = checks.smoke_params(spec, guessed) if check and (r.shared or not _has_ok_result(spec)) else None
    r.plan = guessed
    return Startup(spec, guessed, smoke, r.origins.devices is not None, r.stop)  # slots from --devices


def check_experiment(r: Run, start: Startup) -> None:
    """The probe's answer, while MLflow and Optuna are imported beside its torch: the
    experiment's parameters, the device (and the plan for it), the smoke step."""
    from orchestrator.search.space import make_plan
    from orchestrator.spec.space_rules import check_cuda_fraction
    from orchestrator.sweep import checks

    spec, guessed, probe = r.spec, r.plan, start.probe
    assert guessed is not None
    try:
        warm_imports()  # MLflow's and Optuna's, beside the probe's torch
        r.found = found = probe.result()
        start.probe_answered(found["device"])  # the slots' first trial processes, now the probe's device is up
        checks.check_experiment_params(spec, found)
        device = found["device"]
        if device == "cuda":
            check_cuda_fraction(spec)
        if device != guessed.device or "device" in spec.space:
            r.plan = make_plan(spec, device)
        if probe.asked_smoke:
            _check_smoke(spec, probe.smoke(), probe.smoke_script)
    finally:
        probe.close()


def make_sweep(r: Run) -> Sweep:
    """The sweep loop, given its parts (``seams``)."""
    from orchestrator.sweep.loop import Sweep
    from orchestrator.sweep.seams import SweepOptions

    assert r.study is not None and r.tracker is not None and r.work_dir is not None and r.runner is not None
    sweep = Sweep(r.spec, r.plan, r.study, r.tracker, r.work_dir, r.stop, r.runner, SweepOptions(  # type: ignore[arg-type]  # the plan: set before
        lock=r.lock, recovery=r.recovery if r.shared else None, superseded=r.superseded,
        heartbeat=r.heartbeat.beat_one if r.heartbeat else None,
        owner=f"{socket.gethostname()}:{os.getpid()}" if r.shared else None,
        memory_limit_gib=r.limit_gib, native_half=r.native))
    if r.heartbeat is not None:
        r.heartbeat.track(sweep.running_trial_ids)
    return sweep


def export_best(spec: SweepSpec, study: Study | StoredStudy | None, export: Path | None) -> None:
    """``--export``: the best configuration, from the study (the sweep's, or a finished one's as
    read: MLflow's records need not be there)."""
    if export is None:
        return
    from orchestrator.report.command import export_best as export_study

    try:
        print(export_study(spec, study, export))
    except StudyError as exc:  # e.g. every trial ran out of memory: the sweep still finished
        print(f"orchestrate: not exported: {exc}", file=sys.stderr)


def _has_ok_result(spec: SweepSpec) -> bool:
    """Whether an SQLite study already holds a measured result (read-only, creating nothing):
    then the experiment has worked before and the smoke step is skipped."""
    from orchestrator.store.optuna_sql import trial_counts
    from orchestrator.urls import sqlite_path

    path = sqlite_path(spec.storage)
    return bool(path is not None and (trial_counts(path, spec.name) or {}).get("COMPLETE"))


def _check_smoke(spec: SweepSpec, answer: dict[str, Any] | None, call: dict[str, Any] | None = None) -> None:
    """A broken experiment stops here, before any trial: one line with its own file:line (a
    script's: the command it ran, which a configuration's own flags may be what failed)."""
    if answer is not None and answer.get("ok") and answer.get("batches") == 0 and spec.script is not None \
            and spec.samples_per_step is None:  # every trial said so, one by one (a fault tour: 6 of 6, 30 s)
        raise spec.error(("script",), f"{spec.script} drew no batch from a torch DataLoader before its first optimizer "
                         "step (found by the smoke step), so the samples it trains on cannot be counted: set "
                         "samples_per_step in the spec (a number, or an expression such as batch_size * accum)")
    if answer is None or answer.get("ok", True) or answer.get("oom"):
        return
    where = answer.get("where")
    error = answer.get("error") or "failed"
    if spec.script is not None:
        from orchestrator.invocation import tool
        from orchestrator.spec.script import command_line, shown_script

        ran = f"`{command_line(shown_script(spec), call['argv'], tool('python'))}`, " if call else ""
        raise spec.error(("script",), f"{spec.script} failed its smoke step ({ran}run with the smallest batch "
                         f"until its first optimizer step, before any trial): {error} (fix the script or its "
                         "args, or skip this check with --no-check)")
    if field := answer.get("field"):  # the experiment named the parameter (workload.param_error): the spec's fault
        path = ("fixed", field) if field in spec.fixed else ("space", field) if field in spec.space else ("experiment",)
        raise spec.error(path, f"{error} (found by the smoke step: one training step of the first configuration)")
    raise spec.error(("experiment",), f"{spec.experiment} failed its smoke step (one training step at "
                     f"the smallest batch, before any trial): {error}" + (f" at {where}" if where else "")
                     + " (fix the experiment, or skip this check with --no-check)")


def run_sweep(r: Run, sweep: Sweep) -> SweepResult:
    """The sweep's opening line, then the loop with a line per trial and a progress bar."""
    from tqdm import tqdm

    from orchestrator.outcome import RUN_AGAIN, Status
    from orchestrator.store.record import TrialRecord
    from orchestrator.store.records import result_trials
    from orchestrator.report.summary import objective_note, of_target, params_width, trial_line

    spec, probe, slots, load, queued = r.spec, r.found, r.slots, r.load, r.queued
    done = len(result_trials(r.study)) - sum(n for s, n in queued.items() if s not in RUN_AGAIN)  # type: ignore[arg-type]  # the study: opened before
    n = len(sweep.configs) if sweep.configs is not None else None
    where = f"{probe['device']} ({probe.get('device_name')})"
    if len(slots) > 1:
        where = f"{len(slots)} {probe['device']} slots ({', '.join(s.name for s in slots)}; {probe.get('device_name')})"
    again = []
    if queued.get(Status.INTERRUPTED):  # cut off by a kill (repaired: ``interrupted``) or by Ctrl-C
        again.append(f"{queued[Status.INTERRUPTED]} interrupted trial(s) will run again")
    if queued.get(Status.ERROR):
        again.append(f"{queued[Status.ERROR]} configuration(s) whose last trial ended '{Status.ERROR}' will run again")
    for status, count in queued.items():
        if status not in RUN_AGAIN:
            again.append(f"{count} '{status}' result(s) will run again (--retry)")
    print(f"orchestrate: {spec.name} on {where}, torch {probe.get('torch_version')}; "
          f"{n if n is not None else 'continuous'} configuration{'' if n == 1 else 's'}, {sweep.proposer.strategy.label}; "
          f"{of_target(done, sweep.target)} trials done"
          + "".join(f"; {a}" for a in again), flush=True)
    if r.recovery is not None and r.recovery.lacked:  # a tour's resume wrote 5 runs, silently
        print(f"  MLflow lacked the records of {r.recovery.lacked} trial(s) the study holds (its store was away, or "
              "the last run was stopped before it wrote them): written from the study", flush=True)
    if r.recovery is not None and r.recovery.left:  # an edited spec of a study with no result
        from orchestrator.report.summary import fmt_params

        left = r.recovery.left
        print(f"  not run again: {'; '.join(fmt_params(p) for p in left[:3])}{' ...' if len(left) > 3 else ''} "
              f"({len(left)} configuration{'' if len(left) == 1 else 's'} cut off or failed before the spec's edit, "
              "which the spec no longer holds)")
    if r.elsewhere:
        print(r.elsewhere)
    if r.measured_otherwise:
        print(r.measured_otherwise)
    if r.beside:
        print(f"  a new study in ./mlruns/, but {r.beside} (resumes that one)")
    if r.shared and is_sqlite(spec.tracking_uri):  # the PostgreSQL tour: each host's runs in its own file
        print(f"  the study is shared through {shown(spec.storage)}, but this orchestrator's MLflow runs go to "
              f"{shown(absolute_uri(spec.tracking_uri))}, on this host: each host's MLflow holds its own trials "
              "only (give every host the team's tracking server: tracking_uri: http://...)")
    for k, why in sweep.plan.not_applied.items():
        print(f"  not applied on {probe['device']}: {k} ({why})")
    if note := objective_note(spec):
        print(f"  {note}")
    from orchestrator.launch.slots import pinning_line

    if pinned := pinning_line(slots):
        print(pinned)
    from orchestrator.bytecode import uncompiled

    if slow := uncompiled():
        print(f"  {slow}")
    bar = tqdm(total=sweep.target, initial=max(0, done), unit="trial", dynamic_ncols=True, file=sys.stderr,
               disable=None)
    from orchestrator.report.document import pick_best
    from orchestrator.report.batchflag import BatchFlag

    batches = BatchFlag(spec.script is not None, sweep.plan.searched)
    width = params_width(sweep.plan.searched)

    def on_result(trial: FrozenTrial, outcome: Outcome, _now: float) -> None:
        # the live trial carries what was just told: no re-read of the whole study
        load.note()
        rec = TrialRecord.of(trial)
        bar.write(trial_line(trial.number, trial.params, outcome.status, outcome.metrics,
                             rec.duration_s, outcome.detail, rec.process_count,
                             rec.neighbour_of, rec.slot if len(slots) > 1 else None, rec.retry_of,
                             rec.remeasure_of, width),
                  file=sys.stdout)
        if outcome.status in (Status.REPEAT, Status.DEFERRED, Status.INTERRUPTED):
            return
        if said := batches.line(trial.number, trial.params, outcome):
            bar.write(said, file=sys.stderr)
        if best := pick_best(spec, sweep.best):  # ranked once by the sweep after this result
            bar.set_postfix_str(f"best #{best.number}: " + ", ".join(
                f"{m}={v:,.1f}" for (m, _), v in zip(spec.objective.metrics, best.values)))
        if outcome.status != Status.ERROR and rec.remeasure_of is None:  # measured again: no new result
            bar.update(1)

    try:
        result = sweep.run(on_result, lambda line: bar.write(line, file=sys.stderr))
    finally:
        bar.close()
    if sweep.discarded:  # its results measured here, thrown away: say so, once
        print(f"orchestrate: trial(s) {', '.join(f'#{n}' for n in sweep.discarded)} ran here past "
              f"search.grace_period_s={spec.search.grace_period_s:g} s without a heartbeat reaching the study (a "
              "frozen or overloaded host, a lost connection), so another orchestrator declared them dead and ran "
              "their configurations again; the results measured here were discarded", file=sys.stderr)
    if result.message:
        from orchestrator.report.closing import resume_flags

        resume = f" Resume with: {command(spec.path, *resume_flags(spec, r.origins))}" if result.code not in (exits.OK, exits.FAILED) else ""
        print(result.message + resume, file=sys.stderr)
    return result


def _first_error(trial: FrozenTrial) -> tuple[str, str]:
    """(``trial #N: its note``, its log) for the summary's ``First error:`` line: the note's first
    line whole (a trial's line and the failure line cut it short; what the script printed after it
    is in the log)."""
    from orchestrator.store.record import TrialRecord
    from orchestrator.trialdir import LOG

    rec = TrialRecord.of(trial)
    note = (rec.detail or "").strip().splitlines()[:1] or ["no note"]
    return f"trial #{trial.number}: {note[0]}", str(Path(rec.trial_dir) / LOG) if rec.trial_dir else ""


def summarize(r: Run, sweep: Sweep, result: SweepResult) -> int:
    """The summary, once MLflow has what it can take (``converge.settle``); the exit code: 75
    when MLflow still lacks records (nothing ends with 0 while a result is missing from a store)."""
    from orchestrator.keys import config_key
    from orchestrator.outcome import Status
    from orchestrator.report.closing import closed_with, summary, trial_time_s
    from orchestrator.store.converge import settle
    from orchestrator.store.record import TrialRecord
    from orchestrator.store.records import rank, results_of

    from orchestrator.store.studyrecord import StudyRecord, write_study

    from orchestrator.store.writefault import StoreUnwritable

    spec, study, origins = r.spec, r.study, r.origins
    assert study is not None and r.tracker is not None and r.recovery is not None
    loaded = r.load.summary()
    if result.stopped_because:  # why the run ended, for report (an unsure stop is the answer's caveat)
        loaded = {**loaded, "stopped": result.stopped_because}
    try:
        write_study(study, load=kept(StudyRecord.of(study).load, loaded))  # the machine's load, for report
    except StoreUnwritable:  # what explains the noise, not a result: the study's own writes say why
        pass
    trials = study.get_trials(deepcopy=False)  # one read of the study for the summary and the parent run
    results = results_of(trials)
    best = rank(results, spec)
    spent = trial_time_s(trials)
    records = settle(r.tracker, r.recovery,
                     closed_with(spec, results, best, spent, sweep.target, result.stopped_because, result.status), r.shared)
    event("stores_closed")
    code = exits.STORE_DOWN if records.incomplete and result.code == exits.OK else result.code
    if result.code not in (exits.OK, exits.FAILED):
        if records.lines():
            print("\n".join(records.lines()), file=sys.stderr)
        return code
    by_search = result.verdict is not None and result.verdict.done and not result.verdict.exhausted  # go on: more
    answered = {config_key(t.params) for t in results}  # an error measured again since is no longer open
    fits = r.recovery.fits or (lambda _: True)  # an error of a configuration the edited spec dropped runs no more
    open_errors = [t for t in trials if TrialRecord.of(t).status == Status.ERROR and config_key(t.params) not in answered
                   and fits(t.params)]
    first = _first_error(open_errors[0]) if open_errors and result.code == exits.OK else None  # else said below
    print("\n".join(summary(spec, results, best, sweep.target, spent, result.elapsed_s, result.stopped_because,
                            by_search, origins, loaded, len({config_key(t.params) for t in open_errors}), first)
                     + records.lines()))
    if result.code == exits.FAILED:
        from orchestrator.report.closing import retry_command, retry_said
        from orchestrator.sweep.notices import failure_line

        again = retry_command(spec, trials, origins)  # failed before: this run measured what cannot fit
        print(failure_line(result.failures, sweep.work_dir) if result.failures.count or again is None
              else retry_said(again), file=sys.stderr)
    sys.stdout.flush()
    event("summary_printed")
    return code
