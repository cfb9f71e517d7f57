"""Measuring again (``search/remeasure``, issue #38): a measured rival closer to the best than their
spreads counts in the stop's chance; with ``trial.repeats: auto`` the two are measured again,
alternating, within an allowance; else the stop says it is unsure, which rival, and what to do.
The rules are pure (tables); the planner's use of them is checked on a small space, and the sweep's
(the trial recorded with both measurements) by a replayed sweep."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.replay.landscape import load_landscape
from orchestrator.replay.noise import Noise
from orchestrator.replay.strategies import landscape_spec, replay_run
from orchestrator.search import remeasure as R
from orchestrator.search.dominance import DEFAULT_ORDER
from orchestrator.search.planner import Planner
from orchestrator.search.space import config_key


@pytest.mark.parametrize("best, rival, due", [(3, 7, "best"), (9, 4, "rival")])
def test_the_one_measured_less_recently_goes_next(best: int, rival: int, due: str) -> None:
    assert R.next_of_pair(R.Measured(best), R.Measured(rival)) == due


def test_the_allowance_is_a_share_of_the_first_measurements_time() -> None:
    once = [R.Measured(0, 1, 4.0), R.Measured(1, 1, 4.0)]
    assert R.allowance_left(once, 16.0) == pytest.approx(R.ALLOWANCE * 16.0) and R.again_allowed(once, 16.0)
    again = [R.Measured(0, 2, 4.0), R.Measured(1, 1, 4.0)]          # one measurement again: 4 s of it
    assert R.allowance_left(again, 16.0) == pytest.approx(R.ALLOWANCE * 16.0 - 4.0)
    assert not R.again_allowed(again, 4.0 / R.ALLOWANCE)


@pytest.mark.parametrize("gap, noise, want", [(0.0, 0.02, 2 * (0.02 * 1.645 / 0.02) ** 2),
                                              (-0.05, 0.02, 2 * (0.02 * 1.645 / 0.07) ** 2),
                                              (-0.05, 0.10, 2 * (0.10 * 1.645 / 0.07) ** 2)])
def test_the_measurements_needed_grow_with_the_noise_and_shrink_with_the_gap(gap: float, noise: float,
                                                                              want: float) -> None:
    assert R.needed(gap, noise, 0.02) == pytest.approx(want)


def test_one_more_round_always_then_only_where_the_allowance_can_settle_it() -> None:
    a, b = R.Measured(0, 1, 1.0), R.Measured(1, 1, 1.0)
    assert R.worth_it(-0.01, 0.30, 0.02, a, b, left_s=2.0)          # measured once each: one more round
    a2, b2 = R.Measured(0, 2, 1.0), R.Measured(1, 2, 1.0)
    assert R.worth_it(-0.10, 0.02, 0.02, a2, b2, left_s=2.0)        # a clear gap, quiet: settles
    assert not R.worth_it(-0.01, 0.30, 0.02, a2, b2, left_s=2.0)    # 30% noise: would need hundreds


def test_the_unsure_line_names_both_trials_the_gap_the_chance_and_what_to_do() -> None:
    line = R.unsure_reason(("batch_size=64", R.Measured(12, 3), 103.0), ("batch_size=128", R.Measured(15, 2), 100.0),
                           0.31, 0.02, 0.196, allowance_spent=True)
    for part in ("unsure of the answer", "trial 12 (batch_size=64)", "trial 15 (batch_size=128)", "3.0% apart",
                 "measured 3 and 2 times", "+-19.6% at 95%", "more than 2% off is 31%", "allowance",
                 "quieter machine", "trial.min_measure_s", "trial.repeats"):
        assert part in line, (part, line)
    assert "trial.repeats: auto would" in R.unsure_reason(("a", R.Measured(1), 1.0), ("b", R.Measured(2), 1.0),
                                                          0.3, 0.02, None, False, enabled=False)
    repeated = R.unsure_reason(("a", R.Measured(0, processes=3), 62.1), ("b", R.Measured(2, processes=3), 43.9),
                               0.38, 0.02, None, False, enabled=False)
    assert "measured 3 and 3 times" in repeated, repeated  # a busy machine's tour: "measured once each"
    again = R.unsure_reason(("a", R.Measured(5, 2, processes=2), 62.1), ("b", R.Measured(6), 43.9),
                            0.38, 0.02, None, False)
    assert "measured 2 and 1 times" in again, again  # a script tour: "4 and 1" (trials x all their processes)


def test_the_unsure_line_says_how_much_of_the_chance_is_the_rival_and_how_much_the_rest() -> None:
    """Two leaders 0.4% apart, each within +-0.5%, cannot be what makes a 2% answer unsure: where
    the rival's own chance is under half, the line says where the rest comes from (the H100
    headline's stop)."""
    best, rival = ("batch_size=256", R.Measured(10, 2), 2598.6), ("batch_size=128", R.Measured(2, 1), 2588.3)
    line = R.unsure_reason(best, rival, 0.052, 0.02, 0.005, True, parts=R.Parts(0.004, 0.004, 1, 0.048, 40))
    assert ("more than 2% off is 5%: trial 2 alone 0.4%, the 40 configurations not measured 4.8% "
            "(measuring again") in line, line
    line = R.unsure_reason(best, rival, 0.11, 0.02, 0.02, True, parts=R.Parts(0.045, 0.099, 4, 0.008, 1))
    assert "is 11%: trial 2 alone 4.5%, the 4 measured rivals together 9.9%, the 1 configuration not measured 0.8% (" in line
    for parts in (None, R.Parts(0.03, 0.03, 1, 0.03, 40)):  # unknown; the rival's is most of it
        assert "alone" not in R.unsure_reason(best, rival, 0.052, 0.02, 0.005, True, parts=parts)


