"""System swap activity around a trial's phases, and the rule that calls a trial ``swapped``.

On Apple Silicon the GPU and the CPU share one memory, and MPS's default cap (1.7 x the
recommended working set) lies above physical RAM on most Macs: a batch that is too large does not
raise an out-of-memory error, it swaps and runs several times slower. The trial reads the system's
cumulative swap counters at four points (its start, the end of warm-up, the start and the end of
the timed window) and this module turns them into figures and a verdict.

Counters, read where the OS keeps them (no psutil: on macOS its ``sin``/``sout`` are page-ins and
page-outs of any page, file-backed ones included, not swap; and it is not a dependency):
- Linux: ``/proc/vmstat`` ``pswpin``/``pswpout`` (pages) and ``/proc/meminfo`` ``SwapTotal``/``SwapFree``;
- macOS: ``vm_stat`` ``Swapins:``/``Swapouts:`` (pages of the size its header names) and
  ``sysctl vm.swapusage`` (total, used).
Both are system-wide: a trial is judged by what happened while it ran (deltas), so swap that other
programs caused before it started (``swap_used_before_gib``) is never blamed on it.

No torch here: the orchestrator's report applies the same rule to recorded figures.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

from orchestrator import metrics as M

GIB = 1024 ** 3
SWAP_THRESHOLD_GIB = 1 / 16
"""64 MiB moved to or from swap during the timed window makes a trial ``swapped``. Without memory
pressure these counters do not move at all (Linux swaps only under reclaim; macOS compresses first
and swaps compressor segments only when the compressor is full), so anything at all is pressure;
64 MiB leaves room for a background daemon's odd segment, and costs an SSD some 30 ms: below the
window's own noise. A batch that really does not fit is expected to move far more: its working set
is paged through on every step (not measured here: no Mac and no swap on this project's machines)."""


@dataclass(frozen=True)
class SwapSample:
    """One reading of the system's swap counters; None where this OS does not tell."""

    out_bytes: int | None
    """Swapped out since boot."""
    in_bytes: int | None
    """Swapped in since boot."""
    used_bytes: int | None
    """Swap in use now."""
    total_bytes: int | None
    """Swap configured now (0 on a machine without swap: a real zero, not missing)."""


# -- parsers of each OS's own text (pure, tested with recorded output) ------------------------------

def parse_proc_vmstat(text: str, page_size: int) -> tuple[int | None, int | None]:
    """(bytes swapped out, bytes swapped in) since boot, from ``/proc/vmstat``."""
    values = dict(line.split(None, 1) for line in text.splitlines() if line.strip() and " " in line)
    out, inn = values.get("pswpout"), values.get("pswpin")
    return (int(out) * page_size if out is not None else None,
            int(inn) * page_size if inn is not None else None)


def parse_meminfo(text: str) -> tuple[int | None, int | None]:
    """(swap in use, swap configured) in bytes, from ``/proc/meminfo`` (which counts in kB = KiB)."""
    kib = {}
    for line in text.splitlines():
        m = re.match(r"(Swap(?:Total|Free)):\s+(\d+)\s*kB", line)
        if m:
            kib[m.group(1)] = int(m.group(2)) * 1024
    total, free = kib.get("SwapTotal"), kib.get("SwapFree")
    return (total - free if total is not None and free is not None else None), total


def parse_vm_stat(text: str) -> tuple[int | None, int | None]:
    """(bytes swapped out, bytes swapped in) since boot, from macOS ``vm_stat``: counts of pages,
    whose size is in the header ("page size of 16384 bytes" on Apple Silicon, 4096 on Intel)."""
    size = re.search(r"page size of (\d+) bytes", text)
    page = int(size.group(1)) if size else 4096

    def pages(name: str) -> int | None:
        m = re.search(rf"^{name}:\s+(\d+)\.?\s*$", text, re.MULTILINE)
        return int(m.group(1)) * page if m else None

    return pages("Swapouts"), pages("Swapins")


_SIZE = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def parse_swapusage(text: str) -> tuple[int | None, int | None]:
    """(swap in use, swap configured) in bytes, from macOS ``sysctl vm.swapusage``:
    ``vm.swapusage: total = 2048.00M  used = 554.62M  free = 1493.38M  (encrypted)``."""
    found = {k: float(v) * _SIZE[u] for k, v, u in re.findall(r"(total|used) = ([\d.]+)([KMGT])", text)}
    used, total = found.get("used"), found.get("total")
    return (int(used) if used is not None else None), (int(total) if total is not None else None)


# -- reading the real counters --------------------------------------------------------------------

def read_swap() -> SwapSample:
    """The system's swap counters now. A few microseconds on Linux (two /proc reads); two short
    commands on macOS (about 10 ms). Never raises: an unreadable counter is None."""
    if sys.platform.startswith("linux"):
        return _read_linux()
    if sys.platform == "darwin":
        return _read_macos()
    return SwapSample(None, None, None, None)


def _read_linux() -> SwapSample:
    out = inn = used = total = None
    try:
        with open("/proc/vmstat") as f:
            out, inn = parse_proc_vmstat(f.read(), os.sysconf("SC_PAGE_SIZE"))
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            used, total = parse_meminfo(f.read())
    except OSError:
        pass
    return SwapSample(out, inn, used, total)


def _read_macos() -> SwapSample:
    out, inn = parse_vm_stat(_command(["vm_stat"]))
    used, total = parse_swapusage(_command(["sysctl", "vm.swapusage"]))
    return SwapSample(out, inn, used, total)


def _command(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


# -- figures and the verdict (pure) ---------------------------------------------------------------

def _delta(a: int | None, b: int | None) -> float | None:
    """GiB moved between two readings of a cumulative counter; None where either is missing. A
    counter that went down (a reboot cannot happen mid-trial; a wrapped 32-bit counter can) reads 0."""
    if a is None or b is None:
        return None
    return max(b - a, 0) / GIB


def swap_figures(start: SwapSample, warmup_end: SwapSample, window_start: SwapSample,
                 window_end: SwapSample) -> dict[str, float | None]:
    """The per-trial swap metrics from the four readings. Warm-up runs from the trial's start
    (model build included) to the end of warm-up; the window from its first to its last
    synchronize, so time spent waiting between the two is nobody's."""
    return {
        M.SWAP_OUT_GIB: _delta(window_start.out_bytes, window_end.out_bytes),
        M.SWAP_IN_GIB: _delta(window_start.in_bytes, window_end.in_bytes),
        M.WARMUP_SWAP_OUT_GIB: _delta(start.out_bytes, warmup_end.out_bytes),
        M.WARMUP_SWAP_IN_GIB: _delta(start.in_bytes, warmup_end.in_bytes),
        M.SWAP_USED_GIB: window_end.used_bytes / GIB if window_end.used_bytes is not None else None,
        M.SWAP_USED_BEFORE_GIB: start.used_bytes / GIB if start.used_bytes is not None else None,
    }


def swapped(figures: dict[str, float | None], threshold_gib: float = SWAP_THRESHOLD_GIB) -> bool:
    """Whether the trial swapped during its timed window:
    - at least ``threshold_gib`` swapped out during the window (memory pressure while it ran); or
    - at least ``threshold_gib`` swapped in during the window after at least as much was swapped out
      during its own warm-up (pages the trial pushed out, read back while it is measured).
    Swap-ins alone are not blamed: they can be another program reading back what was swapped out
    before the trial started. Missing counters mean no verdict (False)."""
    out, inn = figures.get(M.SWAP_OUT_GIB), figures.get(M.SWAP_IN_GIB)
    warm_out = figures.get(M.WARMUP_SWAP_OUT_GIB)
    if out is not None and out >= threshold_gib:
        return True
    return inn is not None and warm_out is not None and inn >= threshold_gib and warm_out >= threshold_gib


def describe(figures: dict[str, float | None], samples_per_s: float | None = None) -> str:
    """``fits but swaps: ...`` with the figures, the window's first (a sweep's progress line keeps
    the first 120 characters): what the report, MLflow's ``detail`` tag and the log show."""
    def gib(key: str) -> str:
        v = figures.get(key)
        return "?" if v is None else f"{v:.2f}"

    speed = f", at {samples_per_s:,.1f} samples/s" if samples_per_s is not None else ""
    return (f"fits but swaps: {gib(M.SWAP_OUT_GIB)} GiB swapped out, {gib(M.SWAP_IN_GIB)} GiB in during the timed "
            f"window{speed} (warm-up: {gib(M.WARMUP_SWAP_OUT_GIB)} out, {gib(M.WARMUP_SWAP_IN_GIB)} in; swap in use "
            f"{gib(M.SWAP_USED_GIB)} GiB at the end, {gib(M.SWAP_USED_BEFORE_GIB)} GiB before the trial)")
