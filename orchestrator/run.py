"""``orchestrate SPEC``: check, open, recover, then drive the sweep loop and print its summary.

Start-up overlaps its slow parts: the experiment probe (a subprocess that imports torch, and then
runs the smoke step) starts first; Optuna and MLflow are imported while it works; nothing is
written to disk before the spec, the storage URLs and the experiment have been checked.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecError, StudyError
from orchestrator.launch import StopFlag
from orchestrator.spec import DEFAULT_STORAGE, DEFAULT_TRACKING_URI, SweepSpec

EXIT_OK, EXIT_FAILED = 0, 3


def command(*args: Any) -> str:
    """A command line a user can paste: every part shell-quoted."""
    return shlex.join(["orchestrate", *map(str, args)])


def store_flags(spec: SweepSpec) -> list[str]:
    """``--storage`` and ``--tracking-uri`` as the printed commands need them: always both, so a
    pasted command reaches the same stores whether they came from the spec or from flags."""
    return ["--storage", spec.storage, "--tracking-uri", spec.tracking_uri] if (
        spec.storage != DEFAULT_STORAGE or spec.tracking_uri != DEFAULT_TRACKING_URI) else []


def run(spec: SweepSpec, export: Path | None = None, retry: tuple[str, ...] = (), check: bool = True,
        devices_flag: bool = False) -> int:
    from orchestrator import checks
    from orchestrator.coordination import is_shared
    from orchestrator.space import guess_device, make_plan
    from orchestrator.study import check_not_locked, check_url_opens

    if export is not None and not (export.parent.resolve().is_dir() and os.access(export.parent.resolve(), os.W_OK)):
        raise SpecError(f"cannot write {export}: folder {export.parent.resolve()} does not exist or "
                        "is not writable", file="--export")
    for field, url in (("storage", spec.storage), ("tracking_uri", spec.tracking_uri)):
        try:
            check_url_opens(url, field)
        except StudyError as exc:
            raise spec.error((field,), f"{str(exc).split(': ', 1)[-1]}, got {url!r}") from None
    shared = is_shared(spec.storage)
    if not shared:
        check_not_locked(spec.storage, spec.name)
    smoke = None
    if check and (shared or not _has_ok_result(spec)):
        guess = spec.device if spec.device != "auto" else guess_device()
        smoke = checks.smoke_params(spec, make_plan(spec, guess if "device" not in spec.space else "cpu"))
    probe = checks.Probe(spec, smoke, _probe_env(spec))
    stop, runner = StopFlag(), None
    try:
        try:
            import mlflow.tracking  # noqa: F401 - heavy imports, overlapped with the probe
            import optuna  # noqa: F401

            found = probe.result()
            checks.check_experiment_params(spec, found)
            device = found["device"]
            if device == "cuda":
                checks.check_cuda_fraction(spec)
            plan = make_plan(spec, device)
            slots = _slots(spec, plan.device, devices_flag)
            runner = _prewarmed(spec, plan, slots, stop)
            if smoke is not None:
                _check_smoke(spec, probe.smoke())
        finally:
            probe.close()
        return _open_and_drive(spec, plan, found, slots, shared, export, retry, runner, stop)
    finally:
        if runner is not None:
            runner.close()


def _prewarmed(spec: SweepSpec, plan: Any, slots: list[Any], stop: Any) -> Any:
    """The trial runner, its slots' fork servers already importing (torch: seconds) while the
    smoke step runs and the stores open, when every trial will need the same environment (else
    the first trial starts its own: a wrong guess would cost an import)."""
    from orchestrator.space import shared_env
    from orchestrator.launch import ProcessRunner

    runner = ProcessRunner(slots, spec.experiment, Path("mlruns").resolve(), stop)
    env = shared_env(plan)
    if env is not None:
        runner.prewarm(env)
    return runner


def _probe_env(spec: SweepSpec) -> dict[str, str]:
    """The probe touches the device: on the study's first GPU slot, never on another's."""
    if spec.devices and any(d.startswith("cuda") for d in spec.devices):
        from orchestrator.slots import list_gpus

        gpus = list_gpus()
        first = next((d for d in spec.devices if d.startswith("cuda")), "cuda")
        index = int(first.split(":")[1]) if ":" in first else None
        gpu = next((g for g in gpus if index is None or g.index == index), None)
        if gpu is not None:
            return {"CUDA_VISIBLE_DEVICES": gpu.uuid}
    return {}


def _slots(spec: SweepSpec, device: str, devices_flag: bool) -> list[Any]:
    from orchestrator.slots import flag_error, resolve_slots

    fail = flag_error("--devices") if devices_flag else (lambda rule: spec.error(("devices",), rule))
    return resolve_slots(spec.devices, device, fail)


def _has_ok_result(spec: SweepSpec) -> bool:
    """Whether an SQLite study already holds a measured result (read-only, creating nothing):
    then the experiment has worked before and the smoke step is skipped."""
    import sqlite3

    from orchestrator.study import sqlite_path

    path = sqlite_path(spec.storage)
    if path is None or not path.is_file():
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            row = con.execute(
                "SELECT count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                "WHERE s.study_name = ? AND t.state = 'COMPLETE'", (spec.name,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return bool(row and row[0])


def _check_smoke(spec: SweepSpec, answer: dict[str, Any] | None) -> None:
    """A broken experiment stops here, before any trial: one line with its own file:line."""
    if answer is None or answer.get("ok", True) or answer.get("oom"):
        return
    where = answer.get("where")
    error = answer.get("error") or "failed"
    raise spec.error(("experiment",), f"{spec.experiment} failed its smoke step (one training step at "
                     f"the smallest batch, before any trial): {error}" + (f" at {where}" if where else "")
                     + " (fix the experiment, or skip this check with --no-check)")


def _open_and_drive(spec: SweepSpec, plan: Any, probe: dict[str, Any], slots: list[Any], shared: bool,
                    export: Path | None, retry: tuple[str, ...], runner: Any, stop: Any) -> int:
    from orchestrator.coordination import Heartbeat, StudyLock
    from orchestrator.recovery import Recovery
    from orchestrator.space import fingerprint
    from orchestrator.study import UID_ATTR, open_study, study_lock
    from orchestrator.sweep import Sweep
    from orchestrator.tracking import AsyncTracker, Tracker, absolute_uri

    previous = {s: signal.signal(s, stop.trip) for s in (signal.SIGINT, signal.SIGTERM)}
    heartbeat = tracker = None
    try:
        Path("mlruns").mkdir(exist_ok=True)
        with study_lock(spec.storage, spec.name):
            lock = StudyLock(spec.storage, spec.name)
            with lock:  # several orchestrators starting at once: one creates, the others load
                sync = Tracker(spec.tracking_uri, spec.name)
                study = open_study(spec, spec.storage, fingerprint(spec, plan),
                                   worker=os.getpid() if shared else 0)
                uid = study.user_attrs[UID_ATTR]
                parent = sync.open_parent(spec.name, absolute_uri(spec.storage), spec.path, uid)
                if study.user_attrs.get("mlflow_parent_run_id") != parent:
                    study.set_user_attr("mlflow_parent_run_id", parent)
            work_dir = (Path("mlruns") / ".trials" / f"{spec.name}-{uid[:8]}").resolve()
            recovery = Recovery(study, sync, work_dir, shared, spec.search.grace_period_s)
            with lock:
                interrupted = recovery.recover()
                queued, superseded = recovery.retry_queue(retry)
            tracker = AsyncTracker(sync)
            runner.open(work_dir)
            sweep = Sweep(spec, plan, study, tracker, work_dir, stop, runner, lock=lock,
                          recovery=recovery if shared else None)
            sweep.proposer.superseded = superseded
            if shared:
                heartbeat = Heartbeat(study._storage, sweep.running_trial_ids,
                                      max(1.0, spec.search.grace_period_s / 4))
                sweep.proposer.heartbeat = lambda trial: heartbeat.beat([trial._trial_id])
                sweep.proposer.owner = f"{socket.gethostname()}:{os.getpid()}"
            code = _drive(spec, plan, probe, study, sweep, slots, interrupted, queued, stop)
            if not tracker.close():
                print("orchestrate: MLflow did not take every record in time; the next run repairs it",
                      file=sys.stderr)
            _finish(spec, study, sync, sweep, code)
            if export is not None and code == 0:
                from orchestrator.report import export_best

                try:
                    print(export_best(spec, study, export))
                except StudyError as exc:  # e.g. every trial ran out of memory: the sweep still finished
                    print(f"orchestrate: not exported: {exc}", file=sys.stderr)
            return code
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _drive(spec, plan, probe, study, sweep, slots, interrupted, queued, stop) -> int:  # noqa: ANN001
    from tqdm import tqdm

    from orchestrator import metrics as M
    from orchestrator.errors import FailureBudgetExceeded
    from orchestrator.summary import trial_line
    from orchestrator.sweep import Interrupted, result_trials

    done = len(result_trials(study)) - sum(queued.get(s, 0) for s in queued if s not in ("interrupted", "error"))
    n = len(sweep.configs) if sweep.configs is not None else None
    where = f"{probe['device']} ({probe.get('device_name')})"
    if len(slots) > 1:
        where = f"{len(slots)} {probe['device']} slots ({', '.join(s.name for s in slots)}; {probe.get('device_name')})"
    again = []
    if interrupted:
        again.append(f"{interrupted} interrupted trial(s) will run again")
    if queued.get("error"):
        again.append(f"{queued['error']} configuration(s) whose last trial ended 'error' will run again")
    for status, count in queued.items():
        if status not in ("interrupted", "error"):
            again.append(f"{count} '{status}' result(s) will run again (--retry)")
    print(f"orchestrate: {spec.name} on {where}, torch {probe.get('torch_version')}; "
          f"{n if n is not None else 'continuous'} configurations, {spec.search.sampler} sampler; "
          f"{done} of {sweep.target} trials done"
          + "".join(f"; {a}" for a in again), flush=True)
    for k, why in plan.not_applied.items():
        print(f"  not applied on {probe['device']}: {k} ({why})")
    from orchestrator.slots import pinning_line

    if pinned := pinning_line(slots):
        print(pinned)
    started = time.monotonic()
    bar = tqdm(total=sweep.target, initial=max(0, done), unit="trial", dynamic_ncols=True, file=sys.stderr,
               disable=None)

    def on_result(trial: Any, outcome: Any, _now: float) -> None:
        # the live trial carries what was just told: no re-read of the whole study
        attrs = trial.user_attrs
        bar.write(trial_line(trial.number, trial.params, outcome.status, outcome.metrics,
                             attrs.get(M.DURATION_S), outcome.detail, attrs.get("processes", 1),
                             attrs.get("neighbour_of"), attrs.get("slot") if len(slots) > 1 else None,
                             attrs.get("retry_of")),
                  file=sys.stdout)
        if outcome.status in ("repeat", "deferred", "interrupted"):
            return
        best = sweep.best  # ranked once by the sweep after this result
        if best:
            bar.set_postfix_str(f"best #{best[0].number}: " + ", ".join(
                f"{m}={v:,.1f}" for (m, _), v in zip(spec.objective.metrics, best[0].values)))
        if outcome.status != "error":
            bar.update(1)

    code = EXIT_OK
    sweep.exit_status = "FINISHED"
    try:
        sweep.run(on_result)
    except Interrupted as exc:
        bar.close()
        name = "SIGTERM" if exc.signum == signal.SIGTERM else "Ctrl-C"
        print(f"orchestrate: stopped by {name}; the running trial(s) were killed and recorded as "
              f"interrupted. Resume with: {command(spec.path)}", file=sys.stderr)
        code, sweep.exit_status = (143 if exc.signum == signal.SIGTERM else 130), "KILLED"
    except FailureBudgetExceeded as exc:
        bar.close()
        print(f"orchestrate: {exc}", file=sys.stderr)
        code, sweep.exit_status = exc.exit_code, "FAILED"
    finally:
        bar.close()
    sweep.elapsed = time.monotonic() - started
    if code == EXIT_OK and not sweep.best and sweep.failures:
        code, sweep.exit_status = EXIT_FAILED, "FAILED"
    elif code == EXIT_OK and len(result_trials(study)) < sweep.target and not sweep.stopped_because:
        sweep.exit_status = "KILLED"
    return code


def _finish(spec: SweepSpec, study: Any, tracker: Any, sweep: Any, code: int) -> None:
    from orchestrator import metrics as M
    from orchestrator.summary import best_table, fmt_params, status_counts
    from orchestrator.sweep import rank, result_trials
    from orchestrator.tracking import absolute_uri

    trials = [t for t in study.get_trials(deepcopy=False) if "status" in t.user_attrs]
    results = result_trials(study)
    best = rank(results, spec)
    counts = status_counts(results)
    spent = sum(t.user_attrs.get(M.DURATION_S) or 0 for t in trials)
    description = [f"**{spec.name}**: {len(results)} of {sweep.target} trials ({counts}); "
                   f"{spent / 60:.1f} min of trial time."]
    if best:
        b = best[0]
        description.append("Best: " + fmt_params(b.params) + " -> " + ", ".join(
            f"{m} {v:,.2f}" for (m, _), v in zip(spec.objective.metrics, b.values)))
    tracker.close_parent(sweep.exit_status, "\n\n".join(description),
                         {"trials_done": len(results), "best_" + spec.objective.metrics[0][0]:
                          best[0].values[0] if best else float("nan")})
    if code not in (EXIT_OK, EXIT_FAILED):
        return
    tracking = absolute_uri(spec.tracking_uri)
    lines = ["", f"{spec.name}: {len(results)} of {sweep.target} trials have a result ({counts}); "
             f"trial time {spent:.0f} s, this run {sweep.elapsed:.0f} s."]
    if sweep.stopped_because:
        lines.append(f"Stopped early: {sweep.stopped_because}.")
    lines.append("Best configurations:" if len(spec.objective.metrics) == 1 else "Pareto front:")
    lines += best_table(spec, best)
    if best:
        b = best[0]
        m = b.user_attrs.get("metrics", {})
        lines.append(f"Best: trial {b.number}: {fmt_params(b.params)} -> "
                     f"{m.get(M.SAMPLES_PER_S, 0):,.1f} samples/s, peak {m.get(M.PEAK_MEMORY_GIB, 0):.2f} GiB")
    elif results and all(t.user_attrs.get("status") in ("oom", "swapped", "skipped") for t in results):
        lines.append("Nothing fit: every configuration ran out of memory (or swapped, or was predicted "
                     "to). That is the answer for this machine; try smaller batches, a lower precision "
                     "or activation checkpointing.")
    stores = store_flags(spec)
    lines += [f"Study:   {absolute_uri(spec.storage)} (study {spec.name!r})",
              f"Runs:    {tracking} (experiment {spec.name!r})",
              f"Resume:  {command(spec.path, *stores)}",
              f"Browse:  {command('ui', spec.path, *stores[2:])}   (or: {shlex.join(['mlflow', 'ui', '--backend-store-uri', tracking])})",
              f"Report:  {command('report', spec.path, *stores)}   (table and plots)"]
    print("\n".join(lines))
    if code == EXIT_FAILED:
        print(failure_line(sweep), file=sys.stderr)


def failure_line(sweep: Any) -> str:
    """One line for a sweep that ended without a feasible result because trials failed."""
    kinds = Counter(sweep.failed_statuses)
    status, count = kinds.most_common(1)[0]
    detail = sweep.failure_examples.get(status, ("", None))
    logs = f"; its log: {detail[1]}" if detail[1] else f"; logs in {sweep.work_dir}"
    return (f"orchestrate: no configuration has a feasible result: {sweep.failures} trial(s) failed in this "
            f"run, most often with status {status} ({count}x{': ' + detail[0] if detail[0] else ''}){logs}")
