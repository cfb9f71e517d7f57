"""The preload hook (``orchestrator/harness/ahead.py``): a module's ``preload(fixed)`` called with the
fixed parameters, its failures ignored, its parameters taken out of the environment, and the CUDA
availability check made through NVML while it runs. Real modules, no torch needed."""

from __future__ import annotations

import os
import types

import pytest

from orchestrator.harness import ahead
from orchestrator.protocol import PRELOAD_ENV


def module_with(hook: object) -> types.ModuleType:
    module = types.ModuleType("exp")
    module.preload = hook  # type: ignore[attr-defined]
    return module


def test_the_hook_gets_a_copy_of_the_fixed_parameters() -> None:
    seen: list[dict] = []
    fixed = {"model_type": "llama", "seq_len": 1024}
    assert ahead.run_hook(module_with(seen.append), fixed) is True
    assert seen == [fixed] and seen[0] is not fixed


def test_a_module_without_a_hook_or_with_a_failing_one_is_left_to_its_trials() -> None:
    assert ahead.run_hook(types.ModuleType("plain"), {"a": 1}) is False

    def broken(fixed: dict) -> None:
        raise ImportError("no module named transformers")

    assert ahead.run_hook(module_with(broken), {}) is False
    assert ahead.run_hook(module_with("not callable"), {}) is False


def test_the_parameters_come_from_the_environment_once_and_leave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRELOAD_ENV, ahead.encode_params({"model": "gpt2", "layers": 4}))
    assert ahead.preload_params() == {"layers": 4, "model": "gpt2"}
    assert PRELOAD_ENV not in os.environ  # the trials forked after it do not inherit it
    assert ahead.preload_params() is None
    for bad in ("", "not json", "[1, 2]"):
        monkeypatch.setenv(PRELOAD_ENV, bad)
        assert ahead.preload_params() is None


@pytest.mark.parametrize("before", [None, "0"])
def test_cuda_is_asked_through_nvml_while_the_imports_run_then_as_before(
        monkeypatch: pytest.MonkeyPatch, before: str | None) -> None:
    if before is None:
        monkeypatch.delenv(ahead.NVML_CHECK, raising=False)
    else:
        monkeypatch.setenv(ahead.NVML_CHECK, before)
    with ahead.fork_safe():
        assert os.environ[ahead.NVML_CHECK] == "1"
    assert os.environ.get(ahead.NVML_CHECK) == before
    with pytest.raises(RuntimeError), ahead.fork_safe():
        raise RuntimeError("an import failed")
    assert os.environ.get(ahead.NVML_CHECK) == before
