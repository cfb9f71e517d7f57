"""The trial harness on real torch (CPU, tiny BERT): every knob, honest figures, real OOM."""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.harness import marks, train
from orchestrator.protocol import config_of
from orchestrator.harness.workload import Workload
from orchestrator.launch import launch_trial

ROOT = Path(__file__).resolve().parents[2]
TINY = {"device": "cpu", "model": "tiny", "seq_len": 32, "batch_size": 8, "dtype": "float32"}
FAST = {"warmup_steps": 1, "measure_steps": 3, "min_measure_s": 0.0}


def run(params: dict[str, Any], settings: dict[str, Any] = FAST, experiment: str = "experiments.bert",
        not_applied: dict[str, str] | None = None) -> dict[str, Any]:
    config = {"experiment": experiment, "params": {**TINY, **params}, "trial": settings,
              "not_applied": not_applied or {}}
    return train.run(config_of(config), train.Progress())


# Each knob, once, on the tiny preset; `applied` says what was really used.
KNOB_CASES = [
    ({"dtype": "bfloat16"}, {"dtype": "autocast bfloat16", "grad_scaler": False}),
    ({"dtype": "float16"}, {"dtype": "autocast float16", "grad_scaler": True}),
    ({"grad_accum_steps": 3}, {"grad_accum_steps": 3}),
    ({"activation_checkpointing": True}, {"activation_checkpointing": True}),
    ({"zero_grad": "zero_fill"}, {"zero_grad_set_to_none": False}),
    ({"empty_cache_every": 1}, {"empty_cache_every": 1}),
    ({"optimizer": "adamw_foreach"}, {"optimizer": "adamw_foreach"}),
    ({"optimizer": "adamw_forloop"}, {"optimizer": "adamw_forloop"}),
    ({"optimizer": "adamw_fused"}, {"optimizer": "adamw_fused"}),
    ({"optimizer": "sgd", "lr": 0.01}, {"optimizer": "sgd"}),
    ({"seq_len": 16, "seed": 3}, {}),
]


@pytest.mark.parametrize("params, applied", KNOB_CASES, ids=[next(iter(p)) for p, _ in KNOB_CASES])
def test_each_knob_runs_and_is_recorded(params: dict[str, Any], applied: dict[str, Any]) -> None:
    out = run(params)
    assert out["finite"]
    for k, v in applied.items():
        assert out["applied"][k] == v
    m = out["metrics"]
    samples = 8 * params.get("grad_accum_steps", 1) * m["measure_steps_done"]
    assert m["samples_per_s"] == pytest.approx(samples / m["measure_s"])
    assert m["tokens_per_s"] == pytest.approx(m["samples_per_s"] * params.get("seq_len", 32))
    assert 0 < m["step_time_ms_p50"] <= m["step_time_ms_p90"]
    assert m["peak_memory_gib"] == m["peak_rss_gib"] > 0


def test_device_knobs_are_reported_not_applied_on_cpu() -> None:
    out = run({"mps_high_watermark_ratio": 1.0, "memory_fraction": 0.5,
               "cuda_alloc_conf": "expandable_segments:True", "mps_fallback": True},
              not_applied={"mps_low_watermark_ratio": "read on mps only; not searched on cpu"})
    assert set(out["not_applied"]) == {"mps_high_watermark_ratio", "memory_fraction", "cuda_alloc_conf",
                                       "mps_fallback", "mps_low_watermark_ratio"}
    assert "memory_fraction" not in out["applied"]


