"""What a sweep says when it ends: the summary a person reads, and the parent run's description.
The same for a sweep that just ran and for a finished study's command run again (``resume``)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from orchestrator.invocation import command, tool
from orchestrator.outcome import NOT_FITTING
from orchestrator.machine import cpu_flags
from orchestrator.report.noise import noise_line
from orchestrator.report.precision import half_precision_note
from orchestrator.redact import pasteable, shown
from orchestrator.spec.load import DEFAULT_STORAGE, DEFAULT_TRACKING_URI, SweepSpec
from orchestrator.store.record import TrialRecord, has_status, status_of
from orchestrator.urls import Origins, command_flags, from_environment, is_tracking_server
from orchestrator.report.summary import fmt_params, fmt_seconds, of_target, status_counts

if TYPE_CHECKING:
    from orchestrator.search.space import Plan


def store_flags(spec: SweepSpec, origins: Origins = Origins()) -> list[str]:
    """``--storage`` and ``--tracking-uri`` as the printed commands need them (``stores``): a
    pasted command reaches the same stores, and carries no password."""
    return command_flags(spec, origins, (DEFAULT_STORAGE, DEFAULT_TRACKING_URI))


def resume_flags(spec: SweepSpec, origins: Origins = Origins()) -> list[str]:
    """``store_flags``, and ``--devices`` as given: a pasted resume runs on the same slots (a
    resume without it ran the rest on one whole-machine slot, ranked beside the pinned ones); and
    ``--n-trials``, ``--stop`` and ``--device`` as given (the fault tour's resume line dropped them)."""
    return [*store_flags(spec, origins), *(["--devices", origins.devices] if origins.devices is not None else []),
            *origins.flags]


def _without(flags: tuple[str, ...], name: str) -> tuple[str, ...]:
    """``flags`` (pairs of a flag and its value) less ``name``'s pair."""
    pairs = [flags[i:i + 2] for i in range(0, len(flags), 2)]
    return tuple(w for pair in pairs if pair[0] != name for w in pair)


def trial_time_s(trials: list[Any]) -> float:
    return sum(TrialRecord.of(t).duration_s or 0 for t in trials if has_status(t))


def description(spec: SweepSpec, results: list[Any], best: list[Any], target: int, spent_s: float,
                stopped_because: str | None) -> str:
    """The study's MLflow parent run's description (markdown)."""
    out = [f"**{spec.name}**: {of_target(len(results), target)} trials ({status_counts(results)}); "
           f"{fmt_seconds(spent_s)} of trial time."]
    if stopped_because:
        out.append(f"Stopped: {stopped_because}.")
    from orchestrator.report.document import pick_best

    if b := pick_best(spec, best):
        out.append("Best: " + fmt_params(b.params) + " -> " + ", ".join(
            f"{m} {v:,.2f}" for (m, _), v in zip(spec.objective.metrics, b.values)))
    return "\n\n".join(out)


def target_of(spec: SweepSpec, plan: Plan) -> tuple[list[dict[str, Any]] | None, int]:
    """The plan's configurations (None: a continuous space) and how many results the study's
    budget asks for."""
    from orchestrator.search.space import configurations

    configs = configurations(plan) if plan.finite() else None
    target = spec.search.n_trials or (len(configs) if configs is not None else 0)
    return configs, min(target, len(configs)) if configs is not None else target


def parent_close(spec: SweepSpec, trials: list[Any], target: int, stopped_because: str | None = None,
                 status: str = "FINISHED") -> tuple[str, str, dict[str, float]]:
    """What the study's parent run is closed with: its status, ``description`` and metrics."""
    from orchestrator.store.records import rank, results_of

    results = results_of(trials)
    return closed_with(spec, results, rank(results, spec), trial_time_s(trials), target, stopped_because, status)


def closed_with(spec: SweepSpec, results: list[Any], best: list[Any], spent_s: float, target: int,
                stopped_because: str | None, status: str) -> tuple[str, str, dict[str, float]]:
    """``parent_close`` from the study's results and best, read already."""
    from orchestrator.report.document import pick_best

    b = pick_best(spec, best)
    return status, description(spec, results, best, target, spent_s, stopped_because), {
        "trials_done": len(results), "best_" + spec.objective.metrics[0][0]: b.values[0] if b else float("nan")}


def summary(spec: SweepSpec, results: list[Any], best: list[Any], target: int, spent_s: float,
            elapsed_s: float, stopped_because: str | None, stopped_by_search: bool, origins: Origins,
            load: dict[str, Any] | None = None, errors: int = 0, first_error: tuple[str, str] | None = None) -> list[str]:
    """The end-of-sweep lines: results, why it stopped (and how to go on), the best, the stores and
    the commands to resume, browse and report. ``errors``: configurations whose trials ended
    ``error`` (each once, however many runs it failed in), which are no result (they run again),
    said beside the results;
    ``first_error``: the first of them, (``trial #N: its whole note``, its log), which a trial's
    line cuts short (a script tour: the advice, "let it train for longer", was after the cut)."""
    from orchestrator.urls import absolute_uri

    failed = f"; {errors} ended 'error' (not results: they run again on the next run)" if errors else ""
    lines = ["", f"{spec.name}: {of_target(len(results), target)} trials have a result ({status_counts(results)}){failed}; "
             f"trial time {fmt_seconds(spent_s)}, this run {fmt_seconds(elapsed_s)}."]
    if errors and first_error is not None:
        lines.append(f"First error: {first_error[0]}" + (f"; its log: {first_error[1]}" if first_error[1] else ""))
    stores = store_flags(spec, origins)
    if stopped_because:
        lines.append(f"Stopped: {stopped_because}.")
        if stopped_by_search and spec.search.stop == "auto":
            go_on = replace(origins, flags=_without(origins.flags, "--stop"))
            lines.append(f"Go on anyway: {command(spec.path, *resume_flags(spec, go_on), '--stop', 'budget')}   "
                         "(or search.stop: budget in the spec)")
    from orchestrator.report.document import best_lines

    lines += best_lines(spec, best, "Best configurations:", results)
    if not best and results and all(status_of(t) in NOT_FITTING for t in results):
        caps = [f"{k}: {spec.fixed[k]}" for k in ("cpu_memory_limit_gib", "memory_fraction") if k in spec.fixed]
        lines.append("Nothing fit: every configuration ran out of memory (or swapped, or was predicted to). "
                     + (f"Under the spec's {' and '.join(caps)}: where even the smallest ran out before its "
                        "first step (trial.log), the cap is below what the process needs to start; raise it, or "
                        "try smaller batches, a lower precision or activation checkpointing." if caps else
                        "That is the answer for this machine; try smaller batches, a lower precision or "
                        "activation checkpointing."))
    if not best and (again := retry_line(spec, results, origins)):
        lines.append(again)
    fixed_isa = spec.fixed.get("cpu_isa")
    note = half_precision_note(results, cpu_flags(), None if fixed_isa is None else str(fixed_isa))
    if note:
        lines.append(note)
    if noisy := noise_line(spec, results, load):  # the measurements' spread against the band
        lines.append(noisy)
    tracking = absolute_uri(spec.tracking_uri)
    tracking_flags = stores[stores.index("--tracking-uri"):] if "--tracking-uri" in stores else []
    lines += [f"Study:   {shown(absolute_uri(spec.storage))} (study {spec.name!r})",
              f"Runs:    {shown(tracking)} (experiment {spec.name!r})",
              f"Resume:  {command(spec.path, *resume_flags(spec, origins))}",
              f"Browse:  {command('ui', spec.path, *tracking_flags)}   " + (
                  f"(or: {shlex.join([tool('mlflow'), 'ui', '--backend-store-uri', pasteable(tracking)])})"
                  if not is_tracking_server(tracking) else f"(or open {pasteable(tracking)}: the server serves MLflow's UI)"),
              f"Report:  {command('report', spec.path, *stores)}   (add --plots for the plots)"]
    if env := from_environment(origins):
        lines.append(f"         (these commands find the stores through {' and '.join(env)}, as this run did)")
    return lines


def retry_command(spec: SweepSpec, trials: list[Any], origins: Origins) -> tuple[str, list[str]] | None:
    """For a study with no feasible result: the command that runs its timed-out, crashed or
    diverged configurations again, and those statuses (a tour: the printed ``Resume:`` ran nothing,
    and said nothing); None where one is feasible or none ended so."""
    from orchestrator.store.records import failed_statuses, rank, results_of

    results = results_of(trials)
    if rank(results, spec) or not (again := failed_statuses(results)):
        return None
    return command(spec.path, *resume_flags(spec, origins), "--retry", ",".join(again)), again


def retry_said(again: tuple[str, list[str]]) -> str:
    """The closing line on stderr of a sweep that exits 3 with no failure of its own (``retry_command``'s
    answer): a run again of a finished study, or one that measured only what could not fit."""
    return (f"orchestrate: no configuration has a feasible result, and none failed in this run; to run the ones "
            f"that ended {'/'.join(again[1])} again: {again[0]}")


def retry_line(spec: SweepSpec, results: list[Any], origins: Origins) -> str | None:
    """``retry_command`` as the summary's ``Retry:`` line."""
    if (again := retry_command(spec, results, origins)) is None:
        return None
    from orchestrator.outcome import failed_result

    n = sum(failed_result((r := TrialRecord.of(t)).status, r.detail) for t in results)
    return (f"Retry:   {again[0]}   (runs the {n} {'/'.join(again[1])} configuration(s) again" +
            ("; raise trial.timeout_s first if they need longer)" if "timeout" in again[1] else ")"))


def check_store_files(spec: SweepSpec, origins: Origins, absolute: bool = False) -> str:
    """A store's file that is damaged or not a database: one line with what to do (MLflow's is
    moved aside and rebuilt by ``check --repair``), for ``check`` and ``delete`` (``absolute``: the
    files named by their absolute paths, as ``delete`` names every store); the repair's command."""
    from orchestrator.store.study import check_file
    from orchestrator.urls import absolute_uri

    repair = command("check", spec.path, *store_flags(spec, origins), "--repair")
    shown_as = absolute_uri if absolute else str
    check_file(shown_as(spec.storage), "storage", thorough=True)  # every page: a few seconds at most
    check_file(shown_as(spec.tracking_uri), "tracking_uri", f"`{repair}`", thorough=True)
    return repair
