"""When a timed window closes: after ``trial.measure_steps`` steps and ``trial.min_measure_s``
seconds, or, with ``trial.precision``, as soon as (after ``spread.EARLY_STEPS`` steps and
``min_measure_s``) the steps so far know the throughput within that precision at 95%.

Reading the steps so far never waits on the device: on CUDA only the step-end events already
completed are read (``Event.query``), so the host keeps queueing work ahead of the GPU as it does
without a precision, and the window holds the steps queued by the time the rule is met. The module
trial (``train.timed_window``) and a script's (``script.Meter``) close by the same rule.
"""

from __future__ import annotations

from typing import Any

from orchestrator.harness import spread
from orchestrator.protocol import TrialSteps


class StepTimes:
    """A window's step times (ms) known so far, from its marks (CUDA events, or ``perf_counter``
    seconds), the window's start first; the list grows as the marks do."""

    def __init__(self, marks: list[Any]) -> None:
        self.marks = marks
        self.ms: list[float] = []

    def known(self) -> list[float]:
        """The step times whose end the device has reached; never waits for it."""
        marks, ms = self.marks, self.ms
        while len(ms) + 1 < len(marks):
            a, b = marks[len(ms)], marks[len(ms) + 1]
            if isinstance(b, float):
                ms.append((b - a) * 1000)
            elif b.query():  # the event is reached: its time can be read without a sync
                ms.append(a.elapsed_time(b))
            else:
                break
        return ms


def closes(steps: int, elapsed: float, trial: TrialSteps, times: StepTimes) -> bool:
    """Whether the window closes after ``steps`` steps and ``elapsed`` seconds."""
    if elapsed < trial.min_measure_s:
        return False
    if steps >= trial.measure_steps:
        return True
    return (trial.precision is not None and steps >= spread.EARLY_STEPS
            and spread.known_within(times.known(), trial.precision))
