"""Device slots: where trials run, one at a time on each (a measurement is only valid alone on its
device). Parent side: never imports torch; GPUs are listed with ``nvidia-smi``.

- ``cuda:N`` / ``cuda`` / ``auto`` on CUDA: one slot per GPU; the trial's process gets
  ``CUDA_VISIBLE_DEVICES=<the GPU's UUID>`` (so the experiment sees ``cuda:0``, and no index
  ordering can point it at another GPU) and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. With several GPU
  slots, each slot's trials are also pinned to CPU cores of their own (``gpu_cores``): a trial
  whose step is bound by the CPU issuing kernels (small batches) otherwise loses up to 30% of its
  throughput while another GPU's trial builds its model on every core.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator.errors import SpecError
from orchestrator.machine import Gpu, list_gpus


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


def available_cores() -> frozenset[int]:
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def _parse_list(text: str) -> frozenset[int]:
    """A kernel CPU list (``0-3,8,10-11``)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def _read_list(path: Path) -> frozenset[int] | None:
    try:
        return _parse_list(path.read_text())
    except (OSError, ValueError):
        return None


def gpu_cores(gpus: list[Gpu], have: frozenset[int], sys_root: Path = Path("/sys")) -> list[frozenset[int]] | None:
    """Disjoint CPU cores for each GPU's trials, as many for each GPU that shares a NUMA node:
    the cores local to its GPU where Linux says which they are (``local_cpulist`` of its PCI
    device), whole physical cores (hyperthread siblings stay together), the ones left over for the
    orchestrator. None (no pinning) when there are fewer physical cores than GPUs."""
    units: dict[int, frozenset[int]] = {}  # physical core, by its lowest CPU -> its CPUs in `have`
    for cpu in sorted(have):
        siblings = _read_list(sys_root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        unit = (siblings or frozenset({cpu})) & have or frozenset({cpu})
        units.setdefault(min(unit), unit)
    every = frozenset(units)
    local = []
    for g in gpus:
        bus = g.pci_bus_id.lower()
        bus = bus[4:] if len(bus) == 16 else bus  # nvidia-smi's 8-digit domain; sysfs has 4
        cpus = _read_list(sys_root / f"bus/pci/devices/{bus}/local_cpulist") if bus else None
        mine = frozenset(u for u, c in units.items() if cpus and c <= cpus)
        local.append(mine or every)
    if any(a != b and a & b for a in local for b in local):
        local = [every] * len(gpus)  # nodes that overlap: no locality to keep
    out: list[frozenset[int] | None] = [None] * len(gpus)
    for node in set(local):
        members = [i for i, mine in enumerate(local) if mine == node]
        each = len(node) // len(members)
        if each == 0:
            return None
        ordered = sorted(node)
        for k, i in enumerate(members):
            out[i] = frozenset().union(*(units[u] for u in ordered[k * each:(k + 1) * each]))
    return out  # type: ignore[return-value]  # every member was given its cores: no None left


def _ranges(cores: frozenset[int]) -> str:
    ordered, out = sorted(cores), []
    start = prev = ordered[0]
    for c in ordered[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if c is not None:
            start = prev = c
    return ",".join(out)


def resolve_slots(items: tuple[str, ...] | None, device: str, fail: Callable[[str], Exception]) -> list[Slot]:
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
                return _gpu_slots(gpus)
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
        picked: list[Gpu] = []
        for item in items:
            if item == "cuda":
                picked += gpus
                continue
            index = int(item.split(":")[1])
            gpu = next((g for g in gpus if g.index == index), None)
            if gpu is None:
                raise fail(f"there is no GPU {item} here; visible: "
                           + ", ".join(f"cuda:{g.index} ({g.name})" for g in gpus))
            picked.append(gpu)
        uuids = [g.uuid for g in picked]
        if len(set(uuids)) != len(uuids):
            raise fail("a GPU is listed twice (one trial per GPU at a time)")
        return _gpu_slots(picked)
    if device != "cpu":
        raise fail(f"devices lists CPU slots but the trials run on {device}")
    have = available_cores()
    slots: list[Slot] = []
    used: set[int] = set()
    for item in items:
        if item == "cpu":
            if len(items) > 1:
                raise fail("'cpu' takes every core; give several CPU slots as core ranges, "
                           "e.g. cpu:0-3,cpu:4-7")
            return [Slot("cpu")]
        lo, _, hi = item.split(":")[1].partition("-")
        first, last = int(lo), int(hi or lo)
        if last > max(have):  # said without building the range: cpu:0-99999999999 is no set to make
            beyond = range(max(first, max(have) + 1), last + 1)
            named = str(beyond.start) if len(beyond) == 1 else f"{beyond.start}-{beyond.stop - 1}"
            raise fail(f"{item}: core(s) {named} are not available to this process (available: {_ranges(have)})")
        cores = frozenset(range(first, last + 1))
        missing = sorted(cores - have)
        if missing:
            raise fail(f"{item}: core(s) {_ranges(frozenset(missing))} are not available to this "
                       f"process (available: {_ranges(have)})")
        if cores & used:
            raise fail(f"{item} shares cores with another slot; each trial needs its own cores")
        used |= cores
        slots.append(Slot(item, {"OMP_NUM_THREADS": str(len(cores))}, cores))
    return slots


def _gpu_slots(gpus: list[Gpu]) -> list[Slot]:
    """One slot per GPU; with several, each pinned to its own cores (``gpu_cores``)."""
    cores = gpu_cores(gpus, available_cores()) if len(gpus) > 1 else None
    slots = []
    for i, g in enumerate(gpus):
        env = {"CUDA_VISIBLE_DEVICES": g.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if cores:
            env["OMP_NUM_THREADS"] = str(len(cores[i]))
        slots.append(Slot(f"cuda:{g.index}", env, cores[i] if cores else None, gpu=g))
    return slots


def pinning_line(slots: list[Slot]) -> str | None:
    """What the start of a sweep says about pinned slots, or None where nothing is pinned."""
    if len(slots) < 2 or slots[0].cores is None:
        return None
    if slots[0].gpu is None:
        return ("  CPU slots: each trial pinned to its own cores (" + ", ".join(s.name for s in slots)
                + "); figures are per slot, not per machine")
    return ("  each GPU's trials pinned to CPU cores of their own (" + ", ".join(
        f"{s.name}: {_ranges(s.cores)}" for s in slots if s.cores) + ")")


def flag_error(flag: str) -> Callable[[str], SpecError]:
    """``fail`` for a value given on the command line."""
    return lambda rule: SpecError(rule, file=flag, field="devices")
