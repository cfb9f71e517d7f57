"""``orchestrate``: run or resume the sweep a YAML spec describes.

Thin on purpose: parse flags, load the spec, then hand over. torch is never imported here, and
mlflow/optuna only once a real run starts, so ``--help`` and ``--dry-run`` answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError, SpecError, UsageParser, print_error, silence_stdout
from orchestrator.spec import SweepSpec, load_spec

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_BUDGET = 0, 1, 2, 3

USAGE = """orchestrate SPEC [--dry-run] [--storage URL] [--tracking-uri URI] [--n-trials N] [--device D] [--export FILE]
       orchestrate report SPEC [--format text|json] [--out DIR]     (orchestrate report --help)
       orchestrate best SPEC [-o FILE]                              (the best configuration as YAML)
       orchestrate ui [--port N]                                    (the MLflow UI on 127.0.0.1)"""
SUBCOMMANDS = {"report": "orchestrator.report", "best": "orchestrator.report", "ui": "orchestrator.ui",
               "doctor": "orchestrator.doctor"}


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog="orchestrate", usage=USAGE,
        description="Run the training sweep a YAML spec describes (or resume it), each trial in a "
                    "fresh subprocess; results go to Optuna (the study) and MLflow (the runs).",
        epilog="Exit codes: 0 finished (OOM trials are results), 1 internal error, 2 invalid spec "
               "or usage, 3 too many failed trials (search.max_failures), 130 interrupted "
               "(143 on SIGTERM). Run the same command again to resume.")
    p.add_argument("spec", help="the sweep spec, e.g. sweeps/bert_tiny.yaml")
    p.add_argument("--dry-run", action="store_true",
                   help="check the spec and print the plan; create nothing, import no torch")
    p.add_argument("--storage", help="Optuna storage URL (default: the spec's, else sqlite:///mlruns/optuna.db)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: the spec's, else sqlite:///mlruns/mlflow.db)")
    p.add_argument("--n-trials", type=int, help="total trials the study should hold (overrides search.n_trials)")
    p.add_argument("--device", help="auto, mps, cuda or cpu (overrides the spec's device)")
    p.add_argument("--export", metavar="FILE", type=Path,
                   help="after the sweep, write the best configuration to FILE as flat YAML")
    return p


def main(argv: list[str] | None = None) -> int:
    from orchestrator.timeline import event

    event("cli_start")
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        import importlib

        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec, {
            "--storage": (("storage",), args.storage),
            "--tracking-uri": (("tracking_uri",), args.tracking_uri),
            "--n-trials": (("search", "n_trials"), args.n_trials),
            "--device": (("device",), args.device),
        })
        if args.dry_run:
            print_plan(spec)
            return EXIT_OK
        return run(spec, export=args.export)
    except OrchestratorError as exc:
        return print_error(exc)
    except KeyboardInterrupt:  # before the sweep's own handlers: nothing was started yet
        print("orchestrate: interrupted before the sweep started; nothing was run", file=sys.stderr)
        return 130


# -- dry run ---------------------------------------------------------------------------------------

def print_plan(spec: SweepSpec) -> None:
    import importlib.util

    from orchestrator import knobs
    from orchestrator.space import count_configurations, guess_device, make_plan
    from orchestrator.summary import describe_dim
    from orchestrator.tracking import absolute_uri, artifact_root

    try:
        found = importlib.util.find_spec(spec.experiment)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise SpecError(f"no module named {spec.experiment!r} (run from the project root?)",
                        file=str(spec.path), line=spec.line_of("experiment"), field="experiment")
    if spec.device == "auto":
        device = guess_device()
        how = f"auto -> {device} (guessed without importing torch; a real run asks torch)"
    else:
        device, how = spec.device, spec.device
    plan = make_plan(spec, device)
    n = count_configurations(plan)
    target = spec.search.n_trials or n
    dims = ", ".join(f"{k} x{len(v.values) if hasattr(v, 'values') else '~'}" for k, v in plan.searched.items())
    objective = ", ".join(f"{d} {m}" for m, d in spec.objective.metrics)
    if spec.objective.constraints:
        objective += "; subject to " + ", ".join(
            f"{c.metric} {'<=' if c.max is not None else '>='} {c.max if c.max is not None else c.min}"
            for c in spec.objective.constraints)
    storage, tracking = absolute_uri(spec.storage), absolute_uri(spec.tracking_uri)
    seed = f", seed {spec.search.seed}" if spec.search.seed is not None else ""
    t = spec.trial
    out = [f"Plan for {spec.path} (dry run: nothing is created, nothing runs)",
           f"  study        {spec.name}: {spec.search.sampler} sampler{seed}",
           f"  experiment   {spec.experiment} ({found.origin})",
           f"  device       {how}",
           f"  space        {n if n is not None else 'continuous'} configurations" + (f": {dims}" if dims else "")]
    for k, v in plan.searched.items():
        out.append(f"                 {k:<26s} {describe_dim(v)}")
    if plan.fixed:
        out.append("  fixed        " + " ".join(f"{k}={v}" for k, v in plan.fixed.items()))
    out.append(f"  trials       {target} in total for the study, across resumes{_progress(spec)}")
    out.append(f"               each: {t.warmup_steps} warm-up + at least {t.measure_steps} measured steps "
               f"and {t.min_measure_s:g} s; killed after {t.timeout_s:g} s"
               + (f"; measured {t.repeats} times, each in a fresh process (median)" if t.repeats > 1 else ""))
    out.append(f"  objective    {objective}")
    out.append(f"  storage      {storage} (Optuna study {spec.name!r})")
    art = artifact_root(tracking, spec.name)
    out.append(f"  tracking     {tracking} (MLflow experiment {spec.name!r})" + (f", artifacts in {art}" if art else ""))
    used = [k for k in list(plan.fixed) + list(plan.searched) if k in knobs.KNOBS and k not in plan.not_applied]
    out.append(f"  knobs on {device}  applied: {', '.join(used) or 'none'}")
    for k, why in plan.not_applied.items():
        out.append(f"               not applied: {k} ({why})")
    print("\n".join(out))


def _progress(spec: SweepSpec) -> str:
    """How far an existing SQLite study is, read without creating or changing anything."""
    from orchestrator.study import sqlite_path

    path = sqlite_path(spec.storage)
    if path is None or not path.is_file():
        return "; the study does not exist yet"
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            row = con.execute(
                "SELECT count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                "WHERE s.study_name = ? AND t.state != 'WAITING'", (spec.name,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return ""
    return f"; the study exists with {row[0]} trials: a run resumes it" if row and row[0] else \
        "; the study does not exist yet"


# -- a real run ------------------------------------------------------------------------------------

def probe_experiment(spec: SweepSpec) -> dict[str, Any]:
    """Import the experiment in a subprocess (torch stays out of this process)."""
    fixed = json.dumps(spec.fixed, default=str)
    try:
        proc = subprocess.run([sys.executable, "-m", "orchestrator.harness.probe", spec.experiment,
                               spec.device if "device" not in spec.space else "auto", fixed],
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise spec.error(("experiment",), "importing the experiment module took more than 300 s; "
                         "does it do work at import time?") from None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecError(f"checking the experiment module failed: {tail}", file=str(spec.path),
                        line=spec.line_of("experiment"), field="experiment")
    result = json.loads(line[len("PROBE "):])
    if not result["ok"]:
        field = result.get("field")
        path = (("device",) if field == "device" else ("fixed", field) if field and field in spec.fixed
                else ("experiment",))
        raise spec.error(path, result["error"])
    return result


def check_experiment_params(spec: SweepSpec, probe: dict[str, Any]) -> None:
    """Names that are neither harness knobs nor the experiment's PARAMS are typos."""
    import difflib

    from orchestrator import knobs

    accepted = probe.get("params")
    if accepted is None:
        return
    valid = sorted(set(accepted) | set(knobs.KNOBS))
    for section, names in (("fixed", spec.fixed), ("space", spec.space)):
        for name in names:
            if name not in valid:
                hint = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
                did = f"did you mean {hint[0]!r}? " if hint else ""
                raise spec.error((section, name), f"unknown parameter for {spec.experiment}; {did}"
                                 f"it takes {', '.join(sorted(accepted))} and the harness knobs")
    for device in (spec.space["device"].values if "device" in spec.space else ()):
        if not probe.get("available", {}).get(device, False):
            raise spec.error(("space", "device"), f"device {device} is not available on this machine")


