"""What a sweep says about its noise: one line when a measurement's spread is wider than the band
the stop works to (``search.band``), with the figure, the machine's load and what to do; and the
load of each run of the sweep, for ``orchestrate report``.

The figure is the median over the study's measured trials of one measurement's 95% half-width
(``throughput_ci95`` over a trial's processes, times the square root of their number: what one
process can tell). A configuration measured several times is surer than that; the line is about
the machine. Pure: no Optuna, no MLflow.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from orchestrator import machineload
from orchestrator.harness.spread import shown
from orchestrator import metrics as M
from orchestrator.outcome import Status
from orchestrator.spec.load import SweepSpec
from orchestrator.store.record import TrialRecord, status_of


def one_measurement(results: list[Any]) -> tuple[float | None, int]:
    """(median 95% half-width of one measurement, trials it is the median of) over the ok results
    that recorded a spread."""
    spreads = []
    for t in results:
        if status_of(t) != Status.OK:
            continue
        rec = TrialRecord.of(t)
        ci = rec.metrics.get(M.THROUGHPUT_CI95)
        if isinstance(ci, (int, float)) and math.isfinite(ci):
            spreads.append(ci * math.sqrt(rec.process_count))
    return (statistics.median(spreads), len(spreads)) if spreads else (None, 0)


def median_window(results: list[Any]) -> float | None:
    """The median timed window (``measure_s``) of the ok results, seconds."""
    windows = [w for t in results if status_of(t) == Status.OK
               and isinstance(w := TrialRecord.of(t).metrics.get(M.MEASURE_S), (int, float))]
    return statistics.median(windows) if windows else None


def noise_line(spec: SweepSpec, results: list[Any], load: dict[str, Any] | None = None,
               spread: float | None = None, n: int = 0, window: float | None = None) -> str | None:
    """``Noise: ...``, one line, where one measurement's spread is wider than ``search.band``;
    None where it is not (or no trial recorded one). ``load``: this run's
    ``machineload.LoadLog.summary``; ``spread``, ``n``: ``one_measurement``'s, and ``window``:
    ``median_window``'s, where already read. Measuring longer is advised only where it lengthens
    the windows: slow steps already held them past a longer ``min_measure_s`` (a busy machine's
    tour: 0.5 -> 4 advised over windows of 10 s, and nothing changed)."""
    if spread is None:
        spread, n = one_measurement(results)
        window = median_window(results)
    band = spec.search.band
    if spread is None or spread <= band:
        return None
    where = f"; the machine's {machineload.describe(load)}" if load else ""
    t = spec.trial
    target = max(4.0, 4 * t.min_measure_s, 4 * (window or 0.0))
    longer = f"measure longer (trial.min_measure_s: {t.min_measure_s:g} -> {target:.0f}" + (
        f"; the windows already last {window:.3g} s)" if window is not None and window >= 2 * t.min_measure_s else ")")
    if t.repeats == "auto" and spec.search.sampler == "auto":
        more = "trial.repeats: 3; auto, the default, measured only close leaders again"
    elif t.repeats == "auto":
        more = "trial.repeats: 3"
    else:
        more = f"trial.repeats: {t.repeats} -> {max(3, 2 * t.repeats)}"
    return (f"Noise: one measurement of the throughput is within {shown(spread)} at 95% here (median of {n} "
            f"trial{'s' if n != 1 else ''}), wider than the {band * 100:g}% the answer is meant to be within "
            f"(search.band){where}. Configurations closer than that may swap places when run again: run on a "
            f"quieter machine, {longer} or more often ({more})")


def load_lines(runs: list[dict[str, Any]] | None) -> list[str]:
    """The report's lines on the machine's load, one per run of the sweep (the last ``RUNS_KEPT``)."""
    if not runs:
        return []
    import time

    out = []
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["at"])) if r.get("at") else "?"
        out.append(f"  run of {when}: {machineload.describe(r)}")
    return ["Machine load (1-minute load average; the trials add about their threads):"] + out
