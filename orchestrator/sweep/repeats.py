"""One configuration measured several times (``trial.repeats``), each time in a fresh process.

Throughput measured in one process can be off by 10-30% on a busy or small machine (a 2-core
CPU: batch 64 of the tiny BERT measured 1,255, 991 and 922 samples/s in three processes), which
is as large as the differences a search is asked to tell apart. Repeats make the recorded value
the median of several processes. Pure functions, table-tested.

Rules:
- repeats run one after another and stop at the first that is not ``ok``: a configuration that
  runs out of memory (or fails) once is recorded with that status, and the detail says which
  repeat it was and how many fitted before it;
- all ``ok``: each metric is the median over repeats, except memory peaks (``peak_*``), which take
  the largest (what the configuration needs at worst); ``<metric>_spread`` is (max - min) / median
  over the repeats, for samples_per_s and each objective metric, to show how noisy it was;
  ``throughput_ci95`` is the median's 95% half-width over all of them (``harness/spread``:
  ``combined_ci95``), narrower than one window's by the square root of their number;
- the trial's cost (``duration_s``) is the sum of the processes' wall times; the process peak
  resident set is the largest.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Sequence

from orchestrator.protocol import TrialResult
from orchestrator.launch import Launched
from orchestrator.harness.spread import combined_ci95
from orchestrator.metrics import SAMPLES_PER_S, THROUGHPUT_CI95
from orchestrator.outcome import Outcome, Status

if TYPE_CHECKING:
    from orchestrator.store.record import HasAttrs


def combine(runs: Sequence[Launched], repeats: int, objective_metrics: Sequence[str]) -> Launched:
    """The trial's result from its repeats, in the order they ran (the last may have failed)."""
    if not runs:
        raise ValueError("combine needs at least one run")
    duration = sum(r.duration_s for r in runs)
    peaks = [r.peak_rss_gib for r in runs if r.peak_rss_gib is not None]
    peak_rss = max(peaks) if peaks else None
    last = runs[-1]
    if repeats == 1 and len(runs) == 1:
        return last
    if last.outcome.status != Status.OK:
        before = len(runs) - 1
        detail = last.outcome.detail
        if before:  # the configuration is on an edge: it fitted (or ran) before
            detail = (f"repeat {len(runs)} of {repeats}: {detail or last.outcome.status} "
                      f"(repeat{'s 1-' + str(before) if before > 1 else ' 1'} ran ok)")
        outcome = dataclasses.replace(last.outcome, detail=detail, processes=len(runs))
        return Launched(outcome, last.returncode, duration, peak_rss, last.log_path)
    per_run = [r.outcome.metrics for r in runs]
    metrics = combine_metrics(per_run, objective_metrics)
    first = runs[0].outcome.result or TrialResult(Status.OK.value)
    outcome = Outcome(Status.OK, None, dataclasses.replace(first, metrics=metrics), processes=len(runs),
                      repeat_metrics=tuple(per_run))
    return Launched(outcome, last.returncode, duration, peak_rss, runs[0].log_path)


def combine_metrics(per_run: Sequence[dict[str, float]], objective_metrics: Sequence[str]) -> dict[str, float]:
    """One configuration's metrics from several ``ok`` measurements of it (each a process's
    metrics, in the order they ran): see the module's rules."""
    names = [n for n in per_run[0] if all(n in m for m in per_run)]
    metrics: dict[str, float] = {}
    for name in names:
        values = [m[name] for m in per_run]
        metrics[name] = max(values) if name.startswith("peak_") else statistics.median(values)
    for name in dict.fromkeys([SAMPLES_PER_S, *objective_metrics]):
        values = [m[name] for m in per_run if name in m]
        middle = statistics.median(values) if len(values) == len(per_run) else 0
        if middle:
            metrics[f"{name}_spread"] = (max(values) - min(values)) / abs(middle)
    throughputs = [m.get(SAMPLES_PER_S) for m in per_run]
    if all(isinstance(v, (int, float)) and v > 0 for v in throughputs):
        ci = combined_ci95(throughputs, [m.get(THROUGHPUT_CI95) for m in per_run])  # type: ignore[arg-type]  # numbers (checked above); a missing interval is None, as it takes
        if ci is not None:
            metrics[THROUGHPUT_CI95] = ci
        else:
            metrics.pop(THROUGHPUT_CI95, None)
    return metrics


def remeasured(outcome: Outcome, earlier: HasAttrs, objective_metrics: Sequence[str]) -> tuple[Outcome, int]:
    """A configuration measured again (``search/remeasure``): this trial's ``ok`` outcome combined
    with the earlier trial's measurements (``earlier``: the trial that held the result), as one
    trial's repeats are (``combine_metrics``). Returns the outcome and how many trials measured it."""
    from orchestrator.store.record import TrialRecord

    before = TrialRecord.of(earlier)
    runs = list(before.repeat_metrics or [before.metrics]) + list(outcome.repeat_metrics or [outcome.metrics])
    metrics = combine_metrics(runs, objective_metrics)
    result = dataclasses.replace(outcome.result or TrialResult(Status.OK.value), metrics=metrics)
    combined = dataclasses.replace(outcome, result=result, processes=len(runs), repeat_metrics=tuple(runs))
    return combined, (before.measurements or 1) + 1