# -- the planner -----------------------------------------------------------------------------------
SPACE = [{"batch_size": b, "dtype": d} for b in (16, 32, 64) for d in ("float32", "bfloat16")]


def trial(number: int, value: float, ci: float | None, measurements: int = 1, duration: float = 2.0) -> Any:
    metrics = {"samples_per_s": value, "peak_memory_gib": 0.5}
    if ci is not None:
        metrics["throughput_ci95"] = ci
    attrs = {"status": "ok", "metrics": metrics, "duration_s": duration, "measurements": measurements,
             "processes": measurements}
    return SimpleNamespace(number=number, user_attrs=attrs, values=[value])


def every_configuration(values: dict[tuple[int, str], float], ci: float | None) -> dict[str, Any]:
    return {config_key({"batch_size": b, "dtype": d}): trial(i, v, ci)
            for i, ((b, d), v) in enumerate(values.items())}


FLAT = {(16, "float32"): 600.0, (16, "bfloat16"): 610.0, (32, "float32"): 800.0, (32, "bfloat16"): 810.0,
        (64, "float32"): 1000.0, (64, "bfloat16"): 1010.0}
"""Two precisions 1% apart at every batch: the leaders are closer than a 10% spread."""


def planner(again: bool = True) -> Planner:
    return Planner(SPACE, {}, "samples_per_s", "maximize", "cuda", dict(DEFAULT_ORDER), again=again)


def test_leaders_closer_than_their_spread_are_measured_again_the_older_first() -> None:
    d = planner().decide(every_configuration(FLAT, ci=0.196), set())
    assert d.why == "remeasure" and not d.verdict.done
    assert d.config == {"batch_size": 64, "dtype": "float32"}      # trial 4, measured before trial 5


def test_with_a_number_of_repeats_nothing_is_measured_again_and_the_stop_says_it_is_unsure() -> None:
    d = planner(again=False).decide(every_configuration(FLAT, ci=0.196), set())
    assert d.config is None and d.verdict.done and d.verdict.unsure
    assert d.verdict.reason.startswith("unsure of the answer: trial ") and "trial.repeats: auto would" in d.verdict.reason


def test_an_unsure_line_names_the_best_measured_where_the_model_puts_another_first() -> None:
    """Under noise the model's leader (its posterior at the measured points) need not be the best
    measured, which the sweep reports as Best: the newcomer tour's stop named trials 3 and 8, its
    Best line trial 6. The line says both."""
    vals = {**FLAT, (32, "bfloat16"): 1080.0}                       # trial 3, alone above its neighbours
    d = planner(again=False).decide(every_configuration(vals, ci=0.196), set())
    assert d.verdict.unsure and d.verdict.reason.startswith("unsure of the answer: trial 5 ")
    assert ("the best measured, trial 3 (batch_size=32 dtype=bfloat16), is the answer reported, but weighing "
            "each measurement's spread against its neighbours' the model puts trial 5 first") in d.verdict.reason
    d = planner(again=False).decide(every_configuration(FLAT, ci=0.196), set())
    assert d.verdict.unsure and "the best measured" not in d.verdict.reason  # the same one: said once


def test_quiet_measurements_settle_the_same_leaders_without_measuring_again() -> None:
    apart = {**FLAT, (64, "bfloat16"): 1200.0}                     # 20% ahead, each within +-0.4%
    d = planner().decide(every_configuration(apart, ci=0.004), set())
    assert d.config is None and d.verdict.done and not d.verdict.unsure


