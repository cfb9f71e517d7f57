"""What the ``auto`` search knows before any trial: the prior effects on throughput, and every
configuration of a finite space encoded once for the surrogate (``surrogate.Space``).

The priors order the search; measurements decide its stop (``planner``): each effect has a
spread that the measurements overrule, calibrated on what the recorded landscapes show
(``bench/landscapes/``). Pure: no torch, no Optuna.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.search import surrogate as S
from orchestrator.keys import value_key

THROUGHPUT = ("samples_per_s", "tokens_per_s")
STEP_TIMES = ("step_time_ms_p50", "step_time_ms_p90")
LOG_DIMENSIONS = ("batch_size", "effective_batch_size", "grad_accum_steps", "seq_len", "num_workers")

# Prior effects on the natural log of throughput (samples or tokens per second): (mean, spread).
# Ordered dimensions: per doubling of the value. Categorical ones: per value, against 0.
PRIORS: dict[str, Any] = {
    # By device, what the recorded landscapes show (``bench/landscapes/``, log throughput per
    # doubling between neighbouring batches of one column): on CUDA medians 0.11-0.74, 10th to
    # 90th percentiles 0.03-0.94 (a launch-bound MLP nearly doubles per doubling, BERT-large
    # saturates); on the CPU medians 0.01-0.08, 10th to 90th -0.17 to 0.47. (Before, every device
    # had 0.10, spread 0.15: a CUDA sweep expected too little of a larger batch that checkpointing
    # or half precision makes fit, a CPU sweep too much of one.) No Mac landscape is recorded: MPS
    # gets a GPU's spread and a mean between the two.
    "batch_size": {"cuda": (0.3, 0.3), "mps": (0.2, 0.3), "cpu": (0.05, 0.15)},
    "effective_batch_size": (0.02, 0.10),
    "grad_accum_steps": (0.02, 0.05),
    "activation_checkpointing": {True: (-0.20, 0.15), False: (0.0, 0.15)},
    "compile": {True: (0.10, 0.30), False: (0.0, 0.30)},
    # By device: half precision pays on most GPU workloads, not on launch-bound ones. On CUDA the
    # spread is what the recorded landscapes show: half precision's median effect ranged from
    # -0.27 (a small BERT, a narrow MLP) to +1.56 (BERT-base). On CPUs with bfloat16 instructions
    # (or where the flags are unknown) the recorded Intel Xeon landscapes show +0.05 to +0.1, the
    # quiet AMD EPYC (avx512_bf16) +0.2 (bert_tiny_cpu_rlimit_r3_quiet). A spread wide enough for
    # a CPU without them costs every CPU sweep its stop (0.37x to 0.40x of the grid's time on
    # bert_tiny_cpu_rlimit, seeds 0-2): such a CPU gets ``EMULATED_BF16`` instead, from its flags
    # (``Planner``'s ``native_half``). No Mac landscape is recorded: MPS gets 0.5, between the two.
    "dtype": {
        "cuda": {"float32": (0.0, 0.6), "float16": (0.6, 0.6), "bfloat16": (0.6, 0.6)},
        "mps": {"float32": (0.0, 0.5), "float16": (0.2, 0.5), "bfloat16": (0.1, 0.5)},
        "cpu": {"float32": (0.0, 0.3), "float16": (-0.5, 0.3), "bfloat16": (0.0, 0.3)},
    },
}
SEVERAL_DEVICES = (0.2, 0.35)
"""The batch's effect where the space sweeps the device (covers both the CPU's and CUDA's)."""
EMULATED_BF16 = (-1.0, 0.8)
"""bfloat16 on a CPU without bfloat16 instructions (no avx512_bf16 or amx_bf16, or capped below
them with ``cpu_isa``): autocast emulates it. The tiny BERT here capped at AVX2 trained 7.3x slower
than float32 (-2.0, bert_tiny_cpu_avx2_r3), capped at AVX512_CORE_VNNI (a Cascade Lake's) 0.77x
(-0.26, two configurations)."""
CURVATURE = (-0.02, 0.04)
"""Throughput saturates as the batch grows (per-step overheads are paid once per step): the log of
throughput is concave in the log of the batch. Per doubling squared, about the middle of the list."""
SEQ_LEN_PRIOR = {"samples_per_s": (-0.5, 0.4), "tokens_per_s": (0.0, 0.3)}
UNKNOWN_ORDERED = (0.0, 0.15)
"""An ordered parameter nothing is known about: per unit of its range (scaled to [0, 1])."""
UNKNOWN_CATEGORICAL = (0.0, 0.2)
NOISE_FLOOR = {"cpu": 0.06, "mps": 0.03, "cuda": 0.01}
"""The least measurement noise assumed where no trial reported its spread (relative spread of one
process's throughput): two identical CPU processes differ by 6-18% on a small machine, GPU ones
by about 1%. Trials that report their spread (``throughput_ci95``) replace it: the model then
takes each measurement's own (``measured_noise``, ``pooled_noise``)."""
LEAST_NOISE = 0.002
"""A reported spread below this (a window of identical steps) counts as this: no measurement is exact."""


