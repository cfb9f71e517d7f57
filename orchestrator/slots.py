"""Device slots: where trials run, one at a time on each (a measurement is only valid alone on its
device). Parent side: never imports torch; GPUs are listed with ``nvidia-smi``.

- ``cuda:N`` / ``cuda`` / ``auto`` on CUDA: one slot per GPU; the trial's process gets
  ``CUDA_VISIBLE_DEVICES=<the GPU's UUID>`` (so the experiment sees ``cuda:0``, and no index
  ordering can point it at another GPU) and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
- ``mps``: one slot; more is refused (a Mac has one GPU, shared with the CPU).
- ``cpu``: one slot on every core (the default); ``cpu:A-B``: a slot pinned to cores A..B
  (``os.sched_setaffinity`` in the trial, ``OMP_NUM_THREADS`` to match); slots may not share a core.

``ORCHESTRATE_TEST_GPUS`` (tests only): ``"0:GPU-aaa,1:GPU-bbb"`` stands in for ``nvidia-smi``'s
list, and lets CPU trials run on such slots, so the scheduling is tested without a GPU.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import SpecError


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str = ""
    memory_mib: int | None = None


@dataclass(frozen=True)
class Slot:
    """One place a trial runs; ``env`` is added to the trial's environment before it starts."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    cores: frozenset[int] | None = None
    """CPU cores the trial is pinned to (None: not pinned)."""
    gpu: Gpu | None = None

    def record(self) -> dict[str, Any]:
        """What every trial records about where it ran (user attributes and MLflow tags)."""
        out: dict[str, Any] = {"slot": self.name, "host": socket.gethostname()}
        if self.gpu is not None:
            out.update(gpu_index=self.gpu.index, gpu_uuid=self.gpu.uuid)
        if self.cores is not None:
            out["cpu_cores"] = _ranges(self.cores)
        return out


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
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                 timeout=30)
        except (OSError, subprocess.SubprocessError):
            return []
        if out.returncode != 0:
            return []
        gpus = []
        for line in out.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 4 and parts[0].isdigit():
                gpus.append(Gpu(int(parts[0]), parts[1], parts[2],
                                int(parts[3]) if parts[3].isdigit() else None))
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


def available_cores() -> frozenset[int]:
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def _ranges(cores: frozenset[int]) -> str:
    ordered, out = sorted(cores), []
    start = prev = ordered[0]
    for c in ordered[1:] + [None]:  # type: ignore[list-item]
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if c is not None:
            start = prev = c
    return ",".join(out)


def resolve_slots(items: tuple[str, ...] | None, device: str, fail: Any) -> list[Slot]:
    """The slots for ``items`` (the spec's ``devices``, or ``--devices``) on the resolved ``device``
    (``cuda``, ``mps``, ``cpu`` or ``swept``). ``fail(rule)`` returns the SpecError to raise (it
    names the spec's line, or the flag)."""
    if items is None:
        return [Slot(device if device != "swept" else "default")]
    if device == "swept" and items != ("auto",):
        raise fail("several device slots need one device: space.device sweeps it (remove devices, "
                   "or sweep the device in separate studies)")
    if items == ("auto",):
        if device == "cuda" or (device == "cpu" and os.environ.get("ORCHESTRATE_TEST_GPUS")):
            gpus = list_gpus()
            if gpus:
                return [_gpu_slot(g) for g in gpus]
        return [Slot(device if device != "swept" else "default")]
    kinds = {re.sub(r":.*", "", i) for i in items}
    if "mps" in kinds:
        if items != ("mps",):
            raise fail("MPS has one device (the Mac's GPU, which shares memory with the CPU): "
                       "use a single slot, devices: mps")
        if device != "mps":
            raise fail(f"devices lists mps but the trials run on {device}")
        return [Slot("mps")]
    if "cuda" in kinds and "cpu" in kinds:
        raise fail("devices mixes cuda and cpu slots; a study measures one kind of device")
    if "cuda" in kinds:
        fake = bool(os.environ.get("ORCHESTRATE_TEST_GPUS"))
        if device != "cuda" and not (fake and device == "cpu"):
            raise fail(f"devices lists GPUs but the trials run on {device}")
        gpus = list_gpus()
        if not gpus:
            raise fail("devices lists GPUs but nvidia-smi lists none on this machine")
        slots: list[Slot] = []
        for item in items:
            if item == "cuda":
                slots += [_gpu_slot(g) for g in gpus]
                continue
            index = int(item.split(":")[1])
            gpu = next((g for g in gpus if g.index == index), None)
            if gpu is None:
                raise fail(f"there is no GPU {item} here; visible: "
                           + ", ".join(f"cuda:{g.index} ({g.name})" for g in gpus))
            slots.append(_gpu_slot(gpu))
        uuids = [s.gpu.uuid for s in slots if s.gpu]
        if len(set(uuids)) != len(uuids):
            raise fail("a GPU is listed twice (one trial per GPU at a time)")
        return slots
    if device != "cpu":
        raise fail(f"devices lists CPU slots but the trials run on {device}")
    have = available_cores()
    slots, used = [], set()
    for item in items:
        if item == "cpu":
            if len(items) > 1:
                raise fail("'cpu' takes every core; give several CPU slots as core ranges, "
                           "e.g. cpu:0-3,cpu:4-7")
            return [Slot("cpu")]
        lo, _, hi = item.split(":")[1].partition("-")
        cores = frozenset(range(int(lo), int(hi or lo) + 1))
        missing = sorted(cores - have)
        if missing:
            raise fail(f"{item}: core(s) {_ranges(frozenset(missing))} are not available to this "
                       f"process (available: {_ranges(have)})")
        if cores & used:
            raise fail(f"{item} shares cores with another slot; each trial needs its own cores")
        used |= cores
        slots.append(Slot(item, {"OMP_NUM_THREADS": str(len(cores))}, cores))
    return slots


def _gpu_slot(gpu: Gpu) -> Slot:
    return Slot(f"cuda:{gpu.index}", {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                gpu=gpu)


def flag_error(flag: str) -> Any:
    """``fail`` for a value given on the command line."""
    return lambda rule: SpecError(rule, file=flag, field="devices")