def test_without_a_reported_spread_measured_configurations_are_not_rivals() -> None:
    """A study from before (or an objective that is not a throughput): as before this issue."""
    d = planner().decide(every_configuration(FLAT, ci=None), set())
    assert d.config is None and not d.verdict.unsure


def test_nothing_is_measured_again_while_one_of_the_two_is_in_flight() -> None:
    results = every_configuration(FLAT, ci=0.196)
    d = planner().decide(results, {config_key({"batch_size": 64, "dtype": "bfloat16"})})
    assert d.why != "remeasure" or d.config != {"batch_size": 64, "dtype": "bfloat16"}


def test_a_slot_that_would_wait_on_a_verdict_measures_the_best_again_once() -> None:
    """Several slots: the verdict is done if the trial in flight comes in as predicted, but it could
    still beat the best; rather than wait, a free slot measures the best again (what a rival that
    result may make would have measured next). Once: not a best measured twice, not with nothing in
    flight (one slot: unchanged)."""
    apart = {**FLAT, (64, "bfloat16"): 1200.0}
    flying = config_key({"batch_size": 64, "dtype": "float32"})
    results = {k: v for k, v in every_configuration(apart, ci=0.004).items() if k != flying}
    d = planner().decide(results, {flying})
    assert d.why == "remeasure" and d.config == {"batch_size": 64, "dtype": "bfloat16"} and not d.verdict.done
    best = config_key({"batch_size": 64, "dtype": "bfloat16"})
    waits = planner().decide(results, {flying, best})                # the best is being measured again
    assert waits.config is None and waits.verdict.done
    twice = {**results, best: trial(5, 1200.0, 0.004, measurements=2)}
    assert planner().decide(twice, {flying}).config is None
    assert planner().decide(results, set()).config == {"batch_size": 64, "dtype": "float32"}  # one slot: as before


# -- the floor: what processes of one configuration measured here --------------------------------
def test_processes_that_agree_lower_the_floor_and_processes_that_disagree_raise_it() -> None:
    assumed = R.Measurements(0.01)
    assert assumed.floor() == pytest.approx(0.01)                 # nothing measured twice: the device's
    quiet = R.Measurements(0.01)
    for pair in ([2593.3, 2595.8], [2591.5, 2596.0], [2596.3, 2595.3]):  # a quiet H100's pairs (n38)
        quiet.add_processes(pair)
    assert 0.004 < quiet.floor() < 0.0065                         # the prior still counts: two pairs' worth
    busy = R.Measurements(0.01)
    busy.add_processes([78.3, 25.7])                              # the newcomer's two runs of one configuration
    assert busy.floor() > 0.3


def test_the_processes_of_a_trial_are_read_for_throughputs_and_step_times_only() -> None:
    runs = [{"samples_per_s": 100.0, "step_time_ms_p50": 5.0}, {"samples_per_s": 104.0, "step_time_ms_p50": 4.8}]
    assert R.process_values(runs, "samples_per_s") == [100.0, 104.0]
    assert R.process_values(runs, "step_time_ms_p50") == [5.0, 4.8]
    assert R.process_values(runs, "loss") == []
    assert R.process_values([runs[0], {}], "samples_per_s") == []  # one process without it: none
    assert R.process_values(None, "samples_per_s") == []


