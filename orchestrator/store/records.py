"""What a study records, and how its trials are read back: results by configuration, the best
ones, and how an outcome is told to Optuna. Pure functions over Optuna's frozen trials.

A configuration's result is its newest trial with a final status (``outcome.RESULT_STATUSES``).
Older ones stay in the study as its history: a configuration retried on purpose (``--retry``)
has the new trial's result, and the old trial is ``superseded``. Trials that answered a proposal
from the record (``repeat_of``) or stepped aside for a configuration in flight (``deferred_to``)
are never results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import metrics as M
from orchestrator.protocol import TrialResult
from orchestrator.outcome import INFEASIBLE, RESULT_STATUSES, Outcome, Status
from orchestrator.keys import config_key
from orchestrator.spec.load import SweepSpec
from orchestrator.store.record import HasAttrs, TrialRecord, Writable, attrs_of, is_attempt, status_of, write

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial
    from optuna import Study

FIT_CONSTRAINT = "fits_in_memory"


def failed_statuses(results: list[Any]) -> list[str]:
    """The statuses of ``results`` that count as failures (``outcome.failed_result``): where no
    result is feasible, the sweep exits 3 (and so does its run again: one rule for both) and the
    summary's ``Retry:`` line names them for ``--retry``."""
    from orchestrator.outcome import failed_result

    return sorted({str(r.status.value) for t in results if failed_result((r := TrialRecord.of(t)).status, r.detail)
                   and r.status is not None})


def results_of(trials: list[Any]) -> list[Any]:
    """One trial per configuration that has a result: the newest final one, in trial order. A trial
    counts once Optuna has it finished: ``tell`` writes the status attribute first, and another
    orchestrator reading between the two writes sees a RUNNING trial (in flight, not a result)."""
    newest: dict[str, Any] = {}
    for t in sorted(trials, key=lambda t: t.number):
        if status_of(t) in RESULT_STATUSES and t.state.is_finished() and is_attempt(t):
            newest[config_key(t.params)] = t
    return sorted(newest.values(), key=lambda t: t.number)


def measurements(trials: list[Any]) -> list[Any]:
    """Every trial that counted as a result when it ended, in trial order: ``results_of``' newest
    and those a later trial of their configuration superseded (measured again, ``--retry``)."""
    return [t for t in sorted(trials, key=lambda t: t.number)
            if status_of(t) in RESULT_STATUSES and t.state.is_finished() and is_attempt(t)]


def result_trials(study: Study) -> list[Any]:
    """``results_of`` the study's trials."""
    return results_of(study.get_trials(deepcopy=False))


def objective_values(spec: SweepSpec, metrics: dict[str, float]) -> list[float] | None:
    values = [metrics.get(m) for m, _ in spec.objective.metrics]
    if any(v is None or v != v for v in values):
        return None
    return [float(v) for v in values if v is not None]  # none is None (above)


def is_feasible(trial: FrozenTrial) -> bool:
    return trial.state.name == "COMPLETE" and all(v <= 0 for v in trial.constraints.values())


def best_trials(study: Study, spec: SweepSpec) -> list[Any]:
    """Feasible measured trials, best first (single objective), or the Pareto front."""
    return rank(result_trials(study), spec)


def rank(results: list[Any], spec: SweepSpec) -> list[Any]:
    """``best_trials`` over trials already read (``results_of``' list)."""
    feasible = [t for t in results if is_feasible(t)]
    if len(spec.objective.metrics) == 1:
        sign = -1 if spec.objective.metrics[0][1] == "maximize" else 1
        return sorted(feasible, key=lambda t: sign * t.values[0])
    front = [t for t in feasible
             if not any(_dominates(o.values, t.values, spec) for o in feasible if o is not t)]
    return sorted(front, key=lambda t: t.number)


def constraints_missed(spec: SweepSpec, results: list[Any]) -> str | None:
    """Where measured results exist and none is feasible because of the spec's constraints: each
    constraint with the nearest any result came (a tour: a 0.1-GiB budget under 0.24-GiB trials
    read "No configuration has a feasible measured result yet", and ``best`` said to run the
    finished sweep again). None otherwise."""
    measured = [t for t in results if t.state.name == "COMPLETE" and t.values]
    if not spec.objective.constraints or not measured or any(is_feasible(t) for t in measured):
        return None
    parts = []
    for c in spec.objective.constraints:
        seen = [(v, t.number) for t in measured if isinstance(v := TrialRecord.of(t).metrics.get(c.metric), (int, float))]
        bound = f"{c.metric} <= {c.max:,g}" if c.max is not None else f"{c.metric} >= {c.min:,g}"
        if seen:
            value, number = min(seen) if c.max is not None else max(seen)
            shown = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"  # 27,712, not 2.77e+04
            bound += f" ({'lowest' if c.max is not None else 'highest'} measured {shown}, trial {number})"
        parts.append(bound)
    return f"no measured configuration meets the constraints: {'; '.join(parts)}"


