"""From a spec to what is searched: Optuna distributions (the one mapping, ``space.suggest``), grids,
the per-device plan."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from conftest import ROOT
from orchestrator.search.space import (Plan, config_key, configurations, count_configurations, distance,
                                make_plan, nearest, shared_env, suggest, trial_params)
from orchestrator.spec.load import Choice, Range, load_spec

BERT_MEMORY = ROOT / "sweeps" / "bert_memory.yaml"


def _plan(dim: Choice | Range) -> Plan:
    """A CPU plan that searches ``dim`` as ``x`` alone."""
    return Plan("cpu", {"x": dim}, {}, {})


@pytest.mark.parametrize("dim, expected", [
    (Choice(("float32", "bfloat16")), CategoricalDistribution(["float32", "bfloat16"])),
    (Choice((8, 16, 32)), CategoricalDistribution([8, 16, 32])),
    (Range(8, 64, integer=True), IntDistribution(8, 64, step=1)),
    (Range(8, 64, step=8, integer=True), IntDistribution(8, 64, step=8)),
    (Range(1, 256, log=True, integer=True), IntDistribution(1, 256, log=True)),
    (Range(0.5, 2.0), FloatDistribution(0.5, 2.0)),
    (Range(0.0, 1.0, step=0.25), FloatDistribution(0.0, 1.0, step=0.25)),
    (Range(1e-5, 1e-1, log=True), FloatDistribution(1e-5, 1e-1, log=True)),
], ids=lambda v: repr(v) if isinstance(v, (Choice, Range)) else "")
def test_distribution(dim: Choice | Range, expected: object) -> None:
    """What ``suggest`` asks Optuna for, as the trial records it."""
    trial = optuna.create_study().ask()
    suggest(trial, _plan(dim))
    got = trial.distributions["x"]
    assert got == expected
    if isinstance(dim, Range):  # both bounds inclusive, one step beyond each is not
        assert got._contains(got.to_internal_repr(dim.low))
        assert got._contains(got.to_internal_repr(dim.high))
        beyond = dim.step or (1 if dim.integer else 1e-9)
        assert not got._contains(dim.low - beyond) and not got._contains(dim.high + beyond)


@pytest.mark.parametrize("dim, expected", [
    (Range(1, 3, integer=True), {1, 2, 3}),
    (Range(0, 10, step=5, integer=True), {0, 5, 10}),
    (Range(0.0, 1.0, step=0.5), {0.0, 0.5, 1.0}),
    (Choice(("a", "b", "c")), {"a", "b", "c"}),
], ids=lambda v: repr(v) if isinstance(v, (Choice, Range)) else "")
def test_sampling_reaches_both_ends(dim: Choice | Range, expected: set) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    assert {suggest(study.ask(), _plan(dim))["x"] for _ in range(200)} == expected


@pytest.mark.parametrize("dim, values", [
    (Range(8, 64, step=8, integer=True), (8, 16, 24, 32, 40, 48, 56, 64)),
    (Range(1, 1, step=1, integer=True), (1,)),
    (Range(0.5, 1.5, step=0.25), (0.5, 0.75, 1.0, 1.25, 1.5)),
    (Range(0.0, 1.0, step=0.1), (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)),
    (Range(1.0, 2.0, step=1.0 / 3), (1.0, 1.333333333333, 1.666666666667, 2.0)),
], ids=repr)
def test_grid_values_include_both_ends(dim: Range, values: tuple) -> None:
    assert dim.grid_values() == pytest.approx(values)
    assert dim.grid_values()[0] == dim.low and dim.grid_values()[-1] == dim.high


@pytest.mark.parametrize("device, searched, not_applied", [
    ("cpu", ["batch_size", "dtype", "grad_accum_steps"], ["mps_high_watermark_ratio"]),
    ("cuda", ["batch_size", "dtype", "grad_accum_steps"], ["mps_high_watermark_ratio"]),
    ("mps", ["batch_size", "dtype", "grad_accum_steps", "mps_high_watermark_ratio"], []),
])
def test_make_plan_searches_only_what_the_device_reads(device: str, searched: list[str],
                                                        not_applied: list[str]) -> None:
    plan = make_plan(load_spec(BERT_MEMORY), device)
    assert plan.device == device
    assert list(plan.searched) == searched
    assert list(plan.not_applied) == not_applied
    for name in not_applied:
        assert "mps only" in plan.not_applied[name] and device in plan.not_applied[name]


@pytest.mark.parametrize("device, count", [("cpu", 6 * 3 * 3), ("cuda", 54), ("mps", 6 * 3 * 3 * 3)])
def test_bert_memory_configurations(device: str, count: int) -> None:
    plan = make_plan(load_spec(BERT_MEMORY), device)
    configs = configurations(plan)
    assert len(configs) == count == count_configurations(plan)
    assert len({config_key(c) for c in configs}) == count


def spec_from(tmp_path: Path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nexperiment: experiments.faults\n" + text)
    return load_spec(path)


def test_fixed_knobs_a_device_does_not_read_are_noted(tmp_path: Path) -> None:
    spec = spec_from(tmp_path, "fixed:\n  mps_high_watermark_ratio: 1.0\n  batch_size: 8\n"
                               "space:\n  dtype: [float32]\n")
    assert list(make_plan(spec, "cpu").not_applied) == ["mps_high_watermark_ratio"]
    assert make_plan(spec, "mps").not_applied == {}


def test_a_swept_device_does_not_multiply_cpu_by_mps_only_knobs(tmp_path: Path) -> None:
    spec = spec_from(tmp_path, "space:\n  device: [mps, cpu]\n  batch_size: [8, 16]\n"
                               "  mps_high_watermark_ratio: [1.0, 1.4, 1.7]\n")
    plan = make_plan(spec, "swept")
    configs = configurations(plan)
    cpu = [c for c in configs if c["device"] == "cpu"]
    mps = [c for c in configs if c["device"] == "mps"]
    assert len(mps) == 2 * 3
    assert cpu == [{"device": "cpu", "batch_size": 8}, {"device": "cpu", "batch_size": 16}]
    assert len(configs) == 8 == count_configurations(plan)


def test_a_knob_no_swept_device_reads_is_not_searched(tmp_path: Path) -> None:
    spec = spec_from(tmp_path, "space:\n  device: [cuda, cpu]\n  batch_size: [8]\n"
                               "  mps_high_watermark_ratio: [1.0, 1.4]\n")
    plan = make_plan(spec, "swept")
    assert "mps_high_watermark_ratio" not in plan.searched
    assert "mps_high_watermark_ratio" in plan.not_applied
    assert len(configurations(plan)) == 2


def test_a_continuous_range_has_no_count(tmp_path: Path) -> None:
    spec = spec_from(tmp_path, "space:\n  lr: {low: 0.001, high: 0.1}\n  batch_size: [8]\nsearch:\n  n_trials: 4\n")
    plan = make_plan(spec, "cpu")
    assert not plan.finite() and count_configurations(plan) is None


@pytest.mark.parametrize("device, space, fixed, expected", [
    ("cpu", "batch_size: [8, 16]", "", {}),  # most sweeps: no allocator variable
    ("cpu", "batch_size: [8, 16]", "effective_batch_size: 32", {}),  # accumulation derived per trial
    ("cpu", "lr: {low: 0.001, high: 0.1}", "", {}),  # continuous, no environment knob
    ("cuda", "batch_size: [8, 16]", "cuda_alloc_conf: 'expandable_segments:True'",
     {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),  # fixed: every trial the same
    ("cuda", "cuda_alloc_conf: ['expandable_segments:True', 'backend:native']", "", None),
    ("mps", "mps_high_watermark_ratio: [1.0, 1.7]", "", None),
    ("mps", "mps_low_watermark_ratio: {low: 0.5, high: 1.0}", "", None),  # continuous, varies
    ("cpu", "mps_high_watermark_ratio: [1.0, 1.7]", "", {}),  # not read on cpu: not searched
    ("swept", "device: [cuda, cpu]\n  cuda_alloc_conf: ['backend:native']", "", None),  # cuda's, not cpu's
])
def test_shared_env_is_the_one_environment_of_every_trial_or_none(
        tmp_path: Path, device: str, space: str, fixed: str, expected: dict | None) -> None:
    """What the slots' first interpreters are started with before the first trial is known."""
    text = (f"fixed:\n  {fixed}\n" if fixed else "") + f"space:\n  {space}\nsearch:\n  n_trials: 4\n"
    plan = make_plan(spec_from(tmp_path, text), device)
    assert shared_env(plan) == expected


