"""``orchestrate report`` and ``orchestrate best``: read a study (finished or not) and show it.

The study is only read (``studyread``: for SQLite, its tables directly, without Optuna); nothing
is created where it does not exist. ``report/document.py`` says what the report holds. Plots are drawn only
when asked for (``--plots`` or ``--out``): then matplotlib draws them and MLflow, opened only for
this, logs them on the study's parent run. torch is never imported, and no device is probed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import metrics as M
from orchestrator.report.asran import read_as_ran
from orchestrator.report.compare import compare_knob, comparison, device_advice, reference_for
from orchestrator.errors import NothingFeasible, OrchestratorError, StudyError, UsageParser, print_error, silence_stdout
from orchestrator.store.record import TrialRecord
from orchestrator.store.records import measurements, rank, results_of
from orchestrator.redact import shown
from orchestrator.report.document import (batch_doubt, best_lines, build_report, device_of, paste_command, pick_best, provenance,
                                    render_text, result_file, script_command, top_markdown)
from orchestrator.spec.load import SweepSpec, load_guarded
from orchestrator.store.studyread import StoredStudy, read_study
from orchestrator.report.summary import fmt_num, throughput_text
from orchestrator.urls import STORAGE_HELP, TRACKING_HELP, absolute_uri

if TYPE_CHECKING:
    from orchestrator.report.plotdata import PlotContext


def _parser(command: str) -> argparse.ArgumentParser:
    p = UsageParser(prog=f"orchestrate {command}", description=(
        "Show a study's trials, counts and best configuration (works while it runs); --plots also "
        "draws the plots and logs them on the study's MLflow parent run."
        if command == "report" else "Print the best feasible configuration as flat YAML (a script spec: the "
        "command line that trains it); -o writes the YAML."))
    p.add_argument("spec", help="the sweep spec, e.g. sweeps/bert_tiny.yaml")
    p.add_argument("--storage", help=STORAGE_HELP)
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    if command == "report":
        p.add_argument("--format", choices=("text", "json"), default="text",
                       help="text (default) or json: one document of the trials, counts, best, pareto, noise and load")
        p.add_argument("--plots", action="store_true", help="also draw the plots (PNG) and log them, with the "
                       "best configurations, on the study's MLflow parent run (imports matplotlib and MLflow: seconds)")
        p.add_argument("--out", type=Path, help="folder for the plots (implies --plots; default: "
                       "mlruns/reports/NAME/)")
        p.add_argument("--compare", metavar="KNOB", help="compare throughput across the values of this swept "
                       "parameter, per configuration of the others (default: device, when it is swept)")
    else:
        p.add_argument("-o", "--output", type=Path, help="YAML file to write (default: print it)")
    return p


def main(argv: list[str]) -> int:
    command, rest = argv[0], argv[1:]
    args = _parser(command).parse_args(rest)
    try:
        spec, _ = load_guarded(args.spec, args.storage, args.tracking_uri)
        study = open_study(spec, command)
        spec, edited = read_as_ran(spec, study)  # the spec edited since: the study read with the one it ran
        if edited is not None:
            print(f"orchestrate: {edited}", file=sys.stderr)
        if command == "best":
            text, summary, doubt = best_yaml(spec, study)
            if args.output is None:
                print(best_command(spec, study) if spec.script is not None else text, end="")
                print(summary, file=sys.stderr)
            else:
                print(write_best(args.output, text, summary))
            if doubt is not None:  # after the best, as the summary says it
                print(doubt, file=sys.stderr)
            return 0
        return report(spec, study, args.format, args.out, args.compare, plots=args.plots or args.out is not None)
    except OrchestratorError as exc:
        return print_error(exc)
    except BrokenPipeError:  # `orchestrate report SPEC | head`: the reader left early; not an error
        silence_stdout()
        return 0


def open_study(spec: SweepSpec, *command: str) -> StoredStudy:
    """The spec's study, read once; a one-line error where there is none (nothing is created)."""
    from orchestrator.store.study import check_file

    check_file(spec.storage, "storage")  # a damaged file: one line with what to do
    url = absolute_uri(spec.storage)
    study = read_study(url, spec.name)
    if study is None:
        lost = lost_study(spec)  # the study file lost or emptied, its runs left: the sweep's line
        study = read_study(url, spec.name) if lost is None else None  # or made meanwhile, by a sweep starting
        if study is None:
            from orchestrator.store.study import starting
            from orchestrator.store.studyread import beside_spec

            if lost is None and (pid := starting(url, spec.name)) is not None:
                raise StudyError(f"no study {spec.name!r} in {shown(url)} yet: a sweep of it is starting (orchestrate "
                                 f"pid {pid}, checking the script or experiment before its first trial); run this "
                                 "again once its first trial has begun")
            there = beside_spec(spec, *command)
            raise lost or StudyError(f"no study {spec.name!r} in {shown(url)}; " + (
                f"run `{paste_command(spec)}` first" if there is None else there))
    return study


