"""Measuring again: what the ``auto`` search does where two leading configurations are closer than
their spread, and what its stop says when they stay that close.

A measured configuration is not known exactly: its value carries its spread (``throughput_ci95``,
``priors.measured_noise``), and the model's posterior there says so. So a measured configuration
other than the best (a *rival*) has a chance to beat it by more than the band, as an unmeasured one
has, and the stop's chance counts both (``planner``). Where the likeliest candidate is a rival, more
measurements of the two decide, not a new configuration:

- **alternating**: of the best and its rival, the one whose last measurement is older is measured
  next (A B A B, as the benches measure two builds), so a machine that drifts (heats up, gets
  busier) shifts both alike; each new measurement is combined with the earlier ones
  (``sweep/repeats.combine_metrics``: the median, its spread over all of them);
- **within an allowance**: measuring again costs at most ``ALLOWANCE`` of the time the first
  measurements took (``again_allowed``); after that, or with ``trial.repeats`` a number (the spec
  says how often to measure), the stop comes once no unmeasured configuration is likely to beat the
  best, and says that it is unsure, which rival, and what would tell them apart (``unsure_reason``).

Pure: the planner calls these with what the study holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, NamedTuple

import numpy as np

from orchestrator.harness.spread import shown
from orchestrator.search.priors import STEP_TIMES, THROUGHPUT, pooled_noise

FLOOR_WEIGHT = 2.0
"""How many degrees of freedom the device's assumed noise floor (``priors.NOISE_FLOOR``) counts
for against the processes measured here (``Measurements.floor``): as if it had been measured by two
extra pairs of processes, so that one lucky pair cannot talk it down alone."""

ALLOWANCE = 0.25
"""Measuring again may cost this fraction of the time the first measurements took: on a noisy
machine the search also explores more (each configuration's value is less sure), and issue #38
asks the stop at 10% noise to come at most 1.5x as late as at 2% (half the time gave 1.4-2.4x on
the CPU landscapes; a quarter keeps the renamed landscapes of ``bench/script_names.py`` under 0.6x
of the grid at 2%)."""


@dataclass(frozen=True)
class Measured:
    """A configuration with a result, as the search sees it."""

    number: int
    """The trial that holds its result (its latest measurement)."""
    measurements: int = 1
    """How many trials measured it (the first and each measured again)."""
    duration_s: float = 0.0
    """One measurement's seconds (the latest trial's)."""
    processes: int = 1
    """The fresh processes its latest trial's value is the median of (``trial.repeats``: N)."""


