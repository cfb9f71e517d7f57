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
    line = (1.0, 2.0)  # 1 s fixed plus 2 s a unit of work
    work = lambda at: np.array([1.0 for _ in at])  # noqa: E731
    assert cost.extra_s(line, {}, work) == cost.COSTLY_S  # none measured yet: the prior
    assert cost.extra_s(line, {1: 31.0, 2: 29.0, 3: 40.0}, work) == pytest.approx(28.0)  # the median beyond 3 s
    assert cost.extra_s(line, {1: 2.0}, work) == 0.0  # never negative
