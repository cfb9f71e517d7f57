"""Recognise out-of-memory errors from every backend. Pure: no torch import.

- CUDA raises ``torch.OutOfMemoryError`` ("CUDA out of memory. Tried to allocate ...").
- MPS raises a plain ``RuntimeError`` ("MPS backend out of memory (MPS allocated: ...") and
  ``RuntimeError: Invalid buffer size: ...`` when one buffer exceeds the device's limit.
- The CPU allocator raises ``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory").
- Python's own allocator raises ``MemoryError``.
"""

from __future__ import annotations

import re

_OOM_TYPES = {"OutOfMemoryError", "MemoryError"}
_OOM_MESSAGE = re.compile(
    r"CUDA out of memory"
    r"|MPS backend out of memory"
    r"|Invalid buffer size"
    r"|DefaultCPUAllocator: can't allocate memory"
    r"|DefaultCPUAllocator: not enough memory"
    r"|CUDA error: out of memory"
    r"|CUBLAS_STATUS_ALLOC_FAILED"
    r"|cuDNN error: CUDNN_STATUS_ALLOC_FAILED"
)


def is_oom(exc_type_name: str, message: str) -> bool:
    """Whether an exception with this class name and message is an out-of-memory error."""
    return exc_type_name in _OOM_TYPES or bool(_OOM_MESSAGE.search(message))


def is_oom_exception(exc: BaseException) -> bool:
    """Same rule for a live exception (its base classes count: CUDA's OOM is a RuntimeError)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _OOM_TYPES) or bool(_OOM_MESSAGE.search(str(exc)))