def test_window_lasts_at_least_min_measure_s_and_measure_steps() -> None:
    out = run({}, {"warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0.6})
    assert out["metrics"]["measure_s"] >= 0.6
    assert out["metrics"]["measure_steps_done"] >= 2
    assert out["metrics"]["throughput_cv"] is not None and out["metrics"]["throughput_cv"] >= 0


def test_a_window_closes_once_its_precision_is_met_and_holds_measure_steps_until_then() -> None:
    steady = "fixtures.experiments.steady"  # 20-ms steps: known within +-50% in a few, however busy the CPU
    early = run({}, {**FAST, "measure_steps": 500, "precision": 0.5}, experiment=steady)["metrics"]
    assert 5 <= early["measure_steps_done"] < 500
    assert early["throughput_ci95"] <= 0.5  # on the CPU the steps read are the steps recorded
    assert early["samples_per_s"] == pytest.approx(8 * early["measure_steps_done"] / early["measure_s"])
    held = run({}, {**FAST, "measure_steps": 12, "precision": 1e-6}, experiment=steady)["metrics"]
    assert held["measure_steps_done"] == 12 and held["throughput_ci95"] > 1e-6  # never that even: all 12


def test_the_start_up_is_marked_in_order_and_startup_s_is_its_span() -> None:
    progress = train.Progress()
    config = {"experiment": "experiments.bert", "params": TINY, "not_applied": {},
              "trial": {**FAST, "warmup_steps": 3}}
    out = train.run(config_of(config), progress)
    names = marks.startup_marks(3)
    assert names == ("device", "device_ready", "limits_applied", "built", "wrapped", "optimizer_ready",
                     "warmup_1", "warmup_2", "warmup_3", "warmup_done")
    assert list(progress.marks) == [*names, "window_start", "window_end"]
    times = list(progress.marks.values())
    assert times == sorted(times)
    assert out["metrics"]["startup_s"] == pytest.approx(times[len(names) - 1] - times[0], abs=2e-3)
    m = out["metrics"]  # read at both ends of the window (Linux); None only where no CPU tick passed (a few ms)
    assert (m["host_cpu_others"] is None and m["measure_s"] < 0.05) or 0.0 <= m["host_cpu_others"] <= 1.0, m


def test_each_start_up_phase_is_timed_where_it_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload whose ``build`` takes 0.3 s longer and whose first loss call 0.2 s longer: the
    marks put that time in the build and in the first warm-up step."""
    from experiments import bert

    def build(params: dict[str, Any], device: torch.device) -> Workload:
        time.sleep(0.3)
        workload = bert.build(params, device)
        calls = []

        def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
            if not calls:
                time.sleep(0.2)
            calls.append(1)
            return bert.mlm_loss(model, batch)

        return dataclasses.replace(workload, loss=loss)

    monkeypatch.setitem(sys.modules, "slow_workload", types.SimpleNamespace(build=build))
    progress = train.Progress()
    train.run(config_of({"experiment": "slow_workload", "params": TINY, "not_applied": {},
                         "trial": {**FAST, "warmup_steps": 2}}), progress)
    m = progress.marks
    assert m["built"] - m["limits_applied"] >= 0.3
    assert m["warmup_1"] - m["optimizer_ready"] >= 0.2
    assert m["optimizer_ready"] - m["built"] < 0.3 and m["device_ready"] - m["device"] < 0.3


def test_a_cold_trial_imports_what_a_prestarted_one_has_before_its_start(tmp_path: Path) -> None:
    """``python -m orchestrator.harness CONFIG.json``: the imports a fork server does ahead
    (``preload``: torch._dynamo, which the optimizer and the meta device's init import on first
    use, 1.5 s on this CPU) are done before the trial's first mark, not inside its startup_s."""
    import json
    import os
    import subprocess

    (tmp_path / "probe_imports.py").write_text(
        "import sys\nfrom experiments import mlp\n\n"
        "def build(params, device):\n"
        "    workload = mlp.build(params, device)\n"
        "    workload.info['dynamo_before_build'] = 'torch._dynamo' in sys.modules\n"
        "    return workload\n")
    config = {"experiment": "probe_imports", "params": {"device": "cpu", "batch_size": 8}, "trial": FAST,
              "not_applied": {}, "result_path": str(tmp_path / "result.json"), "watch_parent": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "orchestrator.harness", str(tmp_path / "config.json")],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "ok", proc.stdout + proc.stderr
    assert result["info"]["dynamo_before_build"] is True
    assert result["timeline"]["imports_done"] <= result["timeline"]["device"]


def test_loss_goes_down_over_a_few_dozen_steps() -> None:
    out = run({"lr": 3e-3, "dropout": 0.0}, {"warmup_steps": 1, "measure_steps": 40, "min_measure_s": 0.0})
    assert out["metrics"]["loss"] < 0.9 * out["metrics"]["loss_first"]


def test_accumulation_gives_the_gradient_of_the_larger_batch() -> None:
    import contextlib

    from experiments import bert

    params = {**TINY, "dropout": 0.0}
    workload: Workload = bert.build(params, torch.device("cpu"))
    big = workload.make_batch(12)
    grads = []
    for k in (1, 3):
        model = copy.deepcopy(workload.model)
        parts = [tuple(t.chunk(k)[i] for t in big) if isinstance(big, tuple) else
                 {n: t.chunk(k)[i] for n, t in big.items()} for i in range(k)]
        train.accumulate(model, workload.loss, parts, k, contextlib.nullcontext(), None)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    # Equal when every micro-batch holds the same number of masked tokens; the loss is a mean
    # over masked tokens, so allow for their uneven split.
    cos = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)
    assert cos > 0.999, float(cos)


def test_accumulation_equals_larger_batch_exactly_for_a_per_sample_mean() -> None:
    """With a loss that is a plain per-sample mean, k micro-batches sum to exactly one batch."""
    import contextlib

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    x, y = torch.randn(12, 5), torch.randn(12, 2)
    loss = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])  # noqa: E731
    grads = []
    for k in (1, 4):
        m = copy.deepcopy(model)
        train.accumulate(m, loss, list(zip(x.chunk(k), y.chunk(k))), k, contextlib.nullcontext(), None)
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)


