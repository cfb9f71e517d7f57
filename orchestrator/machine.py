"""What a study was run on, told without importing torch or touching a device: the device, torch's
version (from its package metadata) and the devices' names. Recorded with the study by every run
that started its probe; a later run of a finished study compares them instead of starting one
(``resume``)."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from typing import Any

MACHINE_ATTR = "orchestrate.machine"


def torch_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def device_names(device: str) -> list[str]:
    """The names a device kind goes by here, read cheaply: ``nvidia-smi`` for CUDA (asked once per
    process), the CPU's model, the Mac's chip."""
    if device == "cuda":
        return [g.name for g in list_gpus()]
    if device == "mps":
        return [_sysctl("machdep.cpu.brand_string") or platform.machine()]
    return [cpu_model()]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _sysctl("machdep.cpu.brand_string") or platform.processor() or platform.machine()


HALF_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16", "bf16"), "float16": ("avx512_fp16", "amx_fp16", "fphp")}
"""The CPU flags of each half precision's instructions: x86 vector, x86 matrix (AMX), Arm."""
ISA_KEEPS = {"bfloat16": ("avx512_core_bf16", "avx512_core_amx"), "float16": ()}
"""The ``cpu_isa`` caps (``spec/knobs.CPU_ISAS``) that keep each half precision's instructions."""


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str] | None:
    """The first CPU's flags, or None where they cannot be read (not Linux)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def native_half(flags: set[str] | None, cpu_isa: str | None = None) -> frozenset[str] | None:
    """The half precisions a CPU trial has instructions for: by the CPU's ``flags``, and under a
    ``cpu_isa`` cap only those the cap keeps; None where the flags are unknown."""
    if flags is None:
        return None
    have = {half for half, names in HALF_FLAGS.items() if flags & set(names)}
    if cpu_isa is not None:
        have &= {half for half, caps in ISA_KEEPS.items() if cpu_isa in caps}
    return frozenset(have)


def _sysctl(key: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def facts(devices: tuple[str, ...]) -> dict[str, Any]:
    """What ``MACHINE_ATTR`` holds for a study whose trials run on ``devices``."""
    return {"devices": list(devices), "torch_version": torch_version(),
            "device_names": {d: device_names(d) for d in devices}}


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str = ""
    memory_mib: int | None = None
    pci_bus_id: str = ""
    """As nvidia-smi writes it (``00000000:18:00.0``); empty when unknown."""


def list_gpus() -> list[Gpu]:
    """The GPUs this process may use: ``nvidia-smi``'s list, narrowed by an inherited
    ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs). Empty when there is no NVIDIA driver."""
    fake = os.environ.get("ORCHESTRATE_TEST_GPUS")
    if fake:
        gpus = []
        for item in fake.split(","):
            index, _, uuid = item.partition(":")
            gpus.append(Gpu(int(index), uuid or f"GPU-test-{index}", "test GPU"))
    else:
        gpus = list(_nvidia_smi())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or fake:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    picked = []
    for w in wanted:
        match = next((g for g in gpus if str(g.index) == w or g.uuid == w or g.uuid.startswith(w)), None)
        if match is None:
            break  # CUDA stops at the first invalid entry too
        picked.append(match)
    return picked


@functools.lru_cache(maxsize=1)
def _nvidia_smi() -> tuple[Gpu, ...]:
    """``nvidia-smi``'s GPUs, asked once per process (start-up asks twice: the probe's GPU, the slots);
    a tuple, so no caller can change the cached answer."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,pci.bus_id",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            gpus.append(Gpu(int(parts[0]), parts[1], parts[2], int(parts[3]) if parts[3].isdigit() else None,
                            parts[4] if len(parts) > 4 else ""))
    return tuple(gpus)
