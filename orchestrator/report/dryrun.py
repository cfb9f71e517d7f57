"""``orchestrate SPEC --dry-run``: the plan, without importing torch or creating anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.errors import SpecError
from orchestrator.harness.spread import EARLY_STEPS
from orchestrator.spec.load import SweepSpec

if TYPE_CHECKING:
    from orchestrator.search.space import Plan
    from orchestrator.spec.model import Dimension


def print_plan(spec: SweepSpec, slots: list[str] | None = None) -> None:
    """The plan ``--dry-run`` prints; ``slots``: the device slots' names, as a run would take them."""
    from orchestrator.spec import knobs
    from orchestrator.spec.locate import locate, trial_path
    from orchestrator.search.space import count_configurations, guess_device, make_plan
    from orchestrator.redact import shown
    from orchestrator.report.summary import describe_dim, objective_note
    from orchestrator.store.tracking import artifact_root
    from orchestrator.urls import absolute_uri

    if spec.script is not None:
        from orchestrator.spec.script import check_script_file

        check_script_file(spec)
        origin = str(spec.script_file)
    else:
        try:  # as the trial finds it: the working directory first on the path (python -m)
            origin = locate(str(spec.experiment), trial_path()).origin
        except LookupError as exc:
            raise SpecError(str(exc), file=str(spec.path), line=spec.line_of("experiment"), field="experiment") from None
    if spec.device == "auto":
        device = guess_device()
        how = f"auto -> {device} (guessed without importing torch; a real run asks torch)"
    else:  # whether torch has it here is a run's question (a dry run imports no torch)
        device = spec.device
        how = device + ("" if device == "cpu" else " (a real run asks torch whether it is here)")
    if device == "cuda":
        from orchestrator.spec.space_rules import check_cuda_fraction

        check_cuda_fraction(spec)  # the run's rule, said before torch is asked
    plan = make_plan(spec, device)
    n = count_configurations(plan)
    known = [x for x in (spec.search.n_trials, n) if x is not None]
    target = min(known) if known else None  # as the sweep counts it (document.study_target)
    beyond = (f" (one per configuration; search.n_trials: {spec.search.n_trials} is more than the space holds)"
              if n is not None and spec.search.n_trials is not None and spec.search.n_trials > n else "")
    dims = ", ".join(f"{k} x{_count(v)}" for k, v in plan.searched.items())
    objective = ", ".join(f"{d} {m}" for m, d in spec.objective.metrics)
    if spec.objective.constraints:
        objective += "; subject to " + ", ".join(
            f"{c.metric} {'<=' if c.max is not None else '>='} {c.max if c.max is not None else c.min}"
            for c in spec.objective.constraints)
    storage, tracking = shown(absolute_uri(spec.storage)), shown(absolute_uri(spec.tracking_uri))
    seed = f", seed {spec.search.seed}" if spec.search.seed is not None else ""
    t = spec.trial
    from orchestrator.search.strategy import planned, sampler_name

    if planned(spec):
        search = ("auto search: " + (f"ends once no configuration left is likely to beat the best by more "
                                     f"than {spec.search.band:.0%}" if spec.search.stop == "auto" else
                                     "runs the whole budget (stop: budget)"))
    else:
        search = f"{sampler_name(spec)} sampler{seed}"
    out = [f"Plan for {spec.path} (dry run: nothing is created, nothing runs)",
           f"  study        {spec.name}: {search}",
           f"  {'script' if spec.script is not None else 'experiment':<12s} {spec.workload_name} ({origin})",
           *_unchecked_names(spec, origin),
           f"  device       {how}" + (f"; {len(slots)} slots, one trial at a time on each: {', '.join(slots)}"
                                          if slots and len(slots) > 1 else ""),
           f"  space        {n if n is not None else 'continuous'} configuration{'' if n == 1 else 's'}"
           + (f": {dims}" if dims else "")]
    for k, v in plan.searched.items():
        out.append(f"                 {k:<26s} {describe_dim(v)}")
    if plan.fixed:
        out.append("  fixed        " + " ".join(f"{k}={v}" for k, v in plan.fixed.items()))
    out.append(f"  trials       at most {target} in total for the study{beyond}, across resumes{_progress(spec, plan)}")
    held = (f"at least {EARLY_STEPS} measured steps ({t.measure_steps} unless the throughput is known within "
            f"+-{t.precision:.1%} at 95% sooner)" if t.precision is not None and t.measure_steps > EARLY_STEPS
            else f"at least {t.measure_steps} measured steps")
    out.append(f"               each: {t.warmup_steps} warm-up + {held} "
               f"and {t.min_measure_s:g} s; killed after {t.timeout_s:g} s"
               + (f"; measured {t.processes} times, each in a fresh process (median)" if t.processes > 1 else "")
               + ("; leaders closer than their spread are measured again (repeats: auto)"
                  if t.repeats == "auto" and spec.search.sampler == "auto" else ""))
    out.append(f"  objective    {objective}")
    if note := objective_note(spec):
        out.append(f"               {note}")
    out.append(f"  storage      {storage} (Optuna study {spec.name!r})")
    art = artifact_root(tracking, spec.name)
    out.append(f"  tracking     {tracking} (MLflow experiment {spec.name!r})" + (f", artifacts in {art}" if art else ""))
    from orchestrator.spec.script import SCRIPT_PARAMS

    own = SCRIPT_PARAMS if spec.script is not None else ()  # a script's own, not applied by the harness
    used = [k for k in list(plan.fixed) + list(plan.searched)
            if k in knobs.KNOBS and k not in plan.not_applied and k not in own]
    out.append(f"  knobs on {device}  applied: {', '.join(used) or 'none'}")
    for k, why in plan.not_applied.items():
        out.append(f"               not applied: {k} ({why})")
    out += commands(spec, plan)
    print("\n".join(out))