def test_a_second_experiment_uses_the_same_contract() -> None:
    out = run({"model": None, "seq_len": None, "batch_size": 16}, experiment="experiments.mlp")
    assert out["finite"] and out["metrics"]["tokens_per_s"] is None
    assert out["metrics"]["samples_per_s"] > 0


@pytest.mark.slow
def test_a_real_cpu_oom_under_cpu_memory_limit_is_classified_oom(tmp_path: Path) -> None:
    config = {"experiment": "experiments.bert", "trial": FAST,
              "params": {**TINY, "batch_size": 4096, "seq_len": 128, "cpu_memory_limit_gib": 1.0}}
    launched = launch_trial(config_of(config), tmp_path, {}, timeout_s=120)
    result = launched.outcome.result
    assert launched.outcome.status == "oom", (launched.outcome.detail, launched.log_path.read_text()[-2000:])
    assert "DefaultCPUAllocator" in launched.outcome.detail
    assert result.phase in ("warmup", "measure") and isinstance(result.step, int)
    assert result.memory_at_failure["rss_gib"] > 0
    assert launched.peak_rss_gib is not None and launched.peak_rss_gib < 1.5
    # the same batch with the limit lifted fits: the OOM was the limit's doing
    small = {**config, "params": {**config["params"], "batch_size": 8}}
    assert launch_trial(config_of(small), tmp_path / "small", {}, timeout_s=120).outcome.status == "ok"


def compiled_trial(folder: Path, cache: Path) -> Any:
    params = {"device": "cpu", "batch_size": 8, "dtype": "float32", "compile": True, "num_layers": 1}
    config = config_of({"experiment": "experiments.mlp", "trial": FAST, "params": params,
                        "compile_cache": str(cache)})
    launched = launch_trial(config, folder, {}, timeout_s=280)
    assert launched.outcome.status == "ok", launched.log_path.read_text()[-3000:]
    return launched.outcome.result


@pytest.mark.slow
def test_compile_knob_keeps_inductor_s_caches_in_the_folder_it_is_given(tmp_path: Path) -> None:
    """``compile: true`` wraps the model in ``torch.compile`` and the trial trains through it; its
    compilation is reported apart (``compile_s``, within ``startup_s``), and Inductor's FX graph
    and AOTAutograd caches go to the folder the sweep gives (``harness/compiled.py``). The folder
    is one this machine's test runs share, as torch's own ``/tmp`` default was: cold, the MLP
    takes 20-100 s to compile here; warm, a few (the cold compile: the ``long`` test below)."""
    import tempfile

    cache = Path(tempfile.gettempdir()) / "orchestrate-tests-inductor"
    result = compiled_trial(tmp_path / "t0", cache)
    assert result.applied["compile"] is True and result.applied["compile_cache"] == str(cache)
    assert 0 < result.metrics["compile_s"] < result.metrics["startup_s"]
    kept = {p.name for p in cache.iterdir()}
    assert {"fxgraph", "aotautograd"} <= kept, kept


@pytest.mark.long
def test_a_second_compile_of_the_same_graph_loads_it_from_the_study_s_cache(tmp_path: Path) -> None:
    """Two trials of one configuration, each a fresh process, one cache folder: the second finds
    the graphs the first compiled (24.4 s -> 2.3 s for the 4-layer MLP on the 2-core CPU, by hand)."""
    first = compiled_trial(tmp_path / "t0", tmp_path / "cache")
    second = compiled_trial(tmp_path / "t1", tmp_path / "cache")
    assert second.metrics["compile_s"] < first.metrics["compile_s"] / 2, (first.metrics, second.metrics)


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"), reason="an x86 CPU with AVX2")
def test_cpu_isa_caps_the_trial_process_kernels(tmp_path: Path) -> None:
    from orchestrator.spec import knobs

    params = {"batch_size": 8, "cpu_isa": "avx2", "device": "cpu"}
    config = {"experiment": "experiments.mlp", "trial": FAST, "params": params}
    launched = launch_trial(config_of(config), tmp_path, knobs.trial_env(params, "cpu"), timeout_s=120)
    assert launched.outcome.status == "ok", launched.log_path.read_text()[-2000:]
    assert launched.outcome.result.applied["cpu_isa"] == "avx2 (ATen kernels: AVX2)"
