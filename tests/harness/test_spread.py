"""The spread of a throughput (``harness/spread``): one window's, from its step times, and several
measurements' together. Pure functions, table-tested; the harness's own trial records them
(``test_harness``)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from orchestrator import metrics as M
from orchestrator.harness import spread


def test_a_steady_window_has_no_spread_and_a_window_of_one_step_none() -> None:
    assert spread.window_spread([10.0] * 20) == (0.0, 0.0)
    assert spread.window_spread([10.0]) == (None, None)
    assert spread.window_figures([]) == {M.THROUGHPUT_CV: None, M.THROUGHPUT_CI95: None}


@pytest.mark.parametrize("steps, parts", [([10.0, 20.0, 10.0, 20.0, 10.0], 5),   # one step a part
                                          ([10.0] * 4 + [20.0] * 4 + [10.0] * 2, 5),  # two steps a part
                                          ([5.0, 7.0, 9.0], 5)])                       # fewer steps than parts
def test_the_window_is_cut_into_equal_parts_whose_rates_spread(steps: list[float], parts: int) -> None:
    n = min(parts, len(steps))
    size = len(steps) // n
    rates = [size / sum(steps[i * size:(i + 1) * size]) for i in range(n)]
    cv, s = spread.window_spread(steps, parts)
    assert cv == pytest.approx(statistics.pstdev(rates) / statistics.fmean(rates))
    assert s == pytest.approx(statistics.stdev(math.log(r) for r in rates))
    assert spread.window_figures(steps, parts)[M.THROUGHPUT_CI95] == pytest.approx(1.96 * s)


def test_the_unit_of_the_step_times_does_not_matter() -> None:
    steps = [0.011, 0.013, 0.010, 0.019, 0.012, 0.011, 0.014, 0.010, 0.012, 0.016]
    assert spread.window_figures(steps) == pytest.approx(spread.window_figures([s * 1000 for s in steps]))


@pytest.mark.parametrize("values, windows, want", [
    ([100.0], [0.10], 0.10),                                              # one measurement: its own
    ([100.0, 100.0], [0.10, 0.10], 0.10 / math.sqrt(2)),                  # agreeing: the windows' over sqrt(2)
    ([100.0, 150.0], [0.02, 0.02],                                         # disagreeing: their own spread
     1.96 * statistics.stdev([math.log(100), math.log(150)]) / math.sqrt(2)),
    ([100.0, 101.0, 99.0], [None, None, None],                             # no window spread: theirs alone
     1.96 * statistics.stdev([math.log(100), math.log(101), math.log(99)]) / math.sqrt(3)),
    ([100.0], [None], None),                                               # nothing to tell
])
def test_several_measurements_take_the_larger_of_their_own_and_their_windows_spread(
        values: list[float], windows: list[float | None], want: float | None) -> None:
    got = spread.combined_ci95(values, windows)
    assert got == (None if want is None else pytest.approx(want))


def test_a_zero_or_negative_throughput_has_no_interval() -> None:
    assert spread.combined_ci95([100.0, 0.0], [0.1, 0.1]) is None


@pytest.mark.parametrize("ci, text, table", [(0.04, "+-4.0%", "4.0%"), (0.25, "+-25.0%", "25.0%"),
                                             (math.log(6.8), "a factor of 6.8 either way", "x/6.8")])
def test_a_spread_reads_as_percent_when_small_and_as_a_factor_when_large(ci: float, text: str, table: str) -> None:
    assert spread.shown(ci) == text and spread.shown(ci, table=True) == table


def totals(steps: list[float]) -> list[float]:
    return list(itertools.accumulate(steps, initial=0.0))


@pytest.mark.parametrize("steps", [[10.0, 12.0, 9.0, 13.0, 10.0, 11.0], [10.0, 12.0, 9.0, 13.0, 10.0] * 3 + [50.0]])
def test_a_window_knows_its_throughput_within_a_precision_as_its_recorded_interval_says(steps: list[float]) -> None:
    """Where the precision rule closes a window, each part holds the same steps and the rule's
    interval is the one recorded; steps after the last whole part (a window closed by its
    ``min_measure_s`` or ``measure_steps``) the rule leaves to the next part, and the recorded
    interval counts them."""
    whole = steps[:len(steps) // spread.SUBWINDOWS * spread.SUBWINDOWS]
    recorded = spread.window_figures(whole)[M.THROUGHPUT_CI95]
    assert recorded is not None
    assert spread.known_within(totals(whole), recorded * 1.01) and not spread.known_within(totals(whole), recorded * 0.99)
    assert spread.known_within(totals(steps), recorded * 1.01)  # the step over is not asked about yet
    with_it = spread.window_figures(steps)[M.THROUGHPUT_CI95]
    assert with_it is not None and with_it != pytest.approx(recorded)


def test_steady_steps_are_known_at_five_but_never_sooner() -> None:
    assert spread.known_within(totals([10.0] * spread.EARLY_STEPS), 1e-9)
    assert not spread.known_within(totals([10.0] * (spread.EARLY_STEPS - 1)), 0.5)


def test_parts_from_running_totals_are_the_parts_of_the_steps() -> None:
    steps = [0.011, 0.013, 0.010, 0.019, 0.012, 0.011, 0.014, 0.010, 0.012, 0.016, 0.02, 0.03]
    whole = [2 / (a + b) for a, b in zip(steps[0:10:2], steps[1:10:2])]
    assert spread.rates_from_totals(totals(steps[:10])) == pytest.approx(spread.subwindow_rates(steps[:10]))
    assert spread.rates_from_totals(totals(steps)) == pytest.approx(whole)  # the precision rule's groups
    assert spread.subwindow_rates(steps) == pytest.approx(whole[:4] + [4 / sum(steps[8:])])  # the last takes the rest


def test_a_stall_in_the_window_s_last_step_is_in_its_spread() -> None:
    """A script tour: ``torch.compile`` recompiled for the epoch's short last batch, 2.5 s in the
    step that closed a window of 76 steps of 2.9 ms. The throughput counted it (1,725 samples/s
    against about 20,000); the spread left it out with the 1 step over five groups of 15, and said
    +-17.6%. It is in the last group now, and the interval says how little the figure is worth."""
    steps = [0.0029] * 75 + [2.5]
    cv, s = spread.window_spread(steps)
    assert s is not None and spread.ci95(s) > math.log(10)  # wider than a factor of 10 either way
    assert spread.window_spread(steps[:75])[1] == pytest.approx(0.0, abs=1e-9)
