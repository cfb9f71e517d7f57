"""How much of the host's CPU other processes used during a trial's timed window (issue #41 item 3).

Pinning a slot's trials to cores of their own does not isolate them everywhere: on a 4 x H100
cloud host (a KVM guest), a launch-bound trial ran 0.80-0.83x as fast while the other slots'
cores were busy, with compiles or with plain busy loops alike (docs/benchmarks.md, "What slowed
it"). The trial reads the host's CPU ticks (``/proc/stat``'s ``cpu`` line) and its own CPU time at
both ends of its window; ``others_busy`` is the share of the host's CPU capacity that everything
but this process used meanwhile (0: the host was otherwise idle; hypervisor steal counts as
busy). Recorded as ``host_cpu_others``; None where there is no ``/proc/stat`` (macOS). The ticks
are read as the sweep's load readings read them (``machineload.cpu_ticks``); no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator.machineload import cpu_ticks


@dataclass(frozen=True)
class CpuSample:
    busy: int | None
    """The host's CPU ticks since boot not idle (``/proc/stat``: all but idle and iowait); None off Linux."""
    total: int | None
    """All its CPU ticks since boot."""
    own_s: float
    """This process's CPU seconds (every thread, user and system)."""


def read(stat: str = "/proc/stat") -> CpuSample:
    """One sample, now."""
    times = os.times()
    own = times.user + times.system
    ticks = cpu_ticks(stat)
    if ticks is None:
        return CpuSample(None, None, own)
    total = sum(ticks)
    return CpuSample(total - ticks[3] - ticks[4], total, own)  # all but idle and iowait


def others_busy(start: CpuSample, end: CpuSample, hz: float | None = None) -> float | None:
    """The share (0-1) of the host's CPU capacity that other processes used from ``start`` to
    ``end``; None where it cannot be told."""
    if start.busy is None or start.total is None or end.busy is None or end.total is None:
        return None
    span = end.total - start.total
    if span <= 0:
        return None
    hz = hz if hz is not None else os.sysconf("SC_CLK_TCK")
    others = end.busy - start.busy - (end.own_s - start.own_s) * hz
    return min(1.0, max(0.0, others / span))
