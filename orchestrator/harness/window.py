"""When a timed window closes: once it has lasted ``trial.min_measure_s`` seconds, at the first
step where it holds ``trial.measure_steps`` steps or, with ``trial.precision``, where at least
``spread.EARLY_STEPS`` steps already know the throughput within that precision at 95%.

Reading the steps so far never waits on the device: on CUDA only the step-end events already
reached are read (``Event.query``), so the host keeps queueing work ahead of the GPU as it does
without a precision, and the window holds the steps queued by the time the rule is met. The rule
is asked once each time the window's five parts grow by a step each (the verdict cannot change in
between), in a few subtractions: it costs the steps it times next to nothing. The module trial
(``train.timed_window``) and a script's (``script.Meter``) close by the same rule.
"""

from __future__ import annotations

from typing import Any

from orchestrator.harness import spread
from orchestrator.protocol import TrialSteps


class StepTimes:
    """A window's step times known so far, as running totals (ms), from its marks (CUDA events,
    or ``perf_counter`` seconds), the window's start first; the marks' list grows as it runs."""

    def __init__(self, marks: list[Any]) -> None:
        self.marks = marks
        self.totals: list[float] = [0.0]
        self._asked = 0
        """Steps a part held when the rule was last asked."""

    def known(self) -> int:
        """Reads the steps whose end the device has reached (never waits for it); how many."""
        marks, totals = self.marks, self.totals
        while len(totals) < len(marks):
            a, b = marks[len(totals) - 1], marks[len(totals)]
            if isinstance(b, float):
                totals.append(totals[-1] + (b - a) * 1000)
            elif a.query() and b.query():  # both reached (one stream: b's implies a's): readable, no sync
                totals.append(totals[-1] + a.elapsed_time(b))
            else:
                break
        return len(totals) - 1

    def within(self, precision: float) -> bool:
        """Whether the steps known so far know the throughput within ``precision``
        (``spread.known_within``); asked anew only once each part holds one more step."""
        per_part = self.known() // spread.SUBWINDOWS
        if per_part == self._asked:
            return False
        self._asked = per_part
        return spread.known_within(self.totals, precision)


def closes(steps: int, elapsed: float, trial: TrialSteps, times: StepTimes) -> bool:
    """Whether the window closes after ``steps`` steps and ``elapsed`` seconds."""
    if elapsed < trial.min_measure_s:
        return False
    if steps >= trial.measure_steps:
        return True
    return trial.precision is not None and steps >= spread.EARLY_STEPS and times.within(trial.precision)