@pytest.mark.parametrize("batch_size, accum", [(8, 8), (16, 4), (64, 1)])
def test_trial_params_derive_grad_accum_steps(tmp_path: Path, batch_size: int, accum: int) -> None:
    spec = spec_from(tmp_path, "device: cpu\nfixed:\n  effective_batch_size: 64\n  mps_fallback: true\n"
                               "space:\n  batch_size: [8, 16, 64]\n")
    params = trial_params(make_plan(spec, "cpu"), {"batch_size": batch_size})
    assert params == {"effective_batch_size": 64, "batch_size": batch_size, "grad_accum_steps": accum,
                      "device": "cpu"}  # mps_fallback: not read on cpu, so not sent


@pytest.mark.parametrize("a, b, same", [
    ({"lr": 1}, {"lr": 1.0}, True),
    ({"batch_size": 8, "dtype": "float32"}, {"dtype": "float32", "batch_size": 8.0}, True),
    ({"flag": True}, {"flag": 1}, False),
    ({"batch_size": 8}, {"batch_size": 16}, False),
    ({"batch_size": 8}, {"batch_size": 8, "dtype": "float32"}, False),
])
def test_config_key(a: dict, b: dict, same: bool) -> None:
    assert (config_key(a) == config_key(b)) is same


NEAR_PLAN = Plan(device="cpu", fixed={}, not_applied={}, searched={
    "batch_size": Choice((64, 8, 16, 32)),          # listed out of order: distance follows the values
    "dtype": Choice(("float32", "float16", "bfloat16")),
    "activation_checkpointing": Choice((False, True)),
    "lr": Range(0.0, 1.0, step=0.25)})


