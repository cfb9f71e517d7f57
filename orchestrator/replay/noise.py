"""The measurement noise of a replayed sweep: what a second measurement of the same configuration
would see, and what the trial itself reports of it.

A recorded landscape holds one throughput per configuration, taken as the truth. A replayed trial
measures ``truth * bias(t) * exp(N(0, cv(t)))`` at the simulated time ``t`` of its start, and
reports its spread as a real trial does (``harness/spread``): its window's ``throughput_cv`` and
``throughput_ci95``, estimated from ``SUBWINDOWS`` parts, so the estimate is itself noisy (a
chi distribution with ``SUBWINDOWS - 1`` degrees of freedom around ``cv(t)``). On the 2-core
machine a process's throughput differed from the next one's by about as much as its window's parts
did (``bench/noise.py``), which is what this assumes.

``cv`` is the noise level (the standard deviation of the log of one measurement: 0.10 is "10%
CV"). A drifting level (``drift_to``, ``slowdown``) is a machine that heats up: from ``cv`` at the
start to ``drift_to`` at ``over_s`` seconds (and flat after), while every throughput falls by
``slowdown`` over the same time, as under thermal throttling. Pure; seeded by its caller.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from orchestrator import metrics as M
from orchestrator.harness.spread import SUBWINDOWS, Z95


@dataclass(frozen=True)
class Noise:
    cv: float = 0.0
    """The spread of one measurement (standard deviation of its log) at the start."""
    drift_to: float | None = None
    """The spread at ``over_s`` seconds and after (None: it stays ``cv``)."""
    slowdown: float = 0.0
    """How much slower every configuration has become by ``over_s`` (0.1: 10% slower)."""
    over_s: float = 0.0
    """Simulated seconds over which the spread and the slowdown drift."""

    def at(self, t: float) -> tuple[float, float]:
        """(spread, throughput factor) at simulated time ``t``."""
        if self.drift_to is None or self.over_s <= 0:
            return self.cv, 1.0
        f = min(1.0, max(0.0, t / self.over_s))
        return self.cv + (self.drift_to - self.cv) * f, 1.0 - self.slowdown * f

    @property
    def quiet(self) -> bool:
        return self.cv == 0 and not self.drift_to and not self.slowdown

    def describe(self) -> str:
        if self.drift_to is None:
            return f"{self.cv:.0%} CV"
        return (f"CV drifting {self.cv:.0%} -> {self.drift_to:.0%} and throughput -{self.slowdown:.0%} "
                f"over {self.over_s:.0f} s")


def measure(truth: float, noise: Noise, t: float, rng: random.Random) -> dict[str, float]:
    """One replayed measurement of a configuration whose recorded throughput is ``truth``:
    ``samples_per_s`` and, where there is noise, the window's spread figures."""
    if noise.quiet:
        return {M.SAMPLES_PER_S: truth}
    cv, factor = noise.at(t)
    value = truth * factor * math.exp(rng.gauss(0.0, cv))
    dof = SUBWINDOWS - 1
    estimate = cv * math.sqrt(sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(dof)) / dof)
    return {M.SAMPLES_PER_S: value, M.THROUGHPUT_CV: estimate, M.THROUGHPUT_CI95: Z95 * estimate}


def parse(text: str, over_s: float = 0.0) -> Noise:
    """``"0.1"`` (10% CV) or ``"drift:0.02-0.2,slow0.1"`` (2% to 20% over ``over_s``, 10% slower)."""
    if not text.startswith("drift:"):
        return Noise(float(text))
    spec, _, slow = text[len("drift:"):].partition(",slow")
    low, _, high = spec.partition("-")
    return Noise(float(low), float(high), float(slow or 0.0), over_s)
