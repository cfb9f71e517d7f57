"""Contract tests for the MPS- and CUDA-only code paths.

MPS and CUDA do not exist on the machines these tests run on. These tests replace the torch
functions with recorders and check WHICH calls the harness makes, with which arguments: that the
thin device layer follows the facts in docs/mac.md and docs/knobs.md. They are not
evidence that anything works on a Mac or a GPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from orchestrator.spec import knobs
from orchestrator.harness import backend
from orchestrator.protocol import config_of

pytestmark = pytest.mark.contract


class Recorder:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.mp = monkeypatch

    def patch(self, owner: Any, name: str, result: Any = None) -> None:
        label = f"{getattr(owner, '__name__', owner)}.{name}"

        def fake(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((label, args))
            return result

        self.mp.setattr(owner, name, fake, raising=False)

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return Recorder(monkeypatch)


def test_mps_sync_empty_cache_and_fraction(rec: Recorder) -> None:
    for name in ("synchronize", "empty_cache", "set_per_process_memory_fraction"):
        rec.patch(torch.mps, name)
    backend.synchronize("mps")
    backend.empty_cache("mps")
    backend.set_memory_fraction("mps", 1)  # an int from YAML: MPS raises TypeError on an int
    assert rec.names() == ["torch.mps.synchronize", "torch.mps.empty_cache",
                           "torch.mps.set_per_process_memory_fraction"]
    (arg,) = rec.calls[-1][1]
    assert isinstance(arg, float) and arg == 1.0


def test_mps_peak_uses_torch_accelerator_and_driver_memory(rec: Recorder) -> None:
    rec.patch(torch.accelerator, "reset_peak_memory_stats")
    rec.patch(torch.accelerator, "max_memory_allocated", 3 * backend.GIB)
    rec.patch(torch.accelerator, "max_memory_reserved", 4 * backend.GIB)
    rec.patch(torch.mps, "driver_allocated_memory", 5 * backend.GIB)
    backend.reset_peak("mps")
    peaks = backend.peak_stats("mps")
    assert backend.driver_bytes("mps") == 5 * backend.GIB
    assert "torch.accelerator.reset_peak_memory_stats" in rec.names()
    assert peaks["peak_allocated_gib"] == 3.0 and peaks["peak_reserved_gib"] == 4.0


def test_mps_peak_reads_none_before_the_first_allocation(rec: Recorder) -> None:
    rec.patch(torch.accelerator, "max_memory_allocated", 0)  # 2.13 returns 0 before any MPS use
    rec.patch(torch.accelerator, "max_memory_reserved", 0)
    peaks = backend.peak_stats("mps")
    assert peaks["peak_allocated_gib"] is None and peaks["peak_reserved_gib"] is None


def test_cuda_calls(rec: Recorder) -> None:
    for name in ("synchronize", "empty_cache", "set_per_process_memory_fraction", "reset_peak_memory_stats"):
        rec.patch(torch.cuda, name)
    rec.patch(torch.cuda, "max_memory_allocated", 2 * backend.GIB)
    rec.patch(torch.cuda, "max_memory_reserved", 3 * backend.GIB)
    backend.synchronize("cuda")
    backend.empty_cache("cuda")
    backend.set_memory_fraction("cuda", 0.15)
    backend.reset_peak("cuda")
    peaks = backend.peak_stats("cuda")
    assert rec.names()[:4] == ["torch.cuda.synchronize", "torch.cuda.empty_cache",
                               "torch.cuda.set_per_process_memory_fraction", "torch.cuda.reset_peak_memory_stats"]
    assert rec.calls[2][1] == (0.15,)
    assert peaks["peak_allocated_gib"] == 2.0 and peaks["peak_reserved_gib"] == 3.0


def test_cuda_init_creates_the_context_before_the_model(rec: Recorder) -> None:
    rec.patch(torch.cuda, "init")
    rec.patch(torch, "empty")
    backend.init_device("cuda")
    assert rec.calls == [("torch.cuda.init", ()), ("torch.empty", (1,))]  # the allocation makes the context


def test_cuda_warmup_step_ends_are_events_read_after_the_synchronize(rec: Recorder) -> None:
    """No sync per warm-up step: an event recorded after each; once the device is synchronized
    (at wall-clock ``synced_at``), each event's time is the last one's less the GPU time between."""
    gpu_ms = iter([0.0, 250.0, 400.0])  # when each step's work ends on the GPU

    class Event:
        made: list[Event] = []

        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            Event.made.append(self)

        def record(self) -> None:
            self.ms = next(gpu_ms)

        def elapsed_time(self, other: Event) -> float:
            return other.ms - self.ms

    rec.mp.setattr(torch.cuda, "Event", Event)
    rec.patch(torch.cuda, "synchronize")
    markers = [backend.step_marker("cuda") for _ in range(3)]
    assert markers == Event.made and rec.calls == []  # no synchronize
    assert backend.marker_times(markers, 100.0) == pytest.approx([99.6, 99.85, 100.0])


def test_cpu_paths_make_no_device_calls(rec: Recorder) -> None:
    for owner in (torch.cuda, torch.mps):
        for name in ("synchronize", "empty_cache"):
            rec.patch(owner, name)
    rec.patch(torch.cuda, "init")
    backend.synchronize("cpu")
    backend.empty_cache("cpu")
    backend.init_device("cpu")
    assert rec.calls == []
    before = time.time()
    markers = [backend.step_marker("cpu") for _ in range(2)]  # the CPU ran the step: the host clock
    assert before <= markers[0] <= markers[1] <= time.time() and backend.marker_times(markers, 0.0) == markers


def test_auto_prefers_mps_then_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert backend.resolve("auto") == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backend.resolve("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backend.resolve("auto") == "cpu"
    assert backend.resolve("mps") == "mps"


# The environment a trial starts with: MPS reads these once, when its allocator is built.
ENV_CASES = [
    ({"mps_high_watermark_ratio": 1.0}, "mps",
     {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "1.0", "PYTORCH_MPS_LOW_WATERMARK_RATIO": "1.0"}),
    ({"mps_high_watermark_ratio": 1.7}, "mps", {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "1.7"}),
    ({"mps_high_watermark_ratio": 0.0}, "mps", {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"}),
    ({"mps_high_watermark_ratio": 1.2, "mps_low_watermark_ratio": 0.8}, "mps",
     {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "1.2", "PYTORCH_MPS_LOW_WATERMARK_RATIO": "0.8"}),
    ({"mps_fallback": True}, "mps", {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    ({"mps_fallback": False}, "mps", {"PYTORCH_ENABLE_MPS_FALLBACK": "0"}),
    ({"mps_high_watermark_ratio": 1.0, "mps_fallback": True}, "cuda", {}),
    ({"cuda_alloc_conf": "expandable_segments:True"}, "cuda",
     {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ({"cuda_alloc_conf": "expandable_segments:True"}, "mps", {}),
    ({"batch_size": 8}, "cpu", {}),
    ({"cpu_isa": "avx2"}, "cpu", {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}),
    ({"cpu_isa": "avx512_core_vnni"}, "cpu", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "ATEN_CPU_CAPABILITY": "avx512"}),
    ({"cpu_isa": "avx2"}, "cuda", {}),
]


@pytest.mark.parametrize("params, device, env", ENV_CASES)
def test_trial_environment(params: dict, device: str, env: dict) -> None:
    assert knobs.trial_env(params, device) == env


# -- MPS fallback: which ops ran on the CPU ------------------------------------------------------

@pytest.mark.parametrize("env, device, expected", [
    ("1", "mps", [True, False]),   # warn on every fallback during warm-up, then as training would
    ("0", "mps", []),              # fallback off: ops MPS lacks raise instead; nothing to hear
    (None, "mps", []),
    ("1", "cuda", []),             # only MPS falls back
    ("1", "cpu", []),
])
def test_every_fallback_warns_during_warmup_on_mps(monkeypatch: pytest.MonkeyPatch, env: str | None,
                                                   device: str, expected: list[bool]) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(torch, "set_warn_always", lambda on: calls.append(on))
    if env is None:
        monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    else:
        monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", env)
    backend.warn_every_fallback(device, True)
    backend.warn_every_fallback(device, False)
    assert calls == expected


def test_fallback_log_records_each_op_once_and_passes_other_warnings() -> None:
    import warnings

    from fixtures.fallback_experiment import OPS, TEXT
    from orchestrator.harness.fallback import FallbackLog, op_name

    with warnings.catch_warnings(record=True) as shown:  # what reaches the log
        with FallbackLog() as log:
            for _ in range(3):  # with set_warn_always(True) torch warns on every call
                for op in OPS:
                    warnings.warn(TEXT.format(op), UserWarning)
            warnings.warn("something else", UserWarning)
    assert log.ops == list(OPS)
    texts = [str(w.message) for w in shown]
    assert [t for t in texts if "fall back to run on the CPU" in t] == [TEXT.format(op) for op in OPS]  # once each
    assert "something else" in texts
    assert op_name("The operator 'aten::foo' is not currently implemented for the MPS device.") is None


@pytest.mark.contract
def test_contract_a_trial_records_the_ops_that_fell_back(recwarn: pytest.WarningsRecorder) -> None:
    """The trial's own code (``train.run``) on the CPU with a loss that emits MPS's fallback warning
    on every step (synthetic: no MPS here): its result names the ops and counts them, and the log
    shows each op's warning once and every other warning as usual."""
    from fixtures.fallback_experiment import OPS
    from orchestrator import metrics as M
    from orchestrator.harness import train

    config = {"experiment": "fixtures.fallback_experiment", "not_applied": {},
              "params": {"device": "cpu", "batch_size": 4},
              "trial": {"warmup_steps": 2, "measure_steps": 2, "min_measure_s": 0.0}}
    out = train.run(config_of(config), train.Progress())
    assert out["info"]["mps_fallback_ops"] == list(OPS)
    assert out["metrics"][M.MPS_FALLBACK_OPS] == 2.0
    shown = [str(w.message) for w in recwarn]  # what reaches the trial's log
    assert [sum(f"The operator '{op}' is not currently supported" in m for m in shown) for op in OPS] == [1, 1]
    assert "an unrelated warning the log must still show" in shown


def test_no_fallback_metric_off_mps_without_fallbacks() -> None:
    """A CPU trial that heard no fallback records no fallback figures (None in the report, not 0)."""
    from orchestrator import metrics as M
    from orchestrator.harness import train

    config = {"experiment": "experiments.mlp", "not_applied": {},
              "params": {"device": "cpu", "batch_size": 8, "hidden_size": 16, "num_layers": 1},
              "trial": {"warmup_steps": 1, "measure_steps": 1, "min_measure_s": 0.0}}
    out = train.run(config_of(config), train.Progress())
    assert M.MPS_FALLBACK_OPS not in out["metrics"] and "mps_fallback_ops" not in out["info"]