def measured_noise(metrics: dict[str, Any], metric: str, measurements: int = 1) -> float | None:
    """The noise of one measurement of a recorded objective value, as the standard deviation of its
    log: its ``throughput_ci95`` (``harness/spread``, over its ``measurements``) over 1.96, times
    the square root of their number, for a throughput or a step time; None where the trial reported
    none."""
    ci = metrics.get("throughput_ci95")
    if not isinstance(ci, (int, float)) or ci != ci or metric not in THROUGHPUT + STEP_TIMES:
        return None
    return max(LEAST_NOISE, float(ci) / 1.96 * math.sqrt(max(1, measurements)))


def pooled_noise(own: list[float | None], measurements: list[int], least: float = 0.0) -> list[float] | None:
    """Each recorded value's noise (standard deviation of its log) from every measurement's own
    (``measured_noise``; None: it reported none) and how many measurements made it: one window's
    spread is an estimate from five parts, so no measurement counts as quieter than the sweep's
    median one (a noisy machine is noisy for every trial), nor than ``least`` (the device's
    ``NOISE_FLOOR``: a steady window does not make two processes agree); over ``n`` measurements,
    that over ``sqrt(n)``. None where no trial reported a spread."""
    known = [u for u in own if u is not None]
    if not known:
        return None
    typical = max(least, float(np.median(known)))
    return [max(typical, u if u is not None else typical) / math.sqrt(max(1, n)) for u, n in zip(own, measurements)]


def values_of(configs: list[dict[str, Any]], name: str) -> tuple[Any, ...]:
    seen: dict[str, Any] = {}
    for c in configs:
        if name in c:
            seen.setdefault(value_key(name, c[name]), c[name])
    return tuple(seen.values())


def ordered(values: tuple[Any, ...]) -> bool:
    """Whether a parameter's values are numbers with an order (booleans are categories)."""
    return len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _prior(name: str, value: object, metric: str, device: str | None,
           native_half: frozenset[str] | None = None) -> tuple[float, float]:
    """(mean, spread) of one categorical value's effect; see ``PRIORS``. ``native_half``: on a
    CPU, the half precisions it has instructions for (None: not known)."""
    if device is None or metric not in THROUGHPUT:
        return UNKNOWN_CATEGORICAL
    if (name, value, device) == ("dtype", "bfloat16", "cpu") and native_half is not None \
            and "bfloat16" not in native_half:
        return EMULATED_BF16
    rule = PRIORS.get(name)
    if name == "dtype" and isinstance(rule, dict):
        rule = rule.get(device)
    if isinstance(rule, dict):
        return rule.get(value, UNKNOWN_CATEGORICAL)
    return UNKNOWN_CATEGORICAL


def _slope(name: str, metric: str, device: str | None, log: bool) -> tuple[float, float]:
    if device is None or metric not in THROUGHPUT:
        return UNKNOWN_ORDERED
    if name == "seq_len":
        return SEQ_LEN_PRIOR.get(metric, UNKNOWN_ORDERED)
    rule = PRIORS.get(name)
    if name == "batch_size":  # by device; several devices in one space: one that covers them
        rule = rule.get(device, SEVERAL_DEVICES)  # type: ignore[union-attr]  # PRIORS has batch_size's rules by device
    return rule if isinstance(rule, tuple) and log else UNKNOWN_ORDERED


def encode(configs: list[dict[str, Any]], names: list[str], values: dict[str, tuple], metric: str,
           device: str | None, scaling: str | None,
           native_half: frozenset[str] | None = None) -> tuple[S.Space, int]:
    """Features, priors and kernel coordinates of every configuration (see ``surrogate``). A
    parameter absent from a configuration (another device's knob) is a value of its own."""
    n = len(configs)
    columns, means, sds = [np.ones(n)], [0.0], [1.0]  # the level, centred on the measurements
    z_columns, c_columns = [], []
    scaling_feature = 0
    for name in names:
        vals = values[name]
        present = np.array([name in c for c in configs])
        if ordered(vals):
            nums = [float(v) for v in vals]
            log = min(nums) > 0 and (name in LOG_DIMENSIONS or max(nums) / min(nums) >= 8)
            raw = np.array([float(c[name]) if name in c else min(nums) for c in configs])
            x = np.log2(raw) if log else raw
            lo, hi = (math.log2(min(nums)), math.log2(max(nums))) if log else (min(nums), max(nums))
            z_columns.append((x - lo) / (hi - lo))
            mean, sd = _slope(name, metric, device, log)
            if name == scaling:
                scaling_feature = len(columns)
            columns.append(np.where(present, x - lo if log else (x - lo) / (hi - lo), 0.0))
            means.append(mean)
            sds.append(sd)
            if name == scaling and log and device is not None and metric in THROUGHPUT:
                columns.append(np.where(present, (x - (lo + hi) / 2) ** 2, 0.0))
                means.append(CURVATURE[0])
                sds.append(CURVATURE[1])
            if not present.all():
                c_columns.append(present.astype(int))
        else:
            codes = {value_key(name, v): j for j, v in enumerate(vals)}
            code = np.array([codes[value_key(name, c[name])] if name in c else len(vals) for c in configs])
            c_columns.append(code)
            for j, v in enumerate(vals):
                columns.append((code == j).astype(float))
                mean, sd = _prior(name, v, metric, device, native_half)
                means.append(mean)
                sds.append(sd)
    H = np.column_stack(columns)
    Z = np.column_stack(z_columns) if z_columns else np.zeros((n, 0))
    C = np.column_stack(c_columns) if c_columns else np.zeros((n, 0), dtype=int)
    return S.Space(H, np.array(means), np.array(sds), Z, C), scaling_feature