def _dominates(a: list[float], b: list[float], spec: SweepSpec) -> bool:
    better = False
    for x, y, (_, d) in zip(a, b, spec.objective.metrics):
        x, y = (x, y) if d == "minimize" else (-x, -y)
        if x > y:
            return False
        better |= x < y
    return better


def tell(study: Study, trial: Any, spec: SweepSpec, outcome: Outcome, extra: dict[str, Any]) -> Status:
    """Record a trial's outcome in Optuna; OOM and crashes are infeasible, never given a value.
    ``extra``: more of the trial's ``record.TrialRecord`` fields. Returns the status recorded
    (``ok`` without the objective metric(s) becomes ``error``)."""
    from optuna.trial import TrialState

    metrics = outcome.metrics
    status = outcome.status
    values = objective_values(spec, metrics) if status == Status.OK else None
    attrs: dict[str, Any] = {"status": status, "metrics": metrics, **extra}
    if outcome.detail:
        attrs["detail"] = outcome.detail[:2000]
    if status == Status.OK and values is None:
        status = attrs["status"] = Status.ERROR
        attrs["detail"] = "the trial did not report the objective metric(s)"
    write(trial, **attrs)
    if status in INFEASIBLE:
        trial.set_constraint(FIT_CONSTRAINT, 1.0)
        _tell(study, trial, TrialState.PRUNED)
    elif values is None:
        _tell(study, trial, TrialState.FAIL)
    else:
        trial.set_constraint(FIT_CONSTRAINT, -1.0)
        for c in spec.objective.constraints:
            value = metrics.get(c.metric)
            trial.set_constraint(c.metric, c.violation(value) if value is not None else 1.0)
        _tell(study, trial, TrialState.COMPLETE, values)
    return status


def _tell(study: Study, trial: Any, state: Any, values: list[float] | None = None) -> None:
    """``study.tell``, raising ``UpdateFinishedTrialError`` (as a refused attribute write does) when
    another orchestrator finished the trial first (``recovery.fail_stale``), whenever that landed:
    Optuna's own ``tell`` says ``ValueError`` for a trial it finds finished."""
    from optuna.exceptions import UpdateFinishedTrialError

    told = study.tell(trial, values, state=None if values is not None else state, skip_if_finished=True)
    if told.state != state:
        raise UpdateFinishedTrialError(f"trial {told.number} is {told.state.name}: another orchestrator "
                                       "finished it first")


def run_tags(result: TrialResult | None, status: str, detail: str | None,
             signal: str | None = None) -> dict[str, str]:
    """MLflow tags of a trial's run: the recorded ``status``, and what its result file says."""
    result = result or TrialResult(str(status))
    prov = result.provenance or {}
    tags = {"status": status, "device": (result.applied or {}).get("device", ""),
            "device_name": prov.get("device_name", ""), "torch_version": prov.get("torch_version", "")}
    if detail:
        tags["detail"] = detail
    if result.not_applied:
        tags["not_applied"] = "; ".join(f"{k}: {v}" for k, v in result.not_applied.items())
    if result.phase is not None:
        tags["failed_in"] = f"{result.phase} step {result.step}"
    if signal:
        tags["signal"] = signal
    fell_back = (result.info or {}).get("mps_fallback_ops")
    if fell_back:
        tags["mps_fallback_ops"] = ", ".join(map(str, fell_back))[:5000]
    return {k: str(v) for k, v in tags.items() if v not in (None, "")}


def run_metrics(trial_metrics: dict[str, float], result: TrialResult | None,
                extra: dict[str, Any]) -> dict[str, float]:
    out = dict(trial_metrics)
    for k in (M.DURATION_S, "process_peak_rss_gib"):
        if extra.get(k) is not None:
            out[k] = extra[k]
    for k, v in ((result.memory_at_failure if result is not None else None) or {}).items():
        if isinstance(v, (int, float)):
            out[f"at_oom_{k}"] = v
    return out


TRACE_ATTRS = ("reason", "predicted_by", "repeat_of", "processes", "neighbour_of", "retry_of",
               "retry_reason", "slot", "host", "gpu_index", "gpu_uuid", "cpu_cores", "worker")
"""User attributes that are also MLflow tags of the trial's run."""


def trace_tags(attrs: dict[str, Any]) -> dict[str, str]:
    return {k: str(attrs[k]) for k in TRACE_ATTRS if k in attrs}


def trial_trace_tags(trial: HasAttrs, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """``trace_tags`` of what the trial recorded, ``extra`` (not written yet) over it."""
    return trace_tags({**attrs_of(trial, TRACE_ATTRS), **(extra or {})})


def link_run(trial: Writable, run_id: str) -> None:
    """The trial's MLflow run id as a user attribute, from the tracker's writer thread, while the
    trial is still running (a finished trial's attributes are fixed: then its run is found by its
    ``trial_number`` tag)."""
    from optuna.exceptions import UpdateFinishedTrialError

    from orchestrator.store.writefault import StoreUnwritable

    try:
        write(trial, mlflow_run_id=run_id)
    except (UpdateFinishedTrialError, StoreUnwritable):  # the study's own write says so, in the loop
        pass