@dataclass
class Measurements:
    """The configurations with a value, as one decision reads them from the study's results (by
    configuration index, in the order read): what measuring again and the model's noise need."""

    noise_floor: float
    """The least spread of one measurement on this device (``priors.NOISE_FLOOR``)."""
    measured: dict[int, Measured] = field(default_factory=dict)
    values: dict[int, float] = field(default_factory=dict)
    """The recorded objective value."""
    own: list[float | None] = field(default_factory=list)
    """Per value, the spread of one of its measurements it reported (``priors.measured_noise``)."""
    processes: list[int] = field(default_factory=list)
    """Per value, the measurements (processes) it is the median of."""
    first_s: float = 0.0
    """Seconds of every result's latest trial, failed ones included: what the first measurements cost."""
    between_ss: float = 0.0
    """Over every configuration measured by more than one process: the squared deviations of each
    process's log value from its configuration's mean (``add_processes``)."""
    between_dof: int = 0
    """Their degrees of freedom: each such configuration's processes less one."""

    def add(self, i: int, measured: Measured, value: float, own: float | None, processes: int) -> None:
        self.measured[i], self.values[i] = replace(measured, processes=processes), value
        self.own.append(own)
        self.processes.append(processes)

    def add_processes(self, values: list[float]) -> None:
        """One configuration's values as each of its processes measured it (> 0): how far two
        processes of one configuration disagree on this machine, for ``floor``."""
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) > 1:
            mean = sum(logs) / len(logs)
            self.between_ss += sum((x - mean) ** 2 for x in logs)
            self.between_dof += len(logs) - 1

    def floor(self) -> float:
        """The least noise of one measurement (standard deviation of its log): the device's
        ``noise_floor`` as a prior worth ``FLOOR_WEIGHT`` degrees of freedom, pooled with what
        processes of the same configuration measured here (``add_processes``). A quiet H100 whose
        processes agree within 0.3% is no longer held to the 1% assumed for every GPU (its headline
        stopped unsure of three configurations 0.0-0.5% apart), and a machine whose processes
        disagree by more than their windows show is priced at what they disagree by."""
        return math.sqrt((FLOOR_WEIGHT * self.noise_floor ** 2 + self.between_ss) / (FLOOR_WEIGHT + self.between_dof))

    def noise(self) -> np.ndarray | None:
        """Each value's noise (``priors.pooled_noise``), None where no trial reported a spread."""
        pooled = pooled_noise(self.own, self.processes, self.floor())
        return None if pooled is None else np.array(pooled)

    def typical(self) -> float | None:
        """One measurement's spread, the sweep's median (None: none reported)."""
        known = [u for u in self.own if u is not None]
        return float(np.median(known)) if known else None

    def best(self, maximize: bool) -> int | None:
        """The configuration with the best recorded value: the answer the sweep reports (None: none yet)."""
        return (max if maximize else min)(self.values, key=self.values.__getitem__) if self.values else None

    def durations(self) -> dict[int, float]:
        return {i: m.duration_s for i, m in self.measured.items() if m.duration_s > 0}

    def rivals(self, best: int, busy: set[int]) -> list[int]:
        """Measured configurations other than ``best``, not in flight (``busy``)."""
        if best < 0:
            return []
        return [i for i in self.measured if i != best and i not in busy]

    def again(self, best: int, rival: int, gap: float, threshold: float, busy: set[int]) -> int | None:
        """Which of ``best`` and ``rival`` (``gap``: the model's mean of the rival's log value less
        the best's) to measure again, or None: the allowance is spent, or more measurements could
        not settle them (``worth_it``), or both are in flight (with the one due in flight, the other:
        several slots measure the two at once)."""
        left_s = allowance_left(list(self.measured.values()), self.first_s)
        if left_s <= 0:
            return None
        floor = self.floor()
        noise = self.typical() or floor
        a, b = self.measured[best], self.measured[rival]
        if not worth_it(gap, max(noise, floor), threshold, a, b, left_s):
            return None
        pick, other = (best, rival) if next_of_pair(a, b) == "best" else (rival, best)
        if pick in busy:  # several slots: the other one meanwhile, so both see the machine alike
            return None if other in busy else other
        return pick

    def spare(self, best: int, busy: set[int]) -> int | None:
        """``best``, to measure again on a slot that would wait: measured once, not in flight,
        within the allowance."""
        m = self.measured.get(best)
        if m is None or best in busy or m.measurements > 1:
            return None
        return best if allowance_left(list(self.measured.values()), self.first_s) > 0 else None

    def unsure(self, best: tuple[int, str], rival: tuple[int, str], chance: float, band: float, enabled: bool,
               parts: Parts | None = None) -> str:
        """The stop line when ``best`` and ``rival`` (index, parameters) could not be told apart
        (``parts``: ``unsure_reason``'s)."""
        spread = self.typical()
        spent = enabled and not again_allowed(list(self.measured.values()), self.first_s)
        (i, i_text), (j, j_text) = best, rival
        return unsure_reason((i_text, self.measured[i], self.values[i]), (j_text, self.measured[j], self.values[j]),
                             chance, band, None if spread is None else 1.96 * spread, spent, enabled, parts)


