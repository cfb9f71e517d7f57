"""The few calls that differ between CUDA, MPS and CPU, kept thin so each is obviously right.

MPS cannot run on the machines this project is tested on: its paths are covered by contract
tests that check which torch calls are made (tests/harness/test_backend_contract.py), not by real runs.
Facts behind each call: docs/mac.md and docs/knobs.md.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import sys
import time
from typing import Any

import torch

GIB = 1024 ** 3


def resolve(device: str) -> str:
    """``auto`` = mps if available, else cuda, else cpu."""
    if device != "auto":
        return device
    if torch.backends.mps.is_available():
        return "mps"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def init_device(device: str) -> None:
    """Initialise the device before the trial uses it, so that the first phase to touch it does not
    pay for it unseen. CUDA: ``torch.cuda.init()`` initialises torch's CUDA state (the driver, the
    device count, the caching allocator); the context is there at the latest once the first
    allocation is made (a one-element tensor, freed at once: its block stays in the allocator's
    small pool, where the model's first small tensor would have put one). MPS: the first
    allocation builds the allocator, which reads its watermark settings then. The CPU needs
    nothing."""
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device=device)
    elif device == "mps":
        torch.empty(1, device=device)


def init_driver(device: str) -> None:
    """The part of ``init_device`` that takes no memory of the device: on CUDA
    ``torch.cuda.init()`` (the driver, the device count, the caching allocator; 0.2 s on an H100,
    4 MiB of the GPU, no context: ``docs/gpu/cuinit_probe.py``). Elsewhere nothing."""
    if device == "cuda":
        torch.cuda.init()


def step_marker(device: str) -> Any:
    """A marker for "the work queued so far", placed without a synchronize: on CUDA an event
    recorded on the current stream, elsewhere the host clock now (``time.time()``)."""
    if device == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.time()


def marker_times(markers: list[Any], synced_at: float) -> list[float]:
    """The wall-clock times of ``step_marker``s, read once the device was synchronized
    (``synced_at``: ``time.time()`` when that synchronize returned). A CUDA event's time is when its
    work finished on the GPU: the last one finished as the synchronize returned, and each earlier
    one that much before it (``elapsed_time``, GPU clock)."""
    if not markers or isinstance(markers[-1], float):
        return list(markers)
    last = markers[-1]
    return [synced_at - m.elapsed_time(last) / 1000 for m in markers]


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def empty_cache(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
    elif device == "mps":
        torch.mps.empty_cache()


def set_memory_fraction(device: str, fraction: float) -> None:
    """CUDA: fraction of total memory (0, 1]. MPS: of the recommended working set, overriding the
    high watermark (notes section 2); ``float()`` because MPS rejects an int."""
    if device == "cuda":
        torch.cuda.set_per_process_memory_fraction(float(fraction))
    elif device == "mps":
        torch.mps.set_per_process_memory_fraction(float(fraction))


def fallback_enabled() -> bool:
    """``PYTORCH_ENABLE_MPS_FALLBACK`` as torch reads it at import (``std::stoi``: a leading
    integer, non-zero = on; notes section 1)."""
    m = re.match(r"\s*[+-]?\d+", os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", ""))
    return m is not None and int(m.group()) != 0


def warn_every_fallback(device: str, on: bool) -> None:
    """MPS with the fallback on: ``torch.set_warn_always(on)``. The fallback warns through
    ``TORCH_WARN_ONCE`` from one call site, i.e. for the first op only, unless warn-always is set;
    with it each op that falls back is heard (``fallback.FallbackLog``). On during warm-up only, so
    the timed window runs as training would."""
    if device == "mps" and fallback_enabled():
        torch.set_warn_always(on)


def limit_cpu_memory(gib: float) -> None:
    """A real CPU out-of-memory: torch's CPU allocator raises once the data segment is full.
    RLIMIT_DATA, never RLIMIT_AS (which also counts reservations and breaks CUDA start-up)."""
    limit = int(gib * GIB)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def reset_peak(device: str) -> None:
    """Start of the timed window: peaks from here on."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    elif device == "mps":
        if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "reset_peak_memory_stats"):
            torch.accelerator.reset_peak_memory_stats()
    else:
        _reset_rss_peak()


def _reset_rss_peak() -> None:
    # Linux >= 4.0: writing 5 to clear_refs resets VmHWM to the current RSS.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def rss_peak_bytes() -> int:
    """Peak resident set of this process (since the last reset where the OS allows one)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def driver_bytes(device: str) -> int | None:
    """MPS: what Metal holds for this process; the number the watermark cap is checked against."""
    if device == "mps":
        return int(torch.mps.driver_allocated_memory())
    return None


def peak_stats(device: str) -> dict[str, float | None]:
    """Peak figures (GiB) since ``reset_peak``; None where the backend has no such figure."""
    rss = rss_peak_bytes() / GIB
    if device == "cuda":
        return {"peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
                "peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB, "peak_rss_gib": rss}
    if device == "mps":
        acc = getattr(torch, "accelerator", None)
        alloc = reserved = None
        if acc is not None and hasattr(acc, "max_memory_allocated"):
            alloc = acc.max_memory_allocated() / GIB or None  # reads 0 before the first allocation
            reserved = acc.max_memory_reserved() / GIB or None
        return {"peak_allocated_gib": alloc, "peak_reserved_gib": reserved, "peak_rss_gib": rss}
    return {"peak_allocated_gib": None, "peak_reserved_gib": None, "peak_rss_gib": rss}


def memory_now(device: str) -> dict[str, float | None]:
    """Memory figures at this moment (GiB), recorded with an out-of-memory error."""
    out: dict[str, float | None] = {"rss_gib": rss_peak_bytes() / GIB}
    try:
        if device == "cuda":
            free, total = torch.cuda.mem_get_info()
            out.update(allocated_gib=torch.cuda.memory_allocated() / GIB,
                       reserved_gib=torch.cuda.memory_reserved() / GIB,
                       peak_reserved_gib=torch.cuda.max_memory_reserved() / GIB,
                       device_free_gib=free / GIB)
        elif device == "mps":
            out.update(allocated_gib=torch.mps.current_allocated_memory() / GIB,
                       driver_gib=torch.mps.driver_allocated_memory() / GIB)
    except Exception:  # the figures are a courtesy; never mask the OOM itself
        pass
    return out


def describe(device: str) -> dict[str, Any]:
    """Provenance recorded with every result."""
    info: dict[str, Any] = {
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "os": platform.platform(),
        "python": platform.python_version(),
        "pytorch_env": {k: v for k, v in os.environ.items() if k.startswith(("PYTORCH_", "TORCH_"))},
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(device_name=torch.cuda.get_device_name(0), total_memory_gib=props.total_memory / GIB,
                    cuda_version=torch.version.cuda)
    elif device == "mps":
        info.update(device_name=_sysctl("machdep.cpu.brand_string"),
                    total_memory_gib=_int_or_none(_sysctl("hw.memsize"), GIB),
                    recommended_max_memory_gib=torch.mps.recommended_max_memory() / GIB)
    else:
        info.update(device_name=_cpu_name(),
                    total_memory_gib=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB)
    return info


def _sysctl(key: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _int_or_none(text: str | None, unit: int) -> float | None:
    return int(text) / unit if text and text.isdigit() else None


def _cpu_name() -> str:
    from orchestrator.machine import cpu_model  # one reading of the CPU's name, the orchestrator's too

    return cpu_model()