def finite(value: object) -> object:
    """``value`` with every NaN or infinite number as None: JSON has no NaN (a diverged trial's loss),
    and strict parsers (JavaScript's ``JSON.parse``) refuse the ``NaN`` Python would write."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def lost_study(spec: SweepSpec) -> StudyError | None:
    """The sweep's refusal (``store.lost``) where the spec's SQLite study file is missing or empty
    but an earlier study of its name left MLflow trial runs or trial folders, else None: ``report``,
    ``best``, ``check`` and ``--dry-run`` say what the sweep would, not to run it. Read-only:
    MLflow is opened only then, and only where its store exists (one it cannot read: the folders)."""
    from orchestrator.store.leftovers import open_experiment
    from orchestrator.store.lost import found_runs, refuse, why_missing
    from orchestrator.store.sqlitefile import is_empty
    from orchestrator.urls import sqlite_path

    path = sqlite_path(spec.storage)
    if path is None or not is_empty(path):
        return None
    why = why_missing(spec.storage, path)
    trials_root = Path("mlruns/.trials").resolve()  # as the sweep looks
    tracking = sqlite_path(absolute_uri(spec.tracking_uri))
    found = None
    if tracking is None or not is_empty(tracking):
        try:
            client, experiment = open_experiment(spec.tracking_uri, spec.name)
            found = found_runs(spec.name, client, experiment and experiment.experiment_id, trials_root)
        except Exception:  # noqa: BLE001 - a store that does not read: the sweep says why
            pass
    if found is None:  # no MLflow store, or one that does not read: the folders alone
        found = found_runs(spec.name, None, None, trials_root)
    if not found or not is_empty(path):  # made while MLflow was read: a sweep starting, not a study lost
        return None
    return refuse(spec.name, absolute_uri(spec.storage), why, found)


# -- the report -----------------------------------------------------------------------------------

def report(spec: SweepSpec, study: StoredStudy, fmt: str, out: Path | None, compare: str | None = None,
           plots: bool = False) -> int:
    """Print the report (``fmt``: text or json); with ``plots``, draw them into ``out`` and log
    them on the parent run."""
    knob = compare_knob(spec, compare)
    snapshot = study.trials  # one read: table, counts, plots and best agree
    results = results_of(snapshot)
    best = rank(results, spec)
    comp = comparison(results, knob, reference_for(spec, knob)) if knob else None
    prov, tracking = provenance(snapshot), None
    if plots:
        from orchestrator.report.ui import ParentRun
        from orchestrator.store.study import check_file

        check_file(spec.tracking_uri, "tracking_uri", f"`{paste_command(spec, 'check')} --repair`")  # as check says
        tracking = ParentRun.find(spec, study)
        if not prov and tracking.run_id is not None:
            prov = tracking.child_tags()
    rep = build_report(spec, study, snapshot, results, best, comp, prov)
    rep.update(plots=[], plots_dir=None, mlflow=None)
    from orchestrator.report.live import cut_off

    cut = cut_off(spec, study)  # RUNNING, but no orchestrator runs them: said, as check says it
    for row in rep["trials"]:
        if row["number"] in cut:
            row["cut_off"] = True
    if tracking is not None:
        from orchestrator.report.plots import remove_stale, write_plots

        folder = (out or Path("mlruns") / "reports" / spec.name).resolve()
        chosen = pick_best(spec, best)
        try:
            paths = write_plots(results, plot_context(spec, rep, prov, None if chosen is None else chosen.number),
                                folder, comp, measurements(snapshot))
            if out is None:  # the report's own folder (a folder given with --out is the user's)
                remove_stale(folder, paths)
        except OSError as exc:  # a read-only folder, a path under a file, a full disk: one line
            raise unwritable_plots(folder, exc) from None
        rep.update(plots=[str(p) for p in paths], plots_dir=str(folder),
                   mlflow=tracking.log(paths, top_markdown(spec, best, comp)))
    if fmt == "json":
        print(json.dumps(finite(rep), indent=1, default=str, allow_nan=False))
        return 0
    if rep["plots_dir"] is not None:
        drawn = ", ".join(Path(p).name for p in rep["plots"]) or "none: no trial has a result yet"
        tail = [f"Plots:   {rep['plots_dir']}/ ({drawn})", f"MLflow:  {rep['mlflow']}"]
    else:
        again = f" --compare {knob}" if knob else ""  # pasted, it draws this comparison's plot too (a tour)
        tail = [f"Plots:   drawn in mlruns/reports/{spec.name}/ and logged on the study's MLflow parent run by: "
                f"{paste_command(spec, 'report')}{again} --plots"]
    print("\n".join([render_text(spec, rep), ""] + best_lines(spec, best, results=results) + [""] + tail))
    return 0


def plot_context(spec: SweepSpec, rep: dict[str, Any], prov: dict[str, Any], best: int | None = None) -> PlotContext:
    """The plots' subtitle (what ran where), memory lines (the budget, the device's memory) and
    the number of the best trial (``pick_best``'s, as the text says it)."""
    from orchestrator.report.plotdata import MemoryLimit, PlotContext

    device = rep["device"]
    model = spec.fixed.get("model")
    where = f"{device} ({rep['device_name']})" if rep["device_name"] else device
    subtitle = (f"{spec.name}: {spec.workload_name}" + (f" model {model}" if model else "") + f" on {where}"
                + (f", torch {rep['torch_version']}" if rep["torch_version"] else "")
                + f"; {rep['results']} trial{'' if rep['results'] == 1 else 's'}")
    budget = next((c.max for c in spec.objective.constraints if c.metric == M.PEAK_MEMORY_GIB and c.max), None)
    limit = None
    if device == "cpu" and spec.fixed.get("cpu_memory_limit_gib"):
        gib = spec.fixed["cpu_memory_limit_gib"]
        limit = MemoryLimit(gib, f"limit: cpu_memory_limit_gib {gib:g} GiB (RLIMIT_DATA)", set=True)
    elif prov.get("total_memory_gib"):
        limit = MemoryLimit(prov["total_memory_gib"], f"device memory: {prov['total_memory_gib']:.1f} GiB")
    front = tuple(r["number"] for r in rep["pareto"] or ())
    return PlotContext(subtitle, spec.objective.metrics, budget, limit, front, best)


# -- the best configuration -----------------------------------------------------------------------

def best_yaml(spec: SweepSpec, study: Any) -> tuple[str, str, str | None]:
    """The best feasible trial's parameters (fixed + sampled + derived) as YAML, a summary, and the
    batch caveat (``batch_doubt``: in the YAML's header too), read once.
    ``study``: a ``StoredStudy``, or the sweep's own ``optuna.Study`` (``orchestrate SPEC --export``)."""
    import yaml

    from orchestrator.search.space import make_plan, trial_params

    results = results_of(study.get_trials(deepcopy=False))  # one read
    best = rank(results, spec)
    if not best:
        from orchestrator.store.records import failed_statuses

        again = failed_statuses(results)
        run = paste_command(spec) + (f" --retry {','.join(again)}" if again else "")  # else it has nothing to run
        from orchestrator.report.document import study_target
        from orchestrator.store.records import constraints_missed

        missed = constraints_missed(spec, results)
        target = study_target(spec, study)
        if missed is not None and not again and target is not None and len(results) >= target:  # nothing left to run
            raise NothingFeasible(f"study {spec.name!r}: {missed}; the constraints are the study's: measure "
                                  f"under others with a new `name:` (see `{paste_command(spec, 'report')}`)")
        if missed is not None:  # a review: 2 of 20 measured, both over the budget, was told to start another study
            raise NothingFeasible(f"study {spec.name!r}: {missed} yet; run `{run}` to measure the rest (or see "
                                  f"`{paste_command(spec, 'report')}`)")
        raise NothingFeasible(f"study {spec.name!r} has no feasible measured trial yet; "
                              f"run `{run}` (or see `{paste_command(spec, 'report')}`)")
    t = pick_best(spec, best)
    device = device_of(spec, study, t)
    params = trial_params(make_plan(spec, device), t.params)
    m = TrialRecord.of(t).metrics
    name = (result_file(t).get("provenance") or {}).get("device_name")
    summary = (f"{spec.name} trial {t.number}: {throughput_text(spec, m)}, peak "
               f"{fmt_num(m.get(M.PEAK_MEMORY_GIB), ' GiB', 2)} ({device}{', ' + name if name else ''})")
    if "device" in spec.space:
        comp = comparison(results, "device", reference_for(spec, "device"))
        advice = device_advice(comp, t) if comp else None
        if advice:
            summary += f"; {advice}"
    header = [f"# {summary}; {paste_command(spec, 'best')}"]
    if (line := script_command(spec, study, t)) is not None:
        header.append(f"# command: {line}")
    if len(best) > 1 and len(spec.objective.metrics) > 1:
        header.append(f"# the best on {spec.objective.metrics[0][0]} of {len(best)} Pareto-optimal trials: "
                      f"{', '.join(str(b.number) for b in best)}")
    if (doubt := batch_doubt(spec, results)) is not None:  # in the file; `best` says it on stderr
        header.append(f"# {doubt}")
    return "\n".join(header) + "\n" + yaml.safe_dump(params, sort_keys=False, default_flow_style=False), summary, doubt


def best_command(spec: SweepSpec, study: Any) -> str:
    """A script spec's best trial as the command line that trains it, with its newline."""
    best = rank(results_of(study.get_trials(deepcopy=False)), spec)
    return f"{script_command(spec, study, pick_best(spec, best))}\n"


def unwritable(what: str, exc: OSError, otherwise: str | None = None, file: bool = True) -> OrchestratorError:
    """``cannot write WHAT: why (file)``: exit 75 where only space is missing (the same command
    works once it is freed), else 2, with ``otherwise``'s remedy where there is one (``file``: the
    file that failed named, where WHAT is a folder)."""
    from orchestrator import exits
    from orchestrator.store.writefault import DISK_FULL, cause

    full = cause(exc) == DISK_FULL
    remedy = "free some space and run the same command" if full else otherwise
    where = f" ({exc.filename})" if exc.filename and file else ""
    error = OrchestratorError(f"cannot write {what}: {exc.strerror or exc}{where}" + (f"; {remedy}" if remedy else ""))
    error.exit_code = exits.STORE_DOWN if full else exits.USAGE
    return error


def unwritable_plots(folder: Path, exc: OSError) -> OrchestratorError:
    """The plots' folder cannot be written (``unwritable``; else another folder: ``--out``)."""
    return unwritable(f"the plots in {folder}", exc, "give a folder that can be written with --out DIR")


def export_best(spec: SweepSpec, study: object, path: Path) -> str:
    """Write the best configuration to ``path``; returns the one-line summary to print."""
    text, summary, _ = best_yaml(spec, study)
    return write_best(path, text, summary)


def write_best(path: Path, text: str, summary: str) -> str:
    """``best_yaml``'s text written to ``path``; the one-line summary to print."""
    from orchestrator.trialdir import write_atomically

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text)  # a full disk leaves no empty or half file behind
    except OSError as exc:
        raise unwritable(str(path), exc, file=False) from None
    return f"Best configuration written to {path}: {summary}"