def process_values(runs: object, metric: str) -> list[float]:
    """The objective as each process of one configuration measured it (a trial's recorded
    ``repeat_metrics``); none where it is not a throughput or a step time (whose spread is relative:
    ``priors.measured_noise``) or a process lacks it."""
    if metric not in THROUGHPUT + STEP_TIMES or not isinstance(runs, list):
        return []
    values = [r.get(metric) for r in runs if isinstance(r, dict)]
    ok = [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
    return ok if len(ok) == len(runs) else []


def next_of_pair(best: Measured, rival: Measured) -> str:
    """``"best"`` or ``"rival"``: the one whose last measurement is older (alternating)."""
    return "best" if best.number < rival.number else "rival"


def allowance_left(measured: list[Measured], first_s: float) -> float:
    """Seconds measuring again may still take: ``ALLOWANCE`` of ``first_s`` (the first
    measurements' and the failed trials' seconds) less what it took so far (every measurement
    after a configuration's first)."""
    again = sum((m.measurements - 1) * m.duration_s for m in measured)
    return ALLOWANCE * first_s - again


def again_allowed(measured: list[Measured], first_s: float) -> bool:
    return allowance_left(measured, first_s) > 0


def needed(gap: float, noise: float, threshold: float) -> float:
    """Measurements of each of two configurations that would tell, at 95%, that the second (whose
    log value is ``gap`` <= 0 below the first's) is not more than ``threshold`` better, each
    measurement spread by ``noise`` (standard deviation of its log): the difference of two means
    of ``n`` is spread by ``noise * sqrt(2 / n)``."""
    room = threshold - min(gap, 0.0)
    return 2.0 * (noise * 1.645 / room) ** 2


def worth_it(gap: float, noise: float, threshold: float, best: Measured, rival: Measured, left_s: float) -> bool:
    """Whether to measure the two again, with ``left_s`` seconds of the allowance left: always
    until each was measured twice (one measurement may have been far off: a clear difference shows
    at the second), then while the measurements each needs to settle them (``needed``, from the
    gap as it now looks) are within what is affordable."""
    if min(best.measurements, rival.measurements) < 2:
        return True
    pair_s = max(best.duration_s + rival.duration_s, 1e-9)
    affordable = min(best.measurements, rival.measurements) + left_s / pair_s
    return needed(gap, noise, threshold) <= affordable


class Parts(NamedTuple):
    """Where an unsure verdict's chance comes from (each a chance of beating the best by more than
    the band): the named rival ``alone``; the ``rivals`` measured configurations that may (the
    named one among them) together, ``measured``; the ``unmeasured`` ones together, ``open``."""

    alone: float
    measured: float
    rivals: int
    open: float
    unmeasured: int

    @classmethod
    def of(cls, alone: float, any_of: Callable[[list[int]], float], rivals: list[int], open_: list[int]) -> Parts:
        """``any_of``: the chance that one of some configurations beats the best by more than the band."""
        return cls(alone, any_of(rivals), len(rivals), any_of(open_), len(open_))


def unsure_reason(best: tuple[str, Measured, float], rival: tuple[str, Measured, float], chance: float,
                  band: float, spread: float | None, allowance_spent: bool, enabled: bool = True,
                  parts: Parts | None = None) -> str:
    """The stop line of a sweep that cannot tell its best from a rival: which two, how far apart,
    how noisy, and what would tell them apart. ``best``/``rival``: (parameters, record, value);
    ``spread``: one measurement's 95% half-width (log scale), the sweep's typical; ``parts``: where
    the chance comes from, said where the rival's own is under half of it (the H100 headline stopped
    "unsure" naming two leaders 0.4% apart, each within +-0.5%: most of its 5% was the
    configurations not measured)."""
    (b_text, b, b_value), (r_text, r, r_value) = best, rival
    gap = abs(b_value / r_value - 1) if r_value else math.inf
    # processes: every trial's of the configuration, once measured again (``repeats.remeasured``), so
    # not times its trials ("measured 4 and 1 times" for two measurements)
    times = max(b.processes, b.measurements), max(r.processes, r.measurements)
    measured = (f"measured {times[0]} and {times[1]} times" if times[0] > 1 or times[1] > 1 else "measured once each")
    why = ("trial.repeats is a number, so nothing is measured again (trial.repeats: auto would)" if not enabled
           else "measuring again used its allowance, a quarter of the first measurements' time" if allowance_spent
           else "more measurements could not settle it within the allowance")
    noise = f", each measurement within {shown(spread)} at 95%" if spread is not None else ""
    split = ""
    if parts is not None and parts.alone < chance / 2:
        split = f": trial {r.number} alone {parts.alone:.1%}"
        if parts.rivals > 1:
            split += f", the {parts.rivals} measured rivals together {parts.measured:.1%}"
        if parts.unmeasured:
            split += (f", the {parts.unmeasured} configuration{'s' if parts.unmeasured > 1 else ''} not measured "
                      f"{parts.open:.1%}")
    return (f"unsure of the answer: trial {b.number} ({b_text}) and trial {r.number} ({r_text}) are {gap:.1%} apart, "
            f"{measured}{noise}; the chance that the answer is more than {band:.0%} off is {chance:.0%}{split} "
            f"({why}). To tell them apart: run on a quieter machine, measure longer (trial.min_measure_s), "
            f"or measure more (trial.repeats)")


def describe(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())
