"""How noisy a throughput is: the spread of one timed window, and of several measurements of one
configuration. Standard library only, so that every side can call it: the harness's timed
window (``train.figures``), a script's trial, the repeats (``sweep/repeats``) and the replay.

A window's throughput is its samples over its seconds. Split into ``SUBWINDOWS`` parts of equal
steps, each part has a throughput of its own; how far those spread is what the window can tell
about the machine's noise:

- ``throughput_cv``: the parts' population standard deviation over their mean (as recorded since
  the first version);
- ``throughput_ci95``: the half-width of the configuration's 95% interval, on the log scale:
  the recorded throughput ``x`` lies in ``x * exp(-ci95) .. x * exp(ci95)`` (for small values,
  ``+-ci95`` relative: 0.05 = +-5%). It is ``1.96 * s / sqrt(n)`` for ``n`` measurements each
  spread by ``s``, the sample standard deviation of the log of the parts' throughputs. One window
  counts as one measurement, not as ``SUBWINDOWS``: a second process measures a load that came
  and went between the windows, which the parts of one window cannot see. On the 2-core machine
  here, under a busy loop switched on and off, processes of one configuration differed by about as
  much as the parts of one window did (``bench/noise.py`` measures both).

With several measurements (``trial.repeats``, or a configuration measured again by the search),
``s`` is the larger of their own spread (the log of their throughputs) and the median of their
windows' ``s``: two measurements that agree by chance do not make a noisy machine quiet.
"""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Sequence

from orchestrator import metrics as M

SUBWINDOWS = 5
Z95 = 1.96
EARLY_STEPS = SUBWINDOWS
"""The fewest steps a window closed by its precision holds: one step in each part."""


def subwindow_rates(step_s: Sequence[float], parts: int = SUBWINDOWS) -> list[float]:
    """Throughput (steps per second) of ``parts`` consecutive groups of equal steps, the steps left
    over counted in the last group: a window ends at the step that closed it, and a stall there (a
    script recompiled for its short last batch: one 2.5-s step among 2.9-ms ones) was in the
    throughput but outside its spread. Fewer than two steps: none."""
    return rates_from_totals(list(itertools.accumulate(step_s, initial=0.0)), parts, leftover=True)


def rates_from_totals(totals: Sequence[float], parts: int = SUBWINDOWS, leftover: bool = False) -> list[float]:
    """``subwindow_rates`` from the running totals of the step times (``[0, t1, t1 + t2, ...]``):
    a few subtractions however long the window, so a window may ask at every step. Without
    ``leftover`` the steps after the last whole group are not counted: the precision rule
    (``known_within``) is asked once each group holds one more step, and closes a window there."""
    steps = len(totals) - 1
    n = min(parts, steps)
    if n < 2:
        return []
    size = steps // n
    bounds = [i * size for i in range(n + 1)]
    if leftover:
        bounds[-1] = steps
    sums = [totals[b] - totals[a] for a, b in zip(bounds, bounds[1:])]
    return [(b - a) / s for a, b, s in zip(bounds, bounds[1:], sums)] if all(s > 0 for s in sums) else []


def window_spread(step_s: Sequence[float], parts: int = SUBWINDOWS) -> tuple[float | None, float | None]:
    """``(throughput_cv, s)`` of one window from its step times (seconds, or any one unit): the
    parts' coefficient of variation and the sample standard deviation of their log; None where the
    window has fewer than two steps."""
    rates = subwindow_rates(step_s, parts)
    if len(rates) < 2:
        return None, None
    mean = statistics.fmean(rates)
    cv = statistics.pstdev(rates) / mean
    return cv, log_spread(rates)


def log_spread(rates: Sequence[float]) -> float:
    """The sample standard deviation of the log of two or more parts' rates: a window's ``s``."""
    return statistics.stdev(math.log(r) for r in rates)


def known_within(totals: Sequence[float], precision: float) -> bool:
    """Whether the steps whose running totals these are (``rates_from_totals``) know their
    throughput within ``precision`` at 95%, by the window's own interval (``throughput_ci95``:
    1.96 times the spread of five parts, the convention of every interval recorded, optimistic
    with one step a part), with at least ``EARLY_STEPS`` steps: the spec's ``trial.precision``
    closes the window then."""
    rates = rates_from_totals(totals) if len(totals) > EARLY_STEPS else []
    return len(rates) >= 2 and Z95 * log_spread(rates) <= precision


def ci95(spread: float | None, measurements: int = 1) -> float | None:
    """The 95% half-width (log scale) of a value measured ``measurements`` times, each spread by
    ``spread`` (the standard deviation of the log of one measurement)."""
    if spread is None or measurements < 1:
        return None
    return Z95 * spread / math.sqrt(measurements)


def window_figures(step_s: Sequence[float], parts: int = SUBWINDOWS) -> dict[str, float | None]:
    """The window's spread figures by metric name (``metrics.THROUGHPUT_CV``, ``THROUGHPUT_CI95``):
    what a trial records beside its throughput. A script's runner calls this with its steps' times."""
    cv, s = window_spread(step_s, parts)
    return {M.THROUGHPUT_CV: cv, M.THROUGHPUT_CI95: ci95(s)}


def combined_ci95(values: Sequence[float], windows_ci95: Sequence[float | None]) -> float | None:
    """``throughput_ci95`` of a configuration measured ``len(values)`` times (each value a
    throughput > 0; ``windows_ci95``: each measurement's own ``throughput_ci95``, None where it has
    none): see the module's docstring."""
    n = len(values)
    if n == 0 or any(v <= 0 for v in values):
        return None
    own = [c / Z95 for c in windows_ci95 if c is not None]
    within = statistics.median(own) if own else None
    between = statistics.stdev(math.log(v) for v in values) if n > 1 else None
    known = [s for s in (within, between) if s is not None]
    return ci95(max(known), n) if known else None


def shown(ci: float, table: bool = False) -> str:
    """A 95% half-width (log scale) as a person reads it: ``+-4.0%`` where the interval is nearly
    symmetric (up to 25%), else the factor either way, ``a factor of 6.8 either way`` (``table``:
    ``x/6.8``, in a column headed ``+-95%``)."""
    if ci <= 0.25:
        return f"{ci:.1%}" if table else f"+-{ci:.1%}"
    return f"x/{math.exp(ci):.1f}" if table else f"a factor of {math.exp(ci):.1f} either way"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between the two nearest (``step_time_ms_p90``)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
