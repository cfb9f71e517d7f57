"""When a timed window closes (``harness/window.py``): once ``min_measure_s`` has passed, at
``measure_steps`` or sooner once ``precision`` is met; the step times so far read without waiting
on the device. Real trials closing early: ``test_harness``, ``test_script``."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.harness import spread
from orchestrator.harness.window import StepTimes, closes
from orchestrator.protocol import TrialSteps

STEADY = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # perf_counter marks: six steps of 100 ms
UNEVEN = [0.0, 0.1, 0.3, 0.35, 0.6, 0.65, 0.9]


@pytest.mark.parametrize("steps, elapsed, trial, marks, want", [
    (10, 1.0, TrialSteps(3, 10, 1.0), STEADY, True),           # both floors met
    (10, 0.9, TrialSteps(3, 10, 1.0), STEADY, False),          # the seconds' floor holds
    (9, 2.0, TrialSteps(3, 10, 1.0), STEADY, False),           # no precision: the steps' floor holds
    (6, 0.6, TrialSteps(3, 10, 0.5, 0.01), STEADY, True),      # steady steps: known within 1%
    (6, 0.4, TrialSteps(3, 10, 0.5, 0.01), STEADY, False),     # ...but not before min_measure_s
    (4, 0.6, TrialSteps(3, 10, 0.0, 0.5), STEADY, False),      # ...nor before EARLY_STEPS steps ran
    (5, 0.6, TrialSteps(3, 10, 0.0, 0.5), STEADY[:5], False),  # ...nor before EARLY_STEPS are known
    (6, 0.9, TrialSteps(3, 10, 0.0, 0.01), UNEVEN, False),     # uneven steps: not yet known
])
def test_a_window_closes_at_its_floors_or_at_its_precision(steps: int, elapsed: float, trial: TrialSteps,
                                                           marks: list[float], want: bool) -> None:
    assert spread.EARLY_STEPS == 5
    assert closes(steps, elapsed, trial, StepTimes(list(marks))) is want


def test_the_rule_is_asked_again_only_once_each_part_holds_one_more_step() -> None:
    marks = list(UNEVEN)
    times = StepTimes(marks)
    assert not times.within(0.01)  # asked at one step a part: not known
    marks += [1.0, 1.1, 1.2]  # nine steps: still one a part
    assert not times.within(1e9)  # not asked again: its verdict cannot have changed
    marks.append(1.3)  # ten steps: two a part
    assert times.within(1e9)


class Event:
    """Contract test stand-in for ``torch.cuda.Event`` (no CUDA here): reached or not, and its
    time; reading the time of an event not reached is an error, as on the device."""

    def __init__(self, ms: float, reached: bool) -> None:
        self.ms, self.reached = ms, reached

    def query(self) -> bool:
        return self.reached

    def elapsed_time(self, end: "Event") -> float:
        assert self.reached and end.reached, "elapsed_time before both events are reached"
        return end.ms - self.ms


def test_on_cuda_only_the_events_reached_are_read_and_the_rest_later() -> None:
    marks = [Event(0.0, True), Event(10.0, True), Event(21.0, True), Event(30.0, False), Event(40.0, False)]
    times = StepTimes(marks)
    assert times.known() == 2 and times.totals == [0.0, 10.0, 21.0]  # up to the first event not reached
    marks[3].reached = True
    marks.append(Event(52.0, False))  # the window goes on: the list grows
    assert times.known() == 3 and times.totals[-1] == 30.0
    marks[4].reached = marks[5].reached = True
    assert times.known() == 5 and times.totals == [0.0, 10.0, 21.0, 30.0, 40.0, 52.0]


def test_asking_once_a_part_grows_closes_where_asking_at_every_step_would() -> None:
    """The rule (``spread.known_within``: whole parts) asked at every step over every step known,
    against ``StepTimes``'s asking once a part grows: the same closing step on 500 random windows
    (noise, precision, cap, and how many steps the GPU lags behind the host drawn)."""
    import random

    def plain(step_s: list[float], trial: TrialSteps, lag: int) -> int:
        for k in range(1, len(step_s) + 1):
            known = step_s[:max(0, k - lag)]
            if k >= trial.measure_steps or k >= 5 and len(known) >= 5 and \
                    spread.known_within(list(itertools.accumulate(known, initial=0.0)), trial.precision or 0.0):
                return k
        return -1

    for seed in range(500):
        rng = random.Random(seed)
        noise, lag = rng.choice([0.001, 0.003, 0.01, 0.05]), rng.randint(0, 3)
        trial = TrialSteps(1, rng.choice([10, 20, 50]), 0.0, rng.choice([0.005, 0.01, 0.05]))
        step_s = [0.1 * (1 + rng.gauss(0, noise)) for _ in range(60)]
        ends = [0.0]
        for s in step_s:
            ends.append(ends[-1] + s)
        times, closed = StepTimes([]), -1
        for k in range(1, len(step_s) + 1):
            times.marks = ends[:max(0, k - lag) + 1]  # what the device has reached after step k
            if closes(k, 10.0, trial, times):
                closed = k
                break
        assert closed == plain(step_s, trial, lag), seed
