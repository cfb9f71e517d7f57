"""The auto search: where it starts, what it never proposes, and when it stops (on two synthetic
landscapes, one whose best comes early and one whose best comes late, replayed through the
real sweep loop)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.search.dominance import DEFAULT_ORDER
from orchestrator.replay.landscape import load_landscape
from orchestrator.search.planner import Planner
from orchestrator.replay.strategies import landscape_spec, replay_run
from orchestrator.search.space import config_key

BATCHES = (16, 32, 64, 128, 256)


def configs(**dims: tuple) -> list[dict[str, Any]]:
    return [dict(zip(dims, combo)) for combo in itertools.product(*dims.values())]


def planner(space: list[dict[str, Any]], device: str) -> Planner:
    return Planner(space, {}, "samples_per_s", "maximize", device, dict(DEFAULT_ORDER))


def result(status: str, value: float | None = None, peak: float | None = None, duration: float | None = None) -> Any:
    attrs = {"status": status, "metrics": {"samples_per_s": value, "peak_memory_gib": peak}}
    if duration is not None:
        attrs["duration_s"] = duration
    return SimpleNamespace(user_attrs=attrs, values=[value] if status == "ok" else None)


@pytest.mark.parametrize("device, dtypes, dtype", [("cuda", ("float32", "bfloat16"), "bfloat16"),
                                                   ("cpu", ("float32", "bfloat16"), "bfloat16"),
                                                   ("cpu", ("float32", "float16"), "float32")])
def test_the_first_trial_is_the_middle_of_the_column_the_priors_rank_first(device: str, dtypes: tuple,
                                                                          dtype: str) -> None:
    """Half precision on a GPU. On a CPU, where it may not pay, bfloat16 and float32 tie on the
    priors and the one that needs less memory leads; float16, slow on CPUs, does not."""
    space = configs(batch_size=BATCHES, dtype=dtypes, activation_checkpointing=(False, True))
    decision = planner(space, device).decide({}, set())
    assert decision.config == {"batch_size": 64, "dtype": dtype, "activation_checkpointing": False}
    assert decision.why == "boundary" and not decision.verdict.done


@pytest.mark.parametrize("device, second", [("cuda", 256), ("cpu", 32)])
def test_after_the_first_trial_a_gpu_bisects_up_and_a_cpu_steps_down_first(device: str, second: int) -> None:
    """The first trial fits: on a GPU, where a larger batch is usually faster, the bisection goes
    up (the middle of what is left above); on a CPU, where the batch barely matters and a trial
    costs about its batch, the batch below comes first, then the bisection up."""
    space = configs(batch_size=BATCHES, dtype=("float32",))
    seen = {config_key({"batch_size": 64, "dtype": "float32"}): result("ok", 700.0, 0.4, 1.0)}
    first = planner(space, device).decide(seen, set())
    assert first.why == "boundary" and first.config["batch_size"] == second
    if device == "cpu":
        seen[config_key({"batch_size": 32, "dtype": "float32"})] = result("ok", 690.0, 0.35, 0.6)
        assert planner(space, device).decide(seen, set()).config["batch_size"] == 256


def test_a_paired_look_unlikely_to_fit_goes_to_the_largest_batch_that_likely_does() -> None:
    """bfloat16's line (two peaks) puts float32 at the best batch between 1.24 and 2.48 GiB against
    a 1.35 GiB limit: its look goes to batch 1024 instead (0.99 to 1.98 GiB), only the batch
    differing; with room (3 GiB) the best batch itself."""
    space = configs(batch_size=(256, 512, 1024, 2048, 4096), dtype=("float32", "bfloat16"))
    seen = {config_key({"batch_size": 2048, "dtype": "bfloat16"}): result("ok", 145000.0, 1.24, 1.3),
            config_key({"batch_size": 4096, "dtype": "bfloat16"}): result("oom"),
            config_key({"batch_size": 1024, "dtype": "bfloat16"}): result("ok", 69000.0, 0.99, 1.2)}
    tight = Planner(space, {}, "samples_per_s", "maximize", "cuda", dict(DEFAULT_ORDER), cap_gib=1.35).decide(seen, set())
    assert tight.why == "coverage" and tight.config == {"batch_size": 1024, "dtype": "float32"}
    roomy = Planner(space, {}, "samples_per_s", "maximize", "cuda", dict(DEFAULT_ORDER), cap_gib=3.0).decide(seen, set())
    assert roomy.config == {"batch_size": 2048, "dtype": "float32"}


def test_a_small_prior_gain_does_not_lead_into_more_memory() -> None:
    """Accumulation's prior gain (2% a doubling) is within the tie: the first column has one
    micro-batch a step, which needs less memory (``dominance``: accumulation adds a buffer)."""
    space = configs(batch_size=BATCHES, dtype=("float32", "bfloat16"), grad_accum_steps=(1, 2, 4))
    decision = planner(space, "cuda").decide({}, set())
    assert decision.config == {"batch_size": 64, "dtype": "bfloat16", "grad_accum_steps": 1}


def test_a_costly_value_every_configuration_holds_is_measured_as_any_other() -> None:
    """An experiment tour: ``compile: [true]`` swept beside two precisions left no configuration
    without the costly value to pair its look with; the auto search proposed nothing, and the sweep
    ended with 0 of 2 results, exit 0. Every configuration has it: no look to save it for."""
    space = configs(batch_size=(8,), compile=(True,), dtype=("float32", "bfloat16"))
    first = planner(space, "cpu").decide({}, set())
    assert first.config is not None and first.config["compile"] is True, first
    seen = {config_key(first.config): result("ok", 700.0, 0.4, 30.0)}
    second = planner(space, "cpu").decide(seen, set())
    assert second.config is not None and second.config != first.config, second


def test_the_column_is_bisected_up_to_its_memory_boundary() -> None:
    space = configs(batch_size=BATCHES, dtype=("float32", "bfloat16"))
    p = planner(space, "cuda")
    seen = {config_key({"batch_size": 64, "dtype": "bfloat16"}): result("ok", 100.0, 6.0)}
    assert p.decide(seen, set()).config == {"batch_size": 256, "dtype": "bfloat16"}
    seen[config_key({"batch_size": 256, "dtype": "bfloat16"})] = result("oom")
    assert p.decide(seen, set()).config == {"batch_size": 128, "dtype": "bfloat16"}


def test_nothing_measured_running_or_proven_too_large_is_proposed() -> None:
    space = configs(batch_size=BATCHES, dtype=("float32", "bfloat16"))
    p = planner(space, "cuda")
    seen = {config_key({"batch_size": b, "dtype": "bfloat16"}): result("ok", 50.0 * b, b / 10) for b in (16, 32, 64)}
    seen[config_key({"batch_size": 128, "dtype": "bfloat16"})] = result("oom")
    running = {config_key({"batch_size": 64, "dtype": "float32"})}
    # float32 is being looked at (in flight): nothing else with it until that result is in
    wait = p.decide(seen, running, stop=False)
    assert wait.config is None and not wait.verdict.done
    seen[config_key({"batch_size": 16, "dtype": "float32"})] = result("ok", 10.0, 1.0)
    proposed = []
    for _ in range(4):
        d = p.decide(seen, running, stop=False)
        if d.config is None:
            break
        key = config_key(d.config)
        assert key not in seen and key not in running
        assert not (d.config["batch_size"] >= 128)  # 128 ran out in bfloat16: float32 needs more
        proposed.append(d.config)
        seen[key] = result("ok", 10.0, 1.0)
    assert proposed and all(c["dtype"] == "float32" for c in proposed)


def test_a_fully_measured_space_ends_as_before() -> None:
    space = configs(batch_size=(16, 32), dtype=("float32",))
    seen = {config_key(c): result("ok", 10.0, 1.0) for c in space}
    d = planner(space, "cpu").decide(seen, set())
    assert d.config is None and d.verdict.done and d.verdict.reason == "every configuration has a result"
    seen[config_key(space[1])] = result("error")  # a script tour: every trial failed, the stop said "has a result"
    d = planner(space, "cpu").decide(seen, set())
    assert d.verdict.done and d.verdict.reason == "every configuration has a result or failed (1 failed)"


def landscape(tmp_path: Path, name: str, device: str, rows: list[dict[str, Any]]) -> Any:
    columns = [k for k in rows[0] if k != "value"]
    lines = [",".join(columns + ["status", "samples_per_s", "peak_memory_gib", "duration_s"])]
    for r in rows:
        ok = r["value"] is not None
        lines.append(",".join([str(r[c]).lower() if isinstance(r[c], bool) else str(r[c]) for c in columns]
                              + ["ok" if ok else "oom", f"{r['value']:.3f}" if ok else "",
                                 f"{0.5 + 0.1 * r['batch_size']:.3f}" if ok else "", "5.0"]))
    path = tmp_path / f"{name}.csv"
    path.write_text("\n".join(lines) + "\n")
    index = tmp_path / "landscapes.json"
    known = json.loads(index.read_text()) if index.exists() else {}
    index.write_text(json.dumps({**known, path.name: {"device": device}}))
    return load_landscape(path)


def throughput(batch: int, dtype: str, ckpt: bool) -> float | None:
    """A GPU that saturates with batch size: half precision 3x float32, checkpointing 0.8x; batch
    256 runs out of memory without checkpointing."""
    if batch == 256 and not ckpt:
        return None
    base = 1000.0 * batch / (batch + 24)
    return base * (3.0 if dtype == "bfloat16" else 1.0) * (0.8 if ckpt else 1.0)


def stopped(land: Any) -> tuple[list[Any], Any]:
    run = replay_run({**landscape_spec(land), "search": {}}, land, seed=0, skip=True)  # the defaults
    measured = [r for r in run.records if r.measured]
    return measured, run


def test_the_search_stops_early_when_the_best_comes_early(tmp_path: Path) -> None:
    rows = [{"batch_size": b, "dtype": d, "activation_checkpointing": c, "value": throughput(b, d, c)}
            for b in BATCHES for d in ("float32", "bfloat16") for c in (False, True)]
    land = landscape(tmp_path, "early", "cuda", rows)
    measured, run = stopped(land)
    best = max(r.samples_per_s for r in measured if r.samples_per_s)
    assert best == pytest.approx(land.best_feasible())           # it found the best ...
    assert run.stopped_because and "likely to beat the best" in run.stopped_because
    assert len(measured) <= len(rows) // 2                        # ... and stopped with half unmeasured
    first_best = next(i for i, r in enumerate(measured) if r.samples_per_s == best)
    assert first_best <= 3                                        # the best came early


def test_the_search_does_not_stop_before_a_best_that_comes_late(tmp_path: Path) -> None:
    """A parameter the priors know nothing about, whose last listed value is 25% faster: the
    search starts on the first value and must not stop before it has tried the last."""
    rows = [{"batch_size": b, "dtype": d, "kernel": k,
             "value": None if throughput(b, d, False) is None else throughput(b, d, False) * (1.25 if k == "c" else 1.0)}
            for b in BATCHES for d in ("float32", "bfloat16") for k in ("a", "b", "c")]
    land = landscape(tmp_path, "late", "cuda", rows)
    measured, run = stopped(land)
    best = max(r.samples_per_s for r in measured if r.samples_per_s)
    assert best == pytest.approx(land.best_feasible())            # the late best was measured
    first_best = next(i for i, r in enumerate(measured) if r.samples_per_s == best)
    assert first_best >= 3                                        # ... and it did come late
    assert measured[first_best].params["kernel"] == "c"
    assert len(measured) < len(rows)                              # still not the whole grid


def test_stop_budget_measures_everything_that_could_fit(tmp_path: Path) -> None:
    rows = [{"batch_size": b, "dtype": d, "activation_checkpointing": c, "value": throughput(b, d, c)}
            for b in BATCHES for d in ("float32", "bfloat16") for c in (False, True)]
    land = landscape(tmp_path, "budget", "cuda", rows)
    run = replay_run({**landscape_spec(land), "search": {"stop": "budget"}}, land, seed=0, skip=True)
    measured = {config_key(r.params) for r in run.records if r.measured}
    fits = {config_key({k: v for k, v in r.items() if k != "value"}) for r in rows if r["value"] is not None}
    assert fits <= measured                                       # every configuration that fits
    assert len(measured) < len(rows)                              # but no OOM it could prove
    assert run.stopped_because.startswith("every configuration that could fit has a result")


def test_a_fresh_planner_reaches_the_verdict_the_sweep_stopped_on(tmp_path: Path) -> None:
    """A resumed study (``resume``) asks a new planner: the verdict must depend on the results
    alone, not on the planner that made them."""
    from orchestrator.replay.strategies import REPLAY_PATH  # noqa: F401 - the replay's own spec path

    rows = [{"batch_size": b, "dtype": d, "activation_checkpointing": c, "value": throughput(b, d, c)}
            for b in BATCHES for d in ("float32", "bfloat16") for c in (False, True)]
    land = landscape(tmp_path, "again", "cuda", rows)
    measured, run = stopped(land)
    assert run.stopped_because and "likely to beat the best" in run.stopped_because
    results = {config_key(r.params): result(r.status, r.samples_per_s, 0.5 + 0.1 * r.params["batch_size"])
               for r in measured}
    space = [dict(r.params) for r in land.rows.values()]
    decision = planner(space, "cuda").decide(results, set())
    assert decision.config is None and decision.verdict.reason == run.stopped_because


def test_a_prior_that_is_wrong_is_measured_not_believed() -> None:
    """Issue #27, on a landscape recorded on an H100 (a narrow MLP, where float32 is the fastest
    precision against the CUDA prior): the sweep measures float32 before it may stop and ends with
    the true best. Before the rule it stopped in every seed without measuring float32, on
    bfloat16 at 0.83x of the best."""
    from orchestrator.replay.strategies import landscape_spec, replay_run

    land = load_landscape(Path(__file__).resolve().parents[2] / "bench" / "landscapes" / "mlp_narrow_h100.csv")
    run = replay_run({**landscape_spec(land), "search": {}}, land, seed=0, skip=True)
    measured = [r for r in run.records if r.measured and r.status == "ok"]
    assert any(r.params["dtype"] == "float32" for r in measured)
    assert max(r.samples_per_s for r in measured) == pytest.approx(land.best_feasible())
    assert run.stopped_because and "likely to beat the best" in run.stopped_because


def test_no_stop_while_a_value_is_unmeasured_unless_it_cannot_fit() -> None:
    """The verdict may say done on the priors alone; the planner still looks at the value it never
    measured (the incumbent's configuration with only that value changed), and lets a value that
    cannot fit go."""
    space = configs(batch_size=(16, 32, 64), dtype=("float32", "bfloat16"))
    seen = {config_key({"batch_size": b, "dtype": "bfloat16"}): result("ok", 3000.0 * b / (b + 24), 0.5 + b / 10)
            for b in (16, 32, 64)}
    d = planner(space, "cuda").decide(seen, set())
    assert d.config == {"batch_size": 64, "dtype": "float32"} and d.why == "coverage" and not d.verdict.done
    for b in (16, 32, 64):  # float32 proven not to fit at every batch: nothing to look at
        seen[config_key({"batch_size": b, "dtype": "float32"})] = result("oom")
    d = planner(space, "cuda").decide(seen, set())
    assert d.config is None and d.verdict.done


def test_the_stop_line_names_what_was_never_measured(tmp_path: Path) -> None:
    rows = [{"batch_size": b, "dtype": d, "activation_checkpointing": c, "value": throughput(b, d, c)}
            for b in BATCHES for d in ("float32", "bfloat16") for c in (False, True)]
    measured, run = stopped(landscape(tmp_path, "line", "cuda", rows))
    unmeasured = sorted({r["batch_size"] for r in rows} - {r.params["batch_size"] for r in measured if r.status == "ok"})
    assert unmeasured, "the sweep measured every batch size: nothing to name"
    for b in unmeasured:
        assert f"batch_size={b} (" in run.stopped_because
    assert "not measured: " in run.stopped_because and "of the best at 95%" in run.stopped_because


def test_a_numeric_value_between_two_measured_ones_needs_no_look_of_its_own() -> None:
    """Only the ends of a numeric parameter's measured range need a look: the values between two
    measured ones are interpolated from both sides. A categorical value still needs its own."""
    space = configs(batch_size=(16, 32, 64), width=tuple(range(1, 13)))
    seen = {config_key({"batch_size": b, "width": 1}): result("ok", 1000.0 * b / (b + 24), 0.5 + b / 10)
            for b in (16, 32, 64)}
    d = planner(space, "cuda").decide(seen, set())
    assert d.why == "coverage" and d.config["width"] == 12          # the other end, not the next value
    seen[config_key({"batch_size": 64, "width": 12})] = result("ok", 1000.0 * 64 / 88, 6.9)
    d = planner(space, "cuda").decide(seen, set())
    assert d.why != "coverage"                                     # widths 2-11 lie between 1 and 12


def test_a_parameter_with_many_numeric_values_is_not_swept_value_by_value(tmp_path: Path) -> None:
    """40 hidden sizes (what ``bench/cluster.py`` searches): the sweep stops long before the grid,
    with both ends of the range measured and the best found."""
    rows = [{"batch_size": b, "hidden_size": h, "value": 1000.0 * b / (b + 24) * (1.0 + 0.2 * math.sin(h / 60.0))}
            for b in (16, 32, 64) for h in range(8, 328, 8)]
    land = landscape(tmp_path, "wide", "cpu", rows)
    measured, run = stopped(land)
    widths = {r.params["hidden_size"] for r in measured if r.status == "ok"}
    assert run.stopped_because and "likely to beat the best" in run.stopped_because
    assert {8, 320} <= widths and len(measured) <= len(rows) // 3, (len(measured), sorted(widths))
    best = max(r.samples_per_s for r in measured if r.samples_per_s)
    assert best >= 0.98 * land.best_feasible()


@pytest.mark.parametrize("native, dtype", [(frozenset(), "float32"), (frozenset({"bfloat16"}), "bfloat16"),
                                           (None, "bfloat16")])
def test_on_a_cpu_without_bfloat16_instructions_float32_leads(native: frozenset | None, dtype: str) -> None:
    """The CPU's flags (``machine.native_half``) set bfloat16's prior: emulated (no avx512_bf16,
    amx_bf16 or Arm bf16, or capped below them with ``cpu_isa``), it is expected slower and
    float32 leads; with the instructions, or where the flags are unknown, they tie and bfloat16
    leads on memory."""
    space = configs(batch_size=BATCHES, dtype=("float32", "bfloat16"))
    p = Planner(space, {}, "samples_per_s", "maximize", "cpu", dict(DEFAULT_ORDER), native_half=native)
    assert p.decide({}, set()).config == {"batch_size": 64, "dtype": dtype}


def test_a_slow_values_look_goes_to_a_small_batch() -> None:
    """The one look at an unmeasured value goes where it costs least when the paired configuration
    (the best batch) is predicted to cost more than ``LOOK_COST`` times that: trial time grows with
    the samples of a step over the throughput, fitted on the measured trials' durations."""
    space = configs(batch_size=(8, 16, 32, 64, 128, 256), dtype=("float32", "bfloat16"))
    seen = {config_key({"batch_size": b, "dtype": "float32"}): result("ok", 700.0 + b / 8, 0.3 + b / 400, 0.5 + 7 * b / 700)
            for b in (8, 16, 32, 64, 128, 256)}
    p = Planner(space, {}, "samples_per_s", "maximize", "cpu", dict(DEFAULT_ORDER), native_half=frozenset())
    d = p.decide(seen, set())
    assert d.why == "coverage" and d.config["dtype"] == "bfloat16" and d.config["batch_size"] <= 64
    for r in seen.values():  # the same trials, each taking as long: no cost to tell them apart
        r.user_attrs["duration_s"] = 2.0
    d = Planner(space, {}, "samples_per_s", "maximize", "cpu", dict(DEFAULT_ORDER), native_half=frozenset()).decide(seen, set())
    assert d.why == "coverage" and d.config["dtype"] == "bfloat16" and d.config["batch_size"] == 256  # paired with the best


def test_on_the_cpu_capped_at_avx2_the_sweep_finds_float32_and_looks_at_bfloat16_cheaply() -> None:
    """The landscape recorded here with ``cpu_isa: avx2`` (bfloat16 7.3x slower): the sweep reaches
    the best (float32) and its one bfloat16 trial is at a batch of at most 64, not the 256 that
    cost 18 s a trial before the look was placed by cost."""
    land = load_landscape(Path(__file__).resolve().parents[2] / "bench" / "landscapes" / "bert_tiny_cpu_avx2_r3.csv")
    assert land.native_half == frozenset()
    for seed in range(3):
        run = replay_run({**landscape_spec(land), "search": {}}, land, seed=seed, skip=True, noise=0.02)
        measured = [r for r in run.records if r.measured and r.status == "ok"]
        assert max(r.samples_per_s for r in measured) >= 0.98 * land.best_feasible() * 0.95
        bf16 = [r.params["batch_size"] for r in measured if r.params["dtype"] == "bfloat16"]
        assert bf16 and bf16[0] <= 64, bf16


def test_a_looks_cost_is_predicted_at_the_low_end_of_an_unmeasured_values_throughput() -> None:
    """The H100 headline's first six trials (docs/gpu/search_cost/headline_sibling.log): its look
    at float32 was paired with the best then, 4 micro-batches at batch 256, and took 26.6 s
    (float32 ran at 0.2x; its prior says 0.55x). Predicted at the low end of float32's throughput,
    4 micro-batches cost more than 4x the cheapest (2.8 s predicted at batch 8): the look goes to
    fewer (2, predicted 11.2 s, at the edge; the H100 run after the batch prior's change looked
    at one micro-batch, 7.1 s, docs/gpu/batch_prior/headline.log)."""
    space = configs(batch_size=(8, 16, 32, 64, 128, 256), dtype=("float32", "float16", "bfloat16"),
                    grad_accum_steps=(1, 2, 4))
    logged = [((64, "float16", 1), 1849.3, 7.54, 3.4), ((256, "float16", 1), 2548.0, 27.95, 2.6),
              ((256, "bfloat16", 1), 2585.9, 27.95, 3.7), ((256, "float16", 4), 2555.8, 27.95, 6.3),
              ((256, "bfloat16", 4), 2592.3, 27.95, 6.2), ((256, "bfloat16", 2), 2594.3, 27.95, 3.4)]
    seen = {config_key({"batch_size": b, "dtype": d, "grad_accum_steps": a}): result("ok", v, peak, s)
            for (b, d, a), v, peak, s in logged}
    d = Planner(space, {}, "samples_per_s", "maximize", "cuda", dict(DEFAULT_ORDER), cap_gib=79.18).decide(seen, set())
    assert d.why == "coverage" and d.config["dtype"] == "float32" and d.config["grad_accum_steps"] < 4


def test_a_value_whose_only_look_failed_in_this_run_is_looked_at_elsewhere() -> None:
    """A script tour: the only trial of ``float32`` ended 'error' (the script stopped before its
    window closed) and the rest of the run was errors but one. The failed trial was counted as a
    look in flight, so ``float32``'s other batches waited for a result that never came, and the
    sweep ended with nothing said and ``float32`` never measured. A failure in this run is not run
    again in it, but it is no look at its values."""
    space = configs(batch_size=(64, 256, 1024), dtype=("float32", "bfloat16"))
    p = planner(space, "cpu")
    results = {config_key({"batch_size": 64, "dtype": "bfloat16"}): result("ok", 1000.0, 0.2, 0.3)}
    failed = {config_key({"batch_size": 64, "dtype": "float32"}), config_key({"batch_size": 256, "dtype": "bfloat16"})}
    proposed = []
    while (decision := p.decide(results, set(), failed=failed)).config is not None and len(proposed) < 6:
        proposed.append(decision.config)
        if decision.config["dtype"] == "float32":
            break
        results[config_key(decision.config)] = result("ok", 1100.0, 0.3, 0.4)  # bfloat16 at another batch
    assert proposed and proposed[-1]["dtype"] == "float32", (proposed, decision)
    assert not {config_key(c) for c in proposed} & failed  # not run again in this run
    one = {k: t for k, t in results.items() if t.user_attrs["metrics"]["samples_per_s"] == 1000.0}
    everything_else = {config_key(c) for c in space} - one.keys()
    ended = p.decide(one, set(), failed=everything_else)  # nothing left to run: said, with the failures counted
    assert ended.config is None and ended.verdict.done
    assert ended.verdict.reason == "every configuration has a result or failed (5 failed)", ended.verdict.reason