def _unchecked_names(spec: SweepSpec, origin: str) -> list[str]:
    """Where the module declares no ``PARAMS`` literal (``experiments.hf``: any config field is a
    parameter), the dry run cannot check its parameters: it says so, and when the run does."""
    from orchestrator.spec.declared import module_params

    if spec.script is not None or module_params(origin) is not None:
        return []
    return ["               its parameters (names and values) were not checked: it declares no PARAMS dict literal the dry run can read; a run "
            "checks them as it starts, in the probe and the smoke step, before anything is created"]


SHOWN_COMMANDS = 20
"""The most command lines ``--dry-run`` lists for a script spec."""


def commands(spec: SweepSpec, plan: Plan) -> list[str]:
    """A script spec's command line for each configuration (the first ``SHOWN_COMMANDS``)."""
    if spec.script is None:
        return []
    from orchestrator.invocation import tool
    from orchestrator.search.space import configurations, trial_params
    from orchestrator.spec.script import pasteable

    python = tool("python")  # as the user runs this venv's Python (orchestrator/invocation.py)
    configs = configurations(plan) if plan.finite() else None
    if not configs:
        return [f"  commands     sampled from the space: {python} " + " ".join((spec.script, *spec.args))]
    lines = [f"  commands     {len(configs)}, one per configuration (run in the working directory):"]
    for config in configs[:SHOWN_COMMANDS]:
        lines.append(f"               {pasteable(spec, trial_params(plan, config), python)}")
    if len(configs) > SHOWN_COMMANDS:
        lines.append(f"               ... and {len(configs) - SHOWN_COMMANDS} more")
    return lines


def _progress(spec: SweepSpec, plan: Plan | None = None) -> str:
    """How far an existing SQLite study is, read without creating or changing anything; a study
    made from another spec is refused here as the run refuses it (a tour: "a run resumes it", then
    the run's refusal), or taken as the spec is now where it has no result yet."""
    from orchestrator.store.optuna_sql import trial_counts
    from orchestrator.urls import absolute_uri, sqlite_path

    path = sqlite_path(spec.storage)
    counts = {} if path is None else trial_counts(path, spec.name)
    if counts is None:
        return ""
    n = sum(count for state, count in counts.items() if state != "WAITING")
    if not n:
        from orchestrator.store.studyread import beside_spec

        there = beside_spec(spec)
        return "; the study does not exist yet" + ("" if there is None else f" here, but {there}")
    trials = f"{n} trial{'' if n == 1 else 's'}"
    if plan is None:
        return f"; the study exists with {trials}: a run resumes it"
    from orchestrator.search.space import fingerprint
    from orchestrator.store.fingerprint import as_stored, changed
    from orchestrator.store.studyrecord import StudyRecord
    from orchestrator.store.studyread import read_study

    study = read_study(absolute_uri(spec.storage), spec.name)
    stored = StudyRecord.of(study).fingerprint if study is not None else None
    wanted = as_stored(fingerprint(spec, plan))
    what = None if study is None or stored is None or stored.get("device") != wanted.get("device") else \
        changed(spec, spec.storage, stored, wanted, study.trials)  # raises the run's refusal
    return (f"; the study exists with {trials}: a run resumes it" if what is None else
            f"; the study exists with {trials} and no result yet: a run takes the spec as it is now ({what})")


def _count(dim: Dimension) -> str:
    """A dimension's number of values, ``~`` for a continuous range."""
    from orchestrator.search.space import dim_values
    from orchestrator.spec.model import Range

    return "~" if isinstance(dim, Range) and dim.step is None else str(len(dim_values(dim)))
