"""Trial cost from measured durations, and where a look may go by it (``search/cost.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.search import cost


def test_fit_recovers_the_fixed_part_and_the_seconds_per_unit_of_work() -> None:
    work = np.array([0.1, 0.2, 0.4, 0.8])
    assert cost.fit(work, 0.5 + 7.0 * work) == pytest.approx((0.5, 7.0))


@pytest.mark.parametrize("work, durations", [
    ([0.1], [1.0]),                       # one trial: no line
    ([0.2, 0.2], [1.0, 2.0]),             # the same work: no slope to fit
    ([0.1, 0.4], [2.0, 2.0]),             # more work did not take longer (a GPU's fixed cost)
    ([0.1, 0.4], [3.0, 1.0]),
])
def test_no_cost_where_trials_cannot_be_told_apart(work: list[float], durations: list[float]) -> None:
    assert cost.fit(np.array(work), np.array(durations)) is None


def test_the_slope_is_at_least_the_steps_every_trial_runs() -> None:
    """The 4 x H100 headline (2026-11-26, round 1 of four slots): the eight results known when the
    float32 look was chosen. Their fixed part (3.5-4.6 s, each slot's first trial slower) hid the
    slope (1.1 s per unit of work against the 13 steps each trial ran), and float32 at 4
    micro-batches of 256 (predicted work 2 s a step at its low throughput) passed as affordable
    beside three slots; it took 26.4 s. Held to the steps, it is not; batch 8 of float32 is."""
    work = np.array([0.037, 0.036, 0.032, 0.138, 0.101, 0.054, 0.108, 0.216])
    durations = np.array([4.07, 3.67, 3.85, 4.64, 4.03, 3.53, 3.80, 3.71])
    free = cost.fit(work, durations)
    assert free is not None and free[1] == pytest.approx(1.06, abs=0.01)
    held = cost.fit(work, durations, least=13)
    assert held is not None and held[1] == 13
    assert held[0] + 13 * work.mean() == pytest.approx(durations.mean())  # through the centroid
    look = np.array([0.04, 2.0])  # float32 at batch 8 and at 4 x 256, s a step at the low bound
    for line, affordable in ((free, [0, 1]), (held, [0])):
        predicted = line[0] + line[1] * look
        assert cost.affordable([0, 1], predicted, np.array([True, True]), beside=3) == affordable
    # a line with no slope of its own gets the steps' slope
    assert cost.fit(np.array([0.1, 0.4]), np.array([2.0, 2.0]), least=13) == pytest.approx((0.0, 13.0))


def test_one_trial_gives_the_line_of_the_steps_slope_through_it() -> None:
    """The Llama under a 10% cap (issue #41): one eager trial (1.7 s, 0.05 s of work a step) must
    price the candidates before a second one, or float32's look goes to a compiled 35 s trial."""
    assert cost.fit(np.array([0.05]), np.array([1.7]), least=13) == pytest.approx((1.7 - 13 * 0.05, 13.0))
    assert cost.fit(np.array([0.05, 0.05]), np.array([1.6, 1.8]), least=13) == pytest.approx((1.7 - 13 * 0.05, 13.0))
    assert cost.fit(np.array([]), np.array([]), least=13) is None


def test_a_first_measurement_of_a_value_is_priced_as_a_look_whichever_rule_chose_it() -> None:
    """Choices 0-3: 0 and 1 have only measured values; 2 and 3 have float32, never measured, at
    predicted 3 s and 26 s. Beside three slots (bar 2x the cheapest float32) the 26-s one goes;
    alone (4x) too; a measured value is never priced, and where nothing would be left, all stay."""
    pairs = [[("dtype", "bf16")], [("dtype", "fp16")], [("dtype", "fp32")], [("dtype", "fp32")]]
    seconds = np.array([2.0, 2.0, 3.0, 26.0])
    predict = lambda at: seconds[at]  # noqa: E731
    new = lambda pair: pair == ("dtype", "fp32")  # noqa: E731
    likely = np.array([True] * 4)
    assert cost.first_looks([0, 1, 2, 3], pairs, new, predict, likely, beside=3) == [0, 1, 2]
    assert cost.first_looks([0, 1, 2, 3], pairs, new, predict, likely) == [0, 1, 2]
    assert cost.first_looks([0, 1, 3], pairs, new, predict, likely, beside=3) == [0, 1, 3]  # 3 is the cheapest left
    assert cost.first_looks([0, 1, 2, 3], pairs, lambda pair: False, predict, likely) == [0, 1, 2, 3]


def test_affordable_keeps_what_costs_at_most_look_cost_times_the_cheapest_that_likely_fits() -> None:
    assert cost.LOOK_COST == 4.0
    group = [10, 11, 12, 13]
    predicted = np.array([0.5, 1.8, 2.2, 9.5])
    assert cost.affordable(group, predicted, np.array([True, True, True, True])) == [10, 11]
    # the cheapest likely to fit sets the bar, not one that likely runs out of memory
    assert cost.affordable(group, predicted, np.array([False, False, True, True])) == [10, 11, 12]
    assert cost.affordable(group, predicted, np.array([False] * 4)) == group


def test_with_trials_in_flight_a_look_may_cost_less_over_the_cheapest() -> None:
    """Three trials beside it: the bar is LOOK_COST / 2, as a long look holds the stop while the
    other slots have little left (4 slots replayed: the stop's median 0.43x -> 0.41x of one slot's
    on seeds 7000-7019, the tiny BERT on an AVX2 CPU 0.45x -> 0.28x; one slot unchanged)."""
    group, predicted, likely = [10, 11, 12, 13], np.array([1.0, 1.9, 3.0, 9.0]), np.array([True] * 4)
    assert cost.affordable(group, predicted, likely) == [10, 11, 12]
    assert cost.affordable(group, predicted, likely, beside=3) == [10, 11]
    assert cost.affordable(group, predicted, likely, beside=1) == [10, 11]  # 4 / sqrt(2) = 2.83


def test_a_steps_samples_are_the_effective_batch_where_the_space_sets_it() -> None:
    """Accumulation's micro-batches count in a step's samples, given or derived: a space swept by
    ``effective_batch_size`` at batch 64 takes 8 micro-batches for 512."""
    assert cost.step_samples({"batch_size": 64, "grad_accum_steps": 4}, "batch_size") == 256
    assert cost.step_samples({"batch_size": 64, "effective_batch_size": 512}, "batch_size") == 512
    assert cost.step_samples({"batch_size": 64}, "batch_size") == 64


def test_compile_true_is_the_costly_value_and_what_it_adds_is_measured_once_it_can_be() -> None:
    configs = [{"batch_size": 8, "compile": False}, {"batch_size": 8, "compile": True}]
    keys = [[("batch_size", "8"), ("compile", "False")], [("batch_size", "8"), ("compile", "True")]]
    assert cost.costly_pairs(keys, configs) == {("compile", "True")}
    assert cost.costly_pairs(keys[:1], configs[:1]) == set()
    assert cost.costly_pairs(keys[1:], configs[1:]) == set()  # every configuration has it: no choice to look at
    line = (1.0, 2.0)  # 1 s fixed plus 2 s a unit of work
    work = lambda at: np.array([1.0 for _ in at])  # noqa: E731
    assert cost.extra_s(line, {}, work) == cost.COSTLY_S  # none measured yet: the prior
    assert cost.extra_s(line, {1: 31.0, 2: 29.0, 3: 40.0}, work) == pytest.approx(28.0)  # the median beyond 3 s
    assert cost.extra_s(line, {1: 2.0}, work) == 0.0  # never negative
