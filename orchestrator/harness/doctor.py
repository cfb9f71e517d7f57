"""What torch sees on this machine, for ``orchestrate doctor``: ``python -m orchestrator.harness.doctor``.

Prints one line, ``DOCTOR {json}``, of plain facts; the orchestrator's ``orchestrator/doctor/command.py``
(which never imports torch) derives the MPS caps and the warnings and formats them. Cheap on
purpose: one ``import torch``, one ``sysctl`` on macOS, no ``collect_env``.

``python -m orchestrator.harness.doctor --matmul DEVICE`` instead times a float32 matrix multiply
on the CPU, then on DEVICE unless it is the CPU (``doctor --check``'s speed line), and prints
``MATMUL {"cpu": GFLOP/s, "device": GFLOP/s}``.

MPS facts follow docs/mac.md; its calls are contract-tested
(tests/doctor/test_doctor.py), never run here: no Mac was available.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import platform
import sys
import time
from typing import TYPE_CHECKING, Any

from orchestrator.errors import first_line
from orchestrator.harness import swap
from orchestrator.harness.child import watch_parent

if TYPE_CHECKING:
    from types import ModuleType

GIB = 1024 ** 3
MAC_KEYS = ("machdep.cpu.brand_string", "hw.model", "hw.memsize", "hw.physicalcpu", "hw.logicalcpu",
            "hw.perflevel0.physicalcpu", "hw.perflevel1.physicalcpu", "hw.optional.arm64",
            "iogpu.wired_limit_mb")


def sysctl_values(keys: tuple[str, ...]) -> dict[str, str]:
    """macOS ``sysctl KEY...`` in one process, as {key: value}; keys this Mac lacks are left out."""
    import subprocess

    try:
        text = subprocess.run(["sysctl", *keys], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_sysctl(text)


def parse_sysctl(text: str) -> dict[str, str]:
    """``hw.memsize: 34359738368`` lines -> {"hw.memsize": "34359738368"}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def proc_translated() -> bool | None:
    """Whether this process runs under Rosetta: ``sysctl.proc_translated`` read in-process
    (Apple's documented check: 1 = translated, 0 = native, absent = a Mac without Rosetta). Asked of
    this process, not of a ``sysctl`` child, which may run as another architecture."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        value = ctypes.c_int(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        if libc.sysctlbyname(b"sysctl.proc_translated", ctypes.byref(value), ctypes.byref(size), None,
                             ctypes.c_size_t(0)) != 0:
            return False if ctypes.get_errno() == 2 else None  # ENOENT: no Rosetta on this Mac
        return value.value == 1
    except (OSError, AttributeError, TypeError):
        return None


def mps_facts(torch: ModuleType) -> dict[str, Any]:
    """Built? available? why not? and, where available, the recommended working set (bytes)."""
    mps: dict[str, Any] = {"built": bool(torch.backends.mps.is_built()), "available": False}
    if not mps["built"]:
        mps["why_not"] = "this torch build has no MPS support (MPS needs torch's macOS arm64 build)"
        return mps
    mps["available"] = bool(torch.backends.mps.is_available())
    if not mps["available"]:
        try:  # torch says why when asked for a tensor there
            torch.empty(1, device="mps")
            mps["why_not"] = "torch.backends.mps.is_available() is False"
        except Exception as exc:  # noqa: BLE001
            mps["why_not"] = first_line(exc)
        return mps
    for key, call in (("name", "get_name"), ("gpu_cores", "get_core_count")):
        try:
            mps[key] = getattr(torch.backends.mps, call)()
        except Exception:  # noqa: BLE001 - a courtesy
            pass
    try:  # builds the allocator, which parses PYTORCH_MPS_*_WATERMARK_RATIO: a bad value raises here
        mps["recommended_max_memory_bytes"] = int(torch.mps.recommended_max_memory())
    except Exception as exc:  # noqa: BLE001
        mps["allocator_error"] = first_line(exc)
    return mps


def cuda_facts(torch: ModuleType) -> dict[str, Any]:
    cuda: dict[str, Any] = {"built": torch.version.cuda is not None, "version": torch.version.cuda,
                            "available": False, "devices": []}
    if not cuda["built"]:
        cuda["why_not"] = "this torch build has no CUDA support"
        return cuda
    cuda["available"] = bool(torch.cuda.is_available())
    if not cuda["available"]:
        try:
            torch.cuda.init()
            cuda["why_not"] = "torch.cuda.is_available() is False"
        except Exception as exc:  # noqa: BLE001
            cuda["why_not"] = first_line(exc)
        return cuda
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        cuda["devices"].append({"index": i, "name": props.name, "total_memory_bytes": int(props.total_memory),
                                "capability": f"{props.major}.{props.minor}"})
    return cuda


def cpu_facts(mac: dict[str, str]) -> dict[str, Any]:
    from orchestrator.harness.backend import _cpu_name

    cpu: dict[str, Any] = {"model": mac.get("machdep.cpu.brand_string") or _cpu_name(),
                           "logical_cores": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        cpu["usable_cores"] = len(os.sched_getaffinity(0))
    if mac:
        cpu["physical_cores"] = _int(mac.get("hw.physicalcpu"))
        cpu["performance_cores"] = _int(mac.get("hw.perflevel0.physicalcpu"))
        cpu["efficiency_cores"] = _int(mac.get("hw.perflevel1.physicalcpu"))
        cpu["ram_bytes"] = _int(mac.get("hw.memsize"))
        return cpu
    cpu["physical_cores"] = _linux_physical_cores()
    try:
        cpu["ram_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        cpu["ram_bytes"] = None
    return cpu


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().lstrip("-").isdigit() else None


def _linux_physical_cores() -> int | None:
    try:
        with open("/proc/cpuinfo") as f:
            blocks = f.read().split("\n\n")
    except OSError:
        return None
    cores = set()
    for block in blocks:
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "core id" in fields:
            cores.add((fields.get("physical id"), fields["core id"]))
    return len(cores) or None


def collect() -> dict[str, Any]:
    """Every fact ``orchestrate doctor`` prints, as plain JSON values."""
    t0 = time.perf_counter()
    import torch

    import_s = time.perf_counter() - t0
    darwin = sys.platform == "darwin"
    mac = sysctl_values(MAC_KEYS) if darwin else {}
    sample = swap.read_swap()
    facts: dict[str, Any] = {
        "torch": {"version": torch.__version__, "git": getattr(torch.version, "git_version", None),
                  "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
                  "mps_built": bool(torch.backends.mps.is_built()), "import_s": round(import_s, 3),
                  "threads": torch.get_num_threads()},
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "machine": platform.machine(),
                   "rosetta": proc_translated() if darwin else None,
                   "arm64_hardware": (mac.get("hw.optional.arm64") == "1") if darwin else None},
        "os": {"system": platform.system(), "platform": platform.platform(),
               "mac_version": platform.mac_ver()[0] or None, "mac_model": mac.get("hw.model"),
               "iogpu_wired_limit_mb": _int(mac.get("iogpu.wired_limit_mb"))},
        "cpu": cpu_facts(mac),
        "mps": mps_facts(torch),
        "cuda": cuda_facts(torch),
        "swap": {"used_bytes": sample.used_bytes, "total_bytes": sample.total_bytes,
                 "out_bytes_since_boot": sample.out_bytes, "in_bytes_since_boot": sample.in_bytes},
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("PYTORCH_", "TORCH_"))},
    }
    facts["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return facts


def matmul_gflops(torch: ModuleType, device: str, n: int = 2048, min_s: float = 1.0) -> float:
    """Float32 ``n x n`` matrix multiplies for at least ``min_s`` (after one unmeasured), as in the
    usual CPU-against-MPS benchmark: GFLOP/s, 2 n^3 per product."""
    from orchestrator.harness import backend

    a = torch.rand(n, n, device=device)
    b = torch.rand(n, n, device=device)
    a @ b
    backend.synchronize(device)  # sync point: the timing starts with an idle device
    reps, t0 = 0, time.perf_counter()
    while True:
        a @ b
        reps += 1
        backend.synchronize(device)  # sync point: each product is done before the clock is read
        elapsed = time.perf_counter() - t0
        if elapsed >= min_s and reps >= 3:
            return 2 * n ** 3 * reps / elapsed / 1e9


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--matmul":
        import torch

        out = {"cpu": matmul_gflops(torch, "cpu")}
        if argv[2] != "cpu":
            out["device"] = matmul_gflops(torch, argv[2])
        print("MATMUL " + json.dumps(out))
        return 0
    print("DOCTOR " + json.dumps(collect(), default=str))
    return 0


if __name__ == "__main__":
    watch_parent()  # before torch is imported: dies with the orchestrator that asked
    sys.exit(main(sys.argv))