@pytest.mark.parametrize("a, b, expected", [
    ({"batch_size": 8}, {"batch_size": 8}, 0),
    ({"batch_size": 8}, {"batch_size": 16}, 1),                 # adjacent in the sorted list
    ({"batch_size": 8}, {"batch_size": 64}, 3),
    ({"batch_size": 64}, {"batch_size": 32}, 1),
    ({"dtype": "float32"}, {"dtype": "bfloat16"}, 1),          # names are not ordered: 0 or 1
    ({"dtype": "float16"}, {"dtype": "bfloat16"}, 1),
    ({"activation_checkpointing": False}, {"activation_checkpointing": True}, 1),
    ({"lr": 0.0}, {"lr": 0.75}, 3),                              # a stepped range is ordered too
    ({"batch_size": 8, "dtype": "float32"}, {"batch_size": 32, "dtype": "float16"}, 3),
    ({"batch_size": 8}, {"dtype": "float32"}, float("inf")),   # another device's configuration
])
def test_distance(a: dict, b: dict, expected: float) -> None:
    assert distance(a, b, NEAR_PLAN) == expected == distance(b, a, NEAR_PLAN)


def test_a_stepped_float_is_the_same_configuration_whatever_its_rounding() -> None:
    # Optuna suggests 0.1 + 2 * 0.1 = 0.30000000000000004 where the grid lists 0.3
    assert config_key({"lr": 0.1 + 2 * 0.1}) == config_key({"lr": 0.3})
    assert config_key({"lr": 0.3}) != config_key({"lr": 0.3001})
    assert distance({"lr": 0.0}, {"lr": 0.25 + 0.5}, NEAR_PLAN) == 3


def test_nearest_prefers_the_adjacent_batch_and_breaks_ties_with_the_rng() -> None:
    import random

    here = {"batch_size": 16, "dtype": "bfloat16"}
    candidates = [{"batch_size": 64, "dtype": "bfloat16"}, {"batch_size": 8, "dtype": "float32"},
                  {"batch_size": 32, "dtype": "bfloat16"}, {"batch_size": 8, "dtype": "bfloat16"}]
    picks = {config_key(nearest(here, candidates, NEAR_PLAN, random.Random(seed))) for seed in range(20)}
    assert picks == {config_key({"batch_size": 32, "dtype": "bfloat16"}),
                     config_key({"batch_size": 8, "dtype": "bfloat16"})}
    assert nearest(here, [], NEAR_PLAN, random.Random(0)) is None


def test_empty_cache_every_is_not_searched_on_the_cpu(tmp_path: Path) -> None:
    """An experiment tour: the CPU has no cache to empty (``backend.empty_cache``), yet the plan said
    ``empty_cache_every`` applied there and a grid spent half its trials on it, its best crediting
    the knob with noise. Read on CUDA and MPS only now."""
    spec = spec_from(tmp_path, "space:\n  batch_size: [8]\n  empty_cache_every: [0, 1]\n")
    cpu, cuda = make_plan(spec, "cpu"), make_plan(spec, "cuda")
    assert "empty_cache_every" not in cpu.searched and "cuda/mps only" in cpu.not_applied["empty_cache_every"]
    assert len(configurations(cpu)) == 1
    assert "empty_cache_every" in cuda.searched and len(configurations(cuda)) == 2
