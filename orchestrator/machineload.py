"""How busy the machine was before and during a sweep: what explains a noisy measurement.

Two readings, both cheap and both without a device: the 1-minute load average
(``os.getloadavg``: runnable processes, ours included, averaged over the last minute) and, on
Linux, the CPU time the hypervisor gave to other machines (the ``steal`` column of ``/proc/stat``).
The sweep takes one reading before it starts anything (the load then is other people's work) and
one after each trial's result (the load then includes the trials: about as many as a CPU trial
has threads, one for a GPU trial), and the study keeps a summary per run of the command
(``store/studyrecord``'s ``load``), which ``orchestrate report`` and the noise line print.
Pure apart from the two readings; no torch.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

RUNS_KEPT = 10
"""Per-run summaries a study keeps (a resumed study has one per run of the command)."""


@dataclass(frozen=True)
class Reading:
    at: float
    """Wall clock (``time.time``)."""
    load1: float | None
    """1-minute load average; None where the platform has none."""
    steal: int | None
    """CPU ticks stolen by the hypervisor since boot (Linux), None elsewhere."""
    total: int | None
    """All CPU ticks since boot (Linux), None elsewhere."""


def read(stat: str = "/proc/stat") -> Reading:
    """One reading, now."""
    try:
        load1: float | None = os.getloadavg()[0]
    except (OSError, AttributeError):
        load1 = None
    ticks = cpu_ticks(stat)
    steal, total = (None, None) if ticks is None else (ticks[7], sum(ticks))
    return Reading(time.time(), load1, steal, total)


def cpu_ticks(stat: str = "/proc/stat") -> list[int] | None:
    """The host's CPU ticks since boot, all CPUs together: user, nice, system, idle, iowait, irq,
    softirq, steal (guest time is inside user); None where there is no ``/proc/stat``."""
    try:
        with open(stat) as f:
            fields = f.readline().split()
        if not fields or fields[0] != "cpu":
            return None
        ticks = [int(x) for x in fields[1:9]]
    except (OSError, ValueError):
        return None
    return ticks + [0] * (8 - len(ticks))  # an old kernel's line may stop before steal


@dataclass
class LoadLog:
    """One run of the sweep's readings: ``before`` anything started, then one per trial."""

    before: Reading
    during: list[Reading] = field(default_factory=list)

    def note(self) -> None:
        self.during.append(read())

    def summary(self) -> dict[str, Any]:
        """What the study keeps of this run: cores, the load before, the load during (least,
        median, most over the readings) and the share of CPU time stolen over the run."""
        loads = [r.load1 for r in self.during if r.load1 is not None]
        out: dict[str, Any] = {"at": round(self.before.at, 1), "cores": os.cpu_count(),
                               "before": _round(self.before.load1), "readings": len(self.during)}
        if loads:
            out["during"] = {"min": _round(min(loads)), "median": _round(statistics.median(loads)),
                             "max": _round(max(loads))}
        last = self.during[-1] if self.during else None
        if last is not None and None not in (last.steal, last.total, self.before.steal, self.before.total):
            ticks = last.total - self.before.total  # type: ignore[operator]  # none is None (above)
            if ticks > 0:
                out["steal"] = round((last.steal - self.before.steal) / ticks, 4)  # type: ignore[operator]  # none is None (above)
        return out


def kept(previous: object, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The study's list of run summaries with ``summary`` added (the last ``RUNS_KEPT``)."""
    runs = [r for r in previous if isinstance(r, dict)] if isinstance(previous, list) else []
    return (runs + [summary])[-RUNS_KEPT:]


def describe(summary: dict[str, Any]) -> str:
    """One run's load in words: ``load 1.3 before the sweep, 2.9-15.0 (median 6.8) during it, on 2 cores``."""
    parts = []
    if summary.get("before") is not None:
        parts.append(f"load {summary['before']:.1f} before the sweep")
    during = summary.get("during")
    if during:
        lo, hi = f"{during['min']:.1f}", f"{during['max']:.1f}"
        parts.append(f"{lo} during it" if lo == hi else f"{lo}-{hi} (median {during['median']:.1f}) during it")
    text = ", ".join(parts) or "load not readable here"
    if summary.get("cores"):
        text += f", on {summary['cores']} cores"
    if (summary.get("steal") or 0) >= 0.005:
        text += f"; {summary['steal']:.0%} of the CPU time stolen by the hypervisor"
    return text


def busy(summary: dict[str, Any]) -> bool:
    """Whether others' work alone (the load before the sweep) kept every core busy."""
    before, cores = summary.get("before"), summary.get("cores")
    return before is not None and cores is not None and bool(cores) and before >= 0.5 * cores


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
