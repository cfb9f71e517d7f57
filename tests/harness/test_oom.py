"""The out-of-memory classifier against real messages from CUDA, MPS and the CPU allocator."""

from __future__ import annotations

import pytest
import torch

from fixtures.oom_messages import MESSAGES
from orchestrator.harness.oom import is_oom, is_oom_exception


@pytest.mark.parametrize("type_name, message, expected", MESSAGES,
                         ids=[f"{t}-{m[:30]}" for t, m, _ in MESSAGES])
def test_classifier_on_real_messages(type_name: str, message: str, expected: bool) -> None:
    assert is_oom(type_name, message) is expected


def test_live_exceptions_are_classified_by_type_and_message() -> None:
    assert is_oom_exception(torch.OutOfMemoryError("anything"))  # the CUDA type, whatever it says
    assert is_oom_exception(MemoryError())
    assert is_oom_exception(RuntimeError(MESSAGES[4][1]))         # MPS: a plain RuntimeError
    assert not is_oom_exception(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_oom_exception(ValueError("out of patience"))


def test_a_real_cpu_allocation_failure_is_recognised() -> None:
    """A real DefaultCPUAllocator error: ask for far more than any machine has."""
    with pytest.raises(RuntimeError) as info:
        torch.empty(1 << 50, dtype=torch.uint8)
    assert is_oom_exception(info.value), str(info.value)
