"""The summary's one line when half precision trained much slower than float32 on a CPU, with the
likely reason read from the CPU's flags: a result that differs from a GPU's (or another CPU's)
ranking should say why. Pure functions over the study's trials; the flags come from
``/proc/cpuinfo`` (Linux, ``machine.cpu_flags``) and are None elsewhere."""

from __future__ import annotations

from typing import Any

from orchestrator import metrics as M
from orchestrator.machine import HALF_FLAGS, ISA_KEEPS
from orchestrator.outcome import Status
from orchestrator.report.compare import ratio_median
from orchestrator.store.record import TrialRecord

MUCH_SLOWER = 2.0
"""Half precision is "much slower" when float32's throughput is at least this many times its own
(the median over pairs of configurations equal but for ``dtype``)."""
NATIVE = {half: names[:2] for half, names in HALF_FLAGS.items()}
"""The x86 flags of native instructions for each half precision: vector, then matrix (AMX)."""
ARM = {half: names[2] for half, names in HALF_FLAGS.items()}
"""Arm's flag (``Features`` in /proc/cpuinfo) of each half precision's instructions."""
ARM_BASE = "asimd"
"""A flag every 64-bit Arm CPU lists (Advanced SIMD): the flags are an Arm CPU's."""


def slowdowns(trials: list[Any]) -> dict[str, list[float]]:
    """For each half precision measured on a CPU: float32's samples/s over its own, one ratio per
    pair of ``ok`` trials whose other parameters are equal."""
    by_rest: dict[tuple, dict[str, float]] = {}
    for t in trials:
        rec = TrialRecord.of(t)
        rate = rec.metrics.get(M.SAMPLES_PER_S)
        if rec.status != Status.OK or not rate or "dtype" not in t.params:
            continue
        if not str(rec.slot if rec.slot is not None else t.params.get("device", "")).startswith("cpu"):
            continue
        rest = tuple(sorted((k, str(v)) for k, v in t.params.items() if k != "dtype"))
        by_rest.setdefault(rest, {})[t.params["dtype"]] = rate
    out: dict[str, list[float]] = {}
    for rates in by_rest.values():
        for half in NATIVE:
            if half in rates and "float32" in rates:
                out.setdefault(half, []).append(rates["float32"] / rates[half])
    return out


def half_precision_note(trials: list[Any], flags: set[str] | None, cpu_isa: str | None = None) -> str | None:
    """One line when a half precision ran at least ``MUCH_SLOWER`` times slower than float32 on
    the CPU (the slowest such precision), with the likely reason; None otherwise. Trials under
    different ``cpu_isa`` caps are compared within each cap, and the slowest cap is named;
    ``cpu_isa``: the spec's fixed cap, for trials that do not sweep it."""
    by_cap: dict[str | None, list[Any]] = {}
    for t in trials:
        by_cap.setdefault(str(t.params["cpu_isa"]) if "cpu_isa" in t.params else cpu_isa, []).append(t)
    found = {(cap, half): (ratio_median(r) or 0.0, len(r)) for cap, group in by_cap.items()
             for half, r in slowdowns(group).items() if 2 * sum(x > 1 for x in r) > len(r)}  # most pairs agree
    slow = {k: v for k, v in found.items() if v[0] >= MUCH_SLOWER}
    if not slow:
        return None
    (cap, half), (x, n) = max(slow.items(), key=lambda item: item[1][0])
    vector, matrix = NATIVE[half]
    # the cap is the reason where it took away what the CPU has (a tour: float16 as slow under a cap
    # on a CPU without native float16 was blamed on the cap)
    has = flags is None or bool({vector, matrix, ARM[half]} & flags)
    if cap is not None and cap not in ISA_KEEPS[half] and has:
        why = (f"the trials capped PyTorch's CPU kernels at {cap} (cpu_isa), which has no native {half} "
               "instructions, so autocast emulates it")
    elif flags is None:
        why = f"this CPU may have no native {half} instructions (its flags could not be read), so autocast emulates it"
    elif ARM[half] in flags:
        why = (f"this CPU has Arm's {ARM[half]} instructions, so the likely cause is a model too small for them "
               "to pay for autocast's conversions at every op")
    elif ARM_BASE in flags:
        why = (f"this Arm CPU has no native {half} instructions (no {ARM[half]} in its flags), "
               "so autocast emulates it")
    elif matrix in flags:
        why = (f"this CPU has {matrix}, so the likely cause is a model too small for its matrix units to pay "
               "for autocast's conversions at every op")
    elif vector in flags:
        why = (f"this CPU has {vector} but no {matrix} (AMX): {half} matrix products gain little over float32 "
               "there, while autocast converts at every op")
    else:
        why = (f"this CPU has no native {half} instructions (neither {vector} nor {matrix} in its flags), "
               "so autocast emulates it")
    pairs = f"median of {n} pairs of configurations equal but for dtype" if n > 1 else "one pair of configurations"
    where = "this CPU" if cap is None else f"this CPU with cpu_isa {cap}"
    return (f"Note: {half} trained {x:.1f}x slower than float32 on {where} ({pairs}): {why}. "
            "A GPU, or a CPU with native support, can rank them the other way.")
