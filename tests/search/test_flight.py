"""Trials in flight (several slots): what the auto search proposes beside them, when its verdict
ends them, and the costly values it measures by their look only (``search/flight``, ``search/cost``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from orchestrator.outcome import Status
from orchestrator.replay.landscape import load_landscape
from orchestrator.replay.strategies import landscape_spec, replay_run
from orchestrator.search import flight
from orchestrator.search import remeasure as R
from orchestrator.search.space import config_key
from tests.search.test_planner import BATCHES, configs, planner, result

LANDSCAPES = Path(__file__).resolve().parents[2] / "bench" / "landscapes"


def test_a_value_in_flight_that_nothing_measured_is_being_looked_at() -> None:
    keys = [[("b", "1"), ("d", "f32")], [("b", "2"), ("d", "bf16")], [("b", "2"), ("d", "f32")]]
    looking = flight.pending([0], keys, {("d", "bf16")}, lambda name: name != "b")
    assert looking == {("d", "f32")}  # the batch is the bisection's; bf16 is measured
    assert flight.without([1, 2], keys, looking) == [1]
    assert flight.without([1, 2], keys, set()) == [1, 2]


def test_beside_a_look_go_the_configurations_with_its_value_and_no_costly_value_unlooked() -> None:
    keys = [[("b", "1"), ("c", "on"), ("d", "f32")], [("b", "2"), ("c", "on"), ("d", "bf16")],
            [("b", "2"), ("c", "off"), ("d", "f32")], [("b", "4"), ("c", "on"), ("d", "f16")]]
    looking, unlooked = {("c", "on")}, {("d", "f16")}  # compile's look runs; nothing has looked at f16
    assert flight.beside([0, 1, 2, 3], keys, looking, unlooked) == [0, 1]
    assert flight.beside([0, 1, 2, 3], keys, set(), unlooked) == []


def test_slots_free_while_a_costly_look_runs_measure_its_value_instead_of_waiting() -> None:
    """The small BERT with compile on 4 replayed slots (seed 20000, 2% noise, a compiled trial 19-20
    s against 1-2.5 s eager): the look went to compiled batch 64; the other slots had measured every
    eager configuration after 6.4 s and waited 16 s for it, then ran the compiled trials it called
    for, 20 s more (42.4 s). Now they run those beside the look, and the sweep ends at 26.5 s."""
    land = load_landscape(LANDSCAPES / "bert_mini_compile_h100.csv")
    spec = {**landscape_spec(land), "search": {"band": 0.02}}
    run = replay_run(spec, land, 20000, True, noise=0.02, slots=4)
    compiled = sorted((r for r in run.records if r.params["compile"] and r.status == Status.OK),
                      key=lambda r: r.finished_at - r.cost_s)
    look = compiled[0]
    assert [r for r in compiled[1:] if r.finished_at - r.cost_s < look.finished_at]  # started beside it
    assert run.end_s < 30.0 and run.answer == {"batch_size": 256, "dtype": "bfloat16", "compile": True}


def test_a_configuration_needing_the_memory_of_an_uncertain_one_in_flight_waits_for_it() -> None:
    class Dominance:
        def at_least(self, refs: list[int]) -> np.ndarray:
            return np.array([i >= refs[0] for i in range(4)])  # larger index: more memory

    held = flight.hostage(Dominance(), [1, 2], np.array([1.0, 0.6, 1.0, 0.5]))
    assert held.tolist() == [1.0, 0.6, 0.6, 0.6]  # index 2 surely fits: no factor of its own


def test_the_boundary_goes_on_from_what_the_probe_in_flight_likely_shows() -> None:
    space = configs(batch_size=BATCHES, dtype=("float32",))
    p = planner(space, "cuda")
    first = p.decide({}, set()).config
    assert first == {"batch_size": 64, "dtype": "float32"}
    # nothing known: the middle fits with chance 0.5, so as if it did not (below is likelier to fit
    # and gives the memory line its second point)
    second = p.decide({}, {config_key(first)})
    assert second.why == "boundary" and second.config == {"batch_size": 32, "dtype": "float32"}
    seen = {config_key({"batch_size": 32, "dtype": "float32"}): result("ok", 320.0, 0.4, 1.0)}
    third = p.decide(seen, {config_key(first)})  # 64 is likelier to fit now: the bisection goes on above it
    assert third.why == "boundary" and third.config["batch_size"] > 64


def test_the_one_due_again_in_flight_lets_the_other_be_measured_meanwhile() -> None:
    measured = R.Measurements(0.01, {0: R.Measured(5, 1, 2.0), 1: R.Measured(6, 1, 2.0)}, first_s=100.0)
    measured.own, measured.processes = [0.02, 0.02], [1, 1]
    assert measured.again(0, 1, -0.005, 0.0202, set()) == 0  # measured less recently
    assert measured.again(0, 1, -0.005, 0.0202, {0}) == 1
    assert measured.again(0, 1, -0.005, 0.0202, {0, 1}) is None
    assert measured.rivals(0, {0}) == [1]  # the best in flight: its rival still counts


def test_a_done_verdict_ends_what_runs_only_when_it_cannot_change_it() -> None:
    space = configs(batch_size=BATCHES, dtype=("float32", "bfloat16"))
    seen = {config_key({"batch_size": b, "dtype": d}): result("ok", v * b, 0.1 * b, 1.0)
            for b in BATCHES for d, v in (("float32", 10.0), ("bfloat16", 30.0)) if b != 16}
    slow = {config_key({"batch_size": 16, "dtype": "float32"})}
    done = planner(space, "cuda").decide(seen, slow)
    assert done.config is None and done.verdict.done and done.verdict.ends_running
    looks = {config_key({"batch_size": 64, "dtype": "bfloat16"})}
    float32 = {k: v for k, v in seen.items() if "float32" in k} | {next(iter(slow)): result("ok", 160.0, 1.6, 1.0)}
    close = planner(space, "cuda").decide(float32, looks)
    assert close.config is None  # bfloat16's look is in flight: nothing else with bfloat16 meanwhile
    assert not close.verdict.done and not close.verdict.ends_running
    assert not close.verdict.ends_running  # a look at bfloat16 in flight is never ended


def test_four_slots_end_sooner_with_the_same_answer_and_the_verdict_stops_what_runs() -> None:
    land = load_landscape(LANDSCAPES / "bert_base_seq512_h100_cap025.csv")
    spec = {**landscape_spec(land), "search": {"band": 0.02}}
    one = replay_run(spec, land, 1000, True, noise=0.02, slots=1)
    four = replay_run(spec, land, 1000, True, noise=0.02, slots=4)
    assert four.end_s < 0.6 * one.end_s and four.answer == one.answer
    stopped = [r for r in four.records if r.status == Status.INTERRUPTED]
    assert stopped and all(r.finished_at == four.end_s for r in stopped)  # at the verdict, not at their end
    assert four.stopped_because is not None and "no configuration left" in four.stopped_because

def test_a_costly_value_is_measured_by_its_look_only_and_not_bisected() -> None:
    space = configs(batch_size=BATCHES, dtype=("float32", "bfloat16"), compile=(False, True))
    p = planner(space, "cuda")
    first = p.decide({}, set()).config
    assert first["compile"] is False  # the prior says compile is faster; its cost says look once, later
    seen = {config_key({"batch_size": b, "dtype": "bfloat16", "compile": False}): result("ok", 30.0 * b, 0.1 * b, 2.0)
            for b in BATCHES}
    seen[config_key({"batch_size": 64, "dtype": "float32", "compile": False})] = result("ok", 600.0, 6.4, 2.0)
    d = p.decide(seen, set())
    assert d.config["compile"] is True and d.why == "coverage"  # one look, at the best with compile on
    assert d.config["dtype"] == "bfloat16" and d.config["batch_size"] >= 128  # where it is likeliest to win


def test_an_unsure_verdict_stops_the_leaders_measured_again_and_records_where_they_ran() -> None:
    """The headline's landscape on 4 replayed slots (seed 5000, 2% noise): the leaders, 0.0-0.5%
    apart, cannot be settled within the allowance; the trials measuring them again when the verdict
    comes are stopped by it (not waited for: 5 s of a 21 s sweep before), recorded interrupted with
    the verdict's detail and the slot they ran on, and the sweep ends with their stop."""
    from orchestrator.outcome import VERDICT_DETAIL
    from orchestrator.store.record import TrialRecord

    landscape = load_landscape(LANDSCAPES / "headline_h100.csv")
    spec = landscape_spec(landscape)
    spec["search"] = {"sampler": "auto"}
    run = replay_run(spec, landscape, 5000, True, slots=4, noise=0.02)
    assert run.unsure, run.stopped_because
    stopped = [TrialRecord.of(t) for t in run.study.trials if TrialRecord.of(t).detail == VERDICT_DETAIL]
    assert stopped and all(r.status == Status.INTERRUPTED and r.slot is not None and r.slot.startswith("replay:")
                           and r.remeasure_of is not None for r in stopped)
    assert run.end_s < 18.0  # the last result came at 16.0 s; waiting for the stopped ones took it to 21.1 s


def test_a_look_is_priced_even_when_one_plain_trial_is_all_the_cost_line_has() -> None:
    """The Llama under a 10% cap (a compiled trial 26-46 s, an eager one 0.6-2.6 s): after three
    eager trials, one of them ok, float32's look went to batch 8 compiled (35 s), the cost line
    needing two ok durations to exist; one eager trial prices every eager candidate, and the costly
    value adds what its trials measured. The look goes to batch 4 eager (1.2 s)."""
    landscape = load_landscape(LANDSCAPES / "hf_llama_compile_h100_cap010.csv")
    spec = landscape_spec(landscape)
    spec["search"] = {"sampler": "auto"}
    run = replay_run(spec, landscape, 5000, True, noise=0.02)
    float32 = [r for r in run.records if r.params["dtype"] == "float32" and r.status == Status.OK]
    assert float32 and float32[0].params == {"batch_size": 4, "dtype": "float32", "compile": False}
