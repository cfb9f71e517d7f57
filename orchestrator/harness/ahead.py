"""What a pre-started trial process does ahead of its configuration, beyond the common imports
(``child.preload``): the experiment's own preload hook, given the sweep's fixed parameters.

An experiment (or any module that runs trials the same way) may define ``preload(fixed)``. A fork
server, or a pre-started interpreter, calls it once, after importing torch, the harness and the
module, with the sweep's fixed parameters (``protocol.PRELOAD_ENV``, which the launcher sets).
It imports what every trial of those parameters would otherwise import on its own: ``transformers``
imports a model's modules lazily, when its class is first looked up, so ``experiments.hf`` looks
the class up for its ``model``/``model_type``. Each forked trial then starts with it imported.

It must touch no device (``workload.py``'s contract): a forked child cannot use a CUDA context
its server made. ``fork_safe`` keeps one common slip harmless: ``torch.cuda.is_available()`` asked
at import time. A hook that fails is ignored: the trial imports on its own and reports its own
errors.

A fork server can also fork the process for the slot's next trial before that trial is known:
``prepared.py``. Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestrator.protocol import PRELOAD_ENV

HOOK = "preload"
"""The name of a module's hook: ``preload(fixed: dict) -> None``."""

NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def run_hook(module: object, fixed: dict[str, Any]) -> bool:
    """``module.preload(fixed)`` where the module has one; whether it ran to its end (what it
    raised is ignored: the trial reports its own errors)."""
    hook = getattr(module, HOOK, None)
    if not callable(hook):
        return False
    try:
        hook(dict(fixed))
    except BaseException:  # noqa: BLE001
        return False
    return True


def preload_params() -> dict[str, Any] | None:
    """The fixed parameters the launcher gave this pre-started process (``PRELOAD_ENV``), taken
    out of its environment (its trials need not inherit them); None when it gave none."""
    text = os.environ.pop(PRELOAD_ENV, None)
    if not text:
        return None
    try:
        fixed = json.loads(text)
    except ValueError:
        return None
    return fixed if isinstance(fixed, dict) else None


def encode_params(fixed: dict[str, Any]) -> str:
    """``PRELOAD_ENV``'s value for ``fixed`` (the launcher's side)."""
    return json.dumps(fixed, default=str, sort_keys=True)


@contextmanager
def fork_safe() -> Iterator[None]:
    """While the imports and the hook run, ``torch.cuda.is_available()`` asks NVML, as
    ``torch.cuda.device_count()`` already does, instead of the CUDA runtime (torch's
    ``PYTORCH_NVML_BASED_CUDA_CHECK``; torch/cuda/__init__.py, ``is_available``): the runtime's
    answer (``cudaGetDeviceCount``) registers a fork handler that marks every child of this
    process "bad fork", and a forked trial could then not use CUDA. Restored after: the trial
    asks as it always did."""
    before = os.environ.get(NVML_CHECK)
    os.environ[NVML_CHECK] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NVML_CHECK, None)
        else:
            os.environ[NVML_CHECK] = before