def check_cuda_fraction(spec: SweepSpec) -> None:
    """CUDA's fraction is of total memory, at most 1.0 (MPS allows up to 2.0)."""
    from orchestrator.spec import Choice

    swept = spec.space.get("memory_fraction")
    values: list[tuple[tuple, float]] = []
    if "memory_fraction" in spec.fixed:
        values.append((("fixed", "memory_fraction"), spec.fixed["memory_fraction"]))
    elif isinstance(swept, Choice):
        values += [(("space", "memory_fraction", i), v) for i, v in enumerate(swept.values)]
    elif swept is not None:
        values.append((("space", "memory_fraction", "high"), swept.high))
    for path, value in values:
        if value > 1:
            raise spec.error(path, f"on CUDA memory_fraction must be at most 1.0, got {value}")


def run(spec: SweepSpec, export: Path | None = None) -> int:
    from orchestrator.launch import StopFlag
    from orchestrator.space import fingerprint, make_plan
    from orchestrator.study import check_url_opens, open_study, study_lock
    from orchestrator.sweep import Interrupted, Sweep

    from orchestrator.errors import StudyError

    if export is not None and not (export.parent.resolve().is_dir() and os.access(export.parent.resolve(), os.W_OK)):
        raise SpecError(f"cannot write {export}: folder {export.parent.resolve()} does not exist or "
                        "is not writable", file="--export")
    for field, url in (("storage", spec.storage), ("tracking_uri", spec.tracking_uri)):
        try:
            check_url_opens(url, field)
        except StudyError as exc:
            raise spec.error((field,), f"{str(exc).split(': ', 1)[-1]}, got {url!r}") from None
    probe = probe_experiment(spec)
    check_experiment_params(spec, probe)
    device = probe["device"]
    if device == "cuda":
        check_cuda_fraction(spec)
    plan = make_plan(spec, device)

    stop = StopFlag()
    previous = {s: signal.signal(s, stop.trip) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        Path("mlruns").mkdir(exist_ok=True)
        with study_lock(spec.storage, spec.name):
            from orchestrator.tracking import Tracker, absolute_uri

            tracker = Tracker(spec.tracking_uri, spec.name)  # first: mlflow is the heavier import
            study = open_study(spec, spec.storage, fingerprint(spec, plan))
            from orchestrator.study import UID_ATTR

            uid = study.user_attrs[UID_ATTR]
            parent = tracker.open_parent(spec.name, absolute_uri(spec.storage), spec.path, uid)
            study.set_user_attr("mlflow_parent_run_id", parent)
            work_dir = (Path("mlruns") / ".trials" / f"{spec.name}-{uid[:8]}").resolve()
            sweep = Sweep(spec, plan, study, tracker, work_dir, stop)
            code = _drive(spec, plan, probe, study, tracker, sweep, stop, Interrupted)
            if export is not None and code == 0:
                from orchestrator.report import export_best

                try:
                    print(export_best(spec, study, export))
                except StudyError as exc:  # e.g. every trial ran out of memory: the sweep still finished
                    print(f"orchestrate: not exported: {exc}", file=sys.stderr)
            return code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _drive(spec, plan, probe, study, tracker, sweep, stop, Interrupted) -> int:  # noqa: ANN001
    from tqdm import tqdm

    from orchestrator import metrics as M
    from orchestrator.errors import FailureBudgetExceeded
    from orchestrator.summary import trial_line
    from orchestrator.sweep import result_trials

    interrupted = sweep.recover()
    done = len(result_trials(study))
    n = len(sweep.configs) if sweep.configs is not None else None
    print(f"orchestrate: {spec.name} on {probe['device']} ({probe.get('device_name')}), torch "
          f"{probe.get('torch_version')}; {n if n is not None else 'continuous'} configurations, "
          f"{spec.search.sampler} sampler; {done} of {sweep.target} trials done"
          + (f"; {interrupted} interrupted trial(s) will run again" if interrupted else ""))
    for k, why in plan.not_applied.items():
        print(f"  not applied on {probe['device']}: {k} ({why})")
    started = time.monotonic()
    bar = tqdm(total=sweep.target, initial=done, unit="trial", dynamic_ncols=True, file=sys.stderr,
               disable=None)

    def on_result(trial: Any, outcome: Any, _: float) -> None:
        # the live trial carries what was just told: no re-read of the whole study
        bar.write(trial_line(trial.number, trial.params, outcome.status, outcome.metrics,
                             trial.user_attrs.get(M.DURATION_S), outcome.detail,
                             trial.user_attrs.get("processes", 1), trial.user_attrs.get("neighbour_of")),
                   file=sys.stdout)
        if outcome.status == "repeat":
            return
        best = sweep.best  # ranked once by the sweep after this result
        if best:
            bar.set_postfix_str(f"best #{best[0].number}: " + ", ".join(
                f"{m}={v:,.1f}" for (m, _), v in zip(spec.objective.metrics, best[0].values)))
        bar.update(1)

    code, parent_status = 0, "FINISHED"
    try:
        sweep.run(on_result)
    except Interrupted as exc:
        bar.close()
        name = "SIGTERM" if exc.signum == signal.SIGTERM else "Ctrl-C"
        print(f"orchestrate: stopped by {name}; the running trial was killed and recorded as "
              f"interrupted. Resume with: orchestrate {spec.path}", file=sys.stderr)
        code, parent_status = (143 if exc.signum == signal.SIGTERM else 130), "KILLED"
    except FailureBudgetExceeded as exc:
        bar.close()
        print(f"orchestrate: {exc}", file=sys.stderr)
        code, parent_status = exc.exit_code, "FAILED"
    finally:
        bar.close()
    if code == 0 and len(result_trials(study)) < sweep.target and not sweep.stopped_because:
        parent_status = "KILLED"
    _finish(spec, study, tracker, sweep, time.monotonic() - started, parent_status, code == 0)
    return code


def _finish(spec, study, tracker, sweep, elapsed: float, parent_status: str, full: bool) -> None:  # noqa: ANN001
    from orchestrator import metrics as M
    from orchestrator.summary import best_table, fmt_params, status_counts
    from orchestrator.sweep import best_trials, result_trials
    from orchestrator.tracking import absolute_uri

    trials = [t for t in study.get_trials(deepcopy=False) if "status" in t.user_attrs]
    results = result_trials(study)
    best = best_trials(study, spec)
    counts = status_counts(results)
    spent = sum(t.user_attrs.get(M.DURATION_S) or 0 for t in trials)
    description = [f"**{spec.name}**: {len(results)} of {sweep.target} trials ({counts}); "
                   f"{spent / 60:.1f} min of trial time."]
    if best:
        b = best[0]
        description.append("Best: " + fmt_params(b.params) + " -> " + ", ".join(
            f"{m} {v:,.2f}" for (m, _), v in zip(spec.objective.metrics, b.values)))
    tracker.close_parent(parent_status, "\n\n".join(description),
                         {"trials_done": len(results), "best_" + spec.objective.metrics[0][0]:
                          best[0].values[0] if best else float("nan")})
    if not full:
        return
    tracking = absolute_uri(spec.tracking_uri)
    lines = ["", f"{spec.name}: {len(results)} of {sweep.target} trials have a result ({counts}); "
             f"trial time {spent:.0f} s, this run {elapsed:.0f} s."]
    if sweep.stopped_because:
        lines.append(f"Stopped early: {sweep.stopped_because}.")
    lines.append("Best configurations:" if len(spec.objective.metrics) == 1 else "Pareto front:")
    lines += best_table(spec, best)
    if best:
        b = best[0]
        m = b.user_attrs.get("metrics", {})
        lines.append(f"Best: trial {b.number}: {fmt_params(b.params)} -> "
                     f"{m.get(M.SAMPLES_PER_S, 0):,.1f} samples/s, peak {m.get(M.PEAK_MEMORY_GIB, 0):.2f} GiB")
    lines += [f"Study:   {absolute_uri(spec.storage)} (study {spec.name!r})",
              f"Runs:    {tracking} (experiment {spec.name!r})",
              f"Resume:  orchestrate {spec.path}",
              f"Browse:  orchestrate ui {spec.path}   (or: mlflow ui --backend-store-uri {tracking})",
              f"Report:  orchestrate report {spec.path}   (table and plots)"]
    print("\n".join(lines))


def entry() -> None:
    """Console-script entry: unexpected errors keep their traceback and exit 1. A reader that
    closes the pipe early (``orchestrate ... --dry-run | head``) ends the output quietly."""
    try:
        code = main()
        sys.stdout.flush()  # a pipe's buffered output is written here, not at interpreter exit
    except BrokenPipeError:
        silence_stdout()  # no second error when Python flushes stdout at exit
        sys.exit(141)  # 128 + SIGPIPE, as a shell reports a command killed by it
    sys.exit(code)


if __name__ == "__main__":
    entry()