def remeasured_trial(number: int, values: list[float], ci: float) -> Any:
    t = trial(number, sorted(values)[len(values) // 2], ci, measurements=len(values))
    t.user_attrs["repeat_metrics"] = [{"samples_per_s": v, "throughput_ci95": ci} for v in values]
    return t


def test_leaders_whose_processes_agree_on_a_quiet_gpu_end_the_search_sure_of_it() -> None:
    """The headline on a quiet H100 (docs/gpu/noise/): three configurations 0.0-0.5% apart, each
    measured twice within +-0.5%, stopped 'unsure' at a chance of 7-8% while the 1% floor assumed
    for every GPU stood, and up to 2% more beyond each measurement; the pairs say they agree."""
    first = {(16, "float32"): 1200.0, (16, "bfloat16"): 1900.0, (32, "float32"): 1500.0}
    pairs = {(32, "bfloat16"): [2593.3, 2595.8], (64, "float32"): [2591.5, 2596.0], (64, "bfloat16"): [2596.3, 2595.3]}

    def decide(spread: float) -> Any:
        results = every_configuration({**first, **{k: v[0] for k, v in pairs.items()}}, ci=0.004)
        for n, ((b, d), values) in enumerate(pairs.items()):
            apart = [values[0], values[1] * (1 + spread)]
            results[config_key({"batch_size": b, "dtype": d})] = remeasured_trial(10 + n, apart, 0.004)
        return planner().decide(results, set())

    quiet = decide(0.0)
    assert quiet.config is None and quiet.verdict.done and not quiet.verdict.unsure, quiet.verdict.reason
    assert quiet.verdict.chance < 0.02
    busy = decide(0.15)                                            # the same pairs 15% apart: not sure at all
    assert busy.verdict.chance > 5 * quiet.verdict.chance


# -- the sweep: a replayed one, every trial 10% noisy ---------------------------------------------
def test_a_replayed_sweep_records_each_measurement_again_with_the_earlier_ones(tmp_path: Any) -> None:
    rows = ["batch_size,dtype,status,samples_per_s,peak_memory_gib,duration_s"]
    rows += [f"{b},{d},ok,{FLAT[(b, d)]},{0.1 * b},1.0" for b, d in FLAT]
    path = tmp_path / "flat.csv"
    path.write_text("\n".join(rows) + "\n")
    land = load_landscape(path)
    run = replay_run({**landscape_spec(land), "search": {}}, land, seed=3, skip=True, noise=Noise(0.10))
    again = [r for r in run.records if r.measured and r.repeat_of is None and r.status == "ok"]
    keys = [config_key(r.params) for r in again]
    assert len(keys) > len(set(keys)), "no configuration was measured again at 10% noise"
    assert run.unsure or run.stopped_because is None or "likely to beat" in run.stopped_because
    assert run.answer is not None and math.isfinite(land.row(run.answer).samples_per_s)


def test_an_unsure_verdict_ends_what_is_measured_again_in_flight_but_not_a_new_one_that_may_win() -> None:
    """Measuring again could not settle the leaders (here: ``trial.repeats`` a number): a
    configuration measured again in flight cannot settle them either, so the sweep does not wait
    for it (four replayed slots waited up to 5 s of a 21 s headline for such trials). A
    configuration in flight with no result yet, which may still beat the best, is waited for."""
    results = every_configuration(FLAT, ci=0.196)
    again = config_key({"batch_size": 16, "dtype": "float32"})          # measured: in flight again
    d = planner(again=False).decide(results, {again})
    assert d.config is None and d.verdict.done and d.verdict.unsure and d.verdict.ends_running
    close = {**FLAT, (32, "bfloat16"): 995.0}
    del close[(64, "bfloat16")]
    new = config_key({"batch_size": 64, "dtype": "bfloat16"})           # no result: it may win
    d = planner(again=False).decide(every_configuration(close, ci=0.196), {new})
    assert d.config is None and d.verdict.done and d.verdict.unsure and not d.verdict.ends_running


def test_a_measurement_again_that_fails_is_not_asked_for_again_in_that_run(tmp_path: Any) -> None:
    """A review of a change: a configuration whose trial failed in this run was no longer counted
    as in flight, and where that trial was a measurement again of a leader (it has a result), the
    planner asked for the same one again; the sweep answered each ask 'failed earlier in this run'
    (40 deferred trials) and ended with no stop said. A failed measurement again is not repeated:
    the search stops with its reason."""
    import collections

    from orchestrator.launch import Launched
    from orchestrator.outcome import Outcome, Status
    from orchestrator.protocol import TrialResult
    from orchestrator.replay.strategies import ReplayLauncher

    rows = ["batch_size,dtype,status,samples_per_s,peak_memory_gib,duration_s"]
    rows += [f"{b},{d},ok,{FLAT[(b, d)]},{0.1 * b},1.0" for b, d in FLAT]
    (tmp_path / "flat.csv").write_text("\n".join(rows) + "\n")
    land = load_landscape(tmp_path / "flat.csv")

    class FailingAgain(ReplayLauncher):
        seen: collections.Counter[str] = collections.Counter()

        def __call__(self, config: Any, trial_dir: Any, env: Any, timeout_s: Any, stop: Any = None) -> Any:
            key = config_key({c: config.params[c] for c in land.columns})
            self.seen[key] += 1
            if self.seen[key] >= 2:  # every measurement again fails
                return Launched(Outcome(Status.ERROR, "boom", TrialResult("error")), 1, 1.0, None, trial_dir / "log")
            return super().__call__(config, trial_dir, env, timeout_s, stop)

    run = replay_run({**landscape_spec(land), "search": {}}, land, seed=3, skip=True,
                     launcher=FailingAgain(land, Noise(0.10), 3))
    statuses = collections.Counter(str(r.status.value) for r in run.records)
    assert statuses["error"] >= 1 and set(statuses) <= {"ok", "error"}, statuses  # a measurement again ran, and failed
    assert len(run.records) <= len(FLAT) + 2, statuses
    assert run.stopped_because and run.stopped_because.startswith("no configuration left is likely"), run.stopped_because
