"""The measured training loop: one trial's warm-up and timed window, with every memory knob.

Reads top to bottom, a function per phase (``_measure`` calls them in order): ``set_up``
(initialise the device -> set limits -> build the workload -> apply knobs -> optimizer),
``warm_up``, ``timed_window`` (synchronized at both ends) and ``figures``, marking each point in
the result's timeline (``harness/marks.py``). Raises on failure; ``child.run_config`` turns that
into a status.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
import statistics
import time
from dataclasses import dataclass
from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable, cast

import torch

from orchestrator.spec import knobs
from orchestrator import metrics as M
from orchestrator.harness import backend, compiled, fallback, hostcpu, spread, swap
from orchestrator.harness.window import StepTimes, closes
from orchestrator.harness import marks as MK
from orchestrator.protocol import TrialConfig, TrialSteps
from orchestrator.harness.workload import Workload

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Progress:
    """Where the trial is, so a failure can say at which phase and step it happened, and when
    (wall clock) it reached each point: ``marks`` (named in ``harness/marks.py``), written into
    the result's ``timeline`` and read by ``bench/startup.py`` and ``bench/overhead.py``."""

    def __init__(self, before_window: Callable[[], None] | None = None,
                 after_window: Callable[[], None] | None = None) -> None:
        self.phase, self.step = "setup", 0
        self.marks: dict[str, float] = {}
        self.before_window = before_window or (lambda: None)
        """Called after the warm-up's final synchronize, right before the timed window: the
        launcher holds the window here until this device's pre-started interpreter is idle."""
        self.after_window = after_window or (lambda: None)
        """Called once the timed window's figures are read (from the device, and the swap after
        it): the launcher may prepare the slot's next process while this one writes its result
        and exits."""

    def mark(self, name: str) -> float:
        """Record the wall clock now as mark ``name``; return ``time.perf_counter()`` at the same
        moment, for the durations the trial reports."""
        self.marks[name] = time.time()
        return time.perf_counter()


def apply_limits(params: dict[str, Any], device: str, applied: dict[str, Any]) -> None:
    """Process-wide limits, before the model exists."""
    if "memory_fraction" in params and device in ("cuda", "mps"):
        backend.set_memory_fraction(device, params["memory_fraction"])
        applied["memory_fraction"] = params["memory_fraction"]
    if "cpu_memory_limit_gib" in params and device == "cpu":
        backend.limit_cpu_memory(params["cpu_memory_limit_gib"])
        applied["cpu_memory_limit_gib"] = params["cpu_memory_limit_gib"]
    if "cpu_isa" in params and device == "cpu":  # set in the environment (knobs.trial_env); ATen's answer
        applied["cpu_isa"] = f"{params['cpu_isa']} (ATen kernels: {torch.backends.cpu.get_cpu_capability()})"


def wrap_checkpointing(blocks: Iterable[torch.nn.Module]) -> int:
    """Recompute each block's activations in backward (non-reentrant, as torch recommends)."""
    from torch.utils.checkpoint import checkpoint

    n = 0
    for block in blocks:
        inner = block.forward

        @functools.wraps(inner)
        def forward(*args: Any, _inner: Callable = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        block.forward = forward
        n += 1
    return n


def enable_checkpointing(workload: Workload) -> bool:
    """Activation checkpointing by the experiment's own switch where it has one, else by wrapping
    its blocks; False when it has neither."""
    if workload.enable_checkpointing is not None:
        workload.enable_checkpointing()
        return True
    return wrap_checkpointing(workload.blocks) > 0


def make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float, device: str) -> tuple[torch.optim.Optimizer, str]:
    """Return the optimizer and the implementation actually used."""
    params = list(params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9), "sgd"
    if name in ("adamw", "adamw_fused"):
        try:
            return torch.optim.AdamW(params, lr=lr, fused=True), "adamw_fused"
        except (RuntimeError, ValueError):
            if name == "adamw_fused":
                raise
    if name == "adamw_forloop":
        return torch.optim.AdamW(params, lr=lr, foreach=False, fused=False), "adamw_forloop"
    return torch.optim.AdamW(params, lr=lr, foreach=True), "adamw_foreach"


def accumulate(model: torch.nn.Module, loss_fn: Callable, batches: Iterable[object], k: int,
               autocast: AbstractContextManager[object], scaler: torch.amp.GradScaler | None) -> torch.Tensor:
    """Forward and backward over ``k`` micro-batches, each loss scaled by 1/k, so the summed
    gradient equals that of one batch k times larger. Returns the mean loss, on the device."""
    total = None
    for batch in batches:
        with autocast:
            loss = loss_fn(model, batch)
        if loss.dim() != 0:  # shape metadata, no sync: [1] at batch 1 passed backward() and the smoke step
            raise ValueError(f"the loss function returned a tensor of shape {list(loss.shape)}, not a scalar: "
                             "reduce it over the batch (.mean() or .sum())")
        total = loss.detach().float() if total is None else total + loss.detach().float()
        scaled = loss / k
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
    return cast(torch.Tensor, total) / k  # k >= 1 batches: a tensor


def run(config: TrialConfig, progress: Progress) -> dict[str, Any]:
    """Run one trial; return its metrics and what was applied. Raises on any failure.

    A trial that fitted but swapped during its timed window (``swap.swapped``) also returns
    ``status: "swapped"`` and a ``detail`` ("fits but swaps: ..."), its metrics still present, unless
    the config says ``allow_swap``. Ops that fell back from MPS to the CPU are listed in
    ``info["mps_fallback_ops"]``."""
    with fallback.FallbackLog() as fell_back:
        return _measure(config, progress, fell_back)


def _measure(config: TrialConfig, progress: Progress, fell_back: fallback.FallbackLog) -> dict[str, Any]:
    """The trial, phase by phase: each phase a function below, in the order they run."""
    trial = set_up(config, progress)
    warm = warm_up(trial, config.trial.warmup_steps, progress)
    window = timed_window(trial, config.trial, progress)
    out = figures(trial, warm, window, fell_back, config.allow_swap)
    progress.after_window()  # read from the device, swap included: the next process may start beside it
    return out


@dataclass
class Trial:
    """What the set-up made: the workload on its device, with the knobs applied, and its step."""

    device: str
    params: dict[str, Any]
    workload: Workload
    step: Callable[[], torch.Tensor]
    """One optimizer step over ``grad_accum_steps`` micro-batches; the mean loss, on the device."""
    samples_per_step: int
    empty_every: int
    applied: dict[str, Any]
    not_applied: dict[str, str]
    started: float
    """``perf_counter`` at the trial's start (``startup_s`` counts from here)."""
    swap_start: swap.SwapSample
    """Swap before anything of the trial's: swap already used is not its doing."""


@dataclass
class Warm:
    """What the warm-up left: its first loss and the start-up's length."""

    loss_first: float
    startup_s: float
    swap_warmup: swap.SwapSample


@dataclass
class Window:
    """What the timed window measured, read after its closing synchronize."""

    steps: int
    elapsed: float
    marks: list[Any]
    """A step-end mark each (CUDA: events; elsewhere: ``perf_counter``), the window's start first."""
    losses: list[torch.Tensor]
    driver_peak: int
    swap_window: swap.SwapSample
    swap_end: swap.SwapSample
    cpu: tuple[hostcpu.CpuSample, hostcpu.CpuSample]
    """The host's CPU at the window's two ends (``host_cpu_others``)."""


def set_up(config: TrialConfig, progress: Progress) -> Trial:
    """The device, the limits, the workload, the knobs, the optimizer: everything before step 1."""
    started = progress.mark(MK.DEVICE)  # the trial's start: startup_s counts from here
    params = dict(config.params)
    swap_start = swap.read_swap()  # before anything of the trial's: swap already used is not its doing
    device = backend.resolve(params.get("device", "auto"))
    applied: dict[str, Any] = {"device": device}
    not_applied = dict(config.not_applied)
    for name in params:
        if not knobs.applies(name, device) and name not in not_applied:
            not_applied[name] = f"read on {'/'.join(sorted(knobs.KNOBS[name].devices))} only; ignored on {device}"

    backend.init_device(device)  # from here the device is touched (allocators read their settings)
    progress.mark(MK.DEVICE_READY)
    apply_limits(params, device, applied)
    progress.mark(MK.LIMITS_APPLIED)
    seed = int(params.get("seed", 0))
    torch.manual_seed(seed)

    progress.phase = "build"
    module = importlib.import_module(config.experiment)
    workload: Workload = module.build(params, torch.device(device))
    progress.mark(MK.BUILT)
    model = workload.model
    model.train()

    if params.get("activation_checkpointing"):
        applied["activation_checkpointing"] = enable_checkpointing(workload)
        if not applied["activation_checkpointing"]:
            not_applied["activation_checkpointing"] = "the experiment lists no blocks to checkpoint"
    if params.get("compile"):
        compiled.use_cache(config.compile_cache)
        model = cast(torch.nn.Module, torch.compile(model))  # a module compiles to a module (OptimizedModule)
        applied["compile"] = True
        applied["compile_cache"] = os.environ.get(compiled.CACHE_ENV)  # where Inductor's caches are (None: torch's default)
    progress.mark(MK.WRAPPED)

    lr = float(params.get("lr", workload.lr))
    optimizer, impl = make_optimizer(params.get("optimizer", "adamw"), workload.model.parameters(), lr, device)
    applied["optimizer"] = impl
    progress.mark(MK.OPTIMIZER_READY)

    dtype_name = params.get("dtype", "float32")
    amp_dtype = DTYPES[dtype_name]
    autocast = (torch.autocast(device_type=device, dtype=amp_dtype) if amp_dtype != torch.float32
                else contextlib.nullcontext())
    scaler = torch.amp.GradScaler(device) if amp_dtype == torch.float16 else None
    applied["dtype"] = f"autocast {dtype_name}" if amp_dtype != torch.float32 else "float32"
    applied["grad_scaler"] = scaler is not None

    batch_size = int(params["batch_size"])
    accum = int(params.get("grad_accum_steps", 1))
    set_to_none = params.get("zero_grad", "set_to_none") == "set_to_none"
    empty_every = int(params.get("empty_cache_every", 0))
    applied.update(batch_size=batch_size, grad_accum_steps=accum, zero_grad_set_to_none=set_to_none,
                   empty_cache_every=empty_every)

    def train_step() -> torch.Tensor:
        """One optimizer step over ``accum`` micro-batches; returns the mean loss (on device)."""
        batches = (workload.make_batch(batch_size) for _ in range(accum))
        loss = accumulate(model, workload.loss, batches, accum, autocast, scaler)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)
        return loss

    return Trial(device, params, workload, train_step, batch_size * accum, empty_every, applied, not_applied,
                 started, swap_start)


def warm_up(trial: Trial, warmup_steps: int, progress: Progress) -> Warm:
    """Allocations, optimizer state, autotuning and compilation happen here, unmeasured; ends
    with the device idle, then waits at the host's gate (``progress.before_window``)."""
    device, train_step, empty_every = trial.device, trial.step, trial.empty_every
    progress.phase = "compile" if trial.params.get("compile") else "warmup"
    backend.warn_every_fallback(device, True)  # every op that falls back to the CPU is heard
    first_loss = None
    step_ends: list[Any] = []  # when each step's work ended: read after the synchronize below, no sync added
    for i in range(warmup_steps):
        progress.step = i
        loss = train_step()
        step_ends.append(backend.step_marker(device))
        first_loss = loss if first_loss is None else first_loss
        if empty_every and (i + 1) % empty_every == 0:
            backend.empty_cache(device)
        progress.phase = "warmup"
    backend.warn_every_fallback(device, False)
    loss_first = cast(torch.Tensor, first_loss).item()  # outside the window: deliberate host read (warmup_steps >= 1)
    backend.synchronize(device)  # sync point: the window starts with an idle device
    for i, at in enumerate(backend.marker_times(step_ends, time.time()), 1):
        progress.marks[MK.warmup_step(i)] = at
    startup_s = progress.mark(MK.WARMUP_DONE) - trial.started  # the gate's wait below is not the trial's start-up
    swap_warmup = swap.read_swap()
    progress.before_window()
    return Warm(loss_first, startup_s, swap_warmup)


def timed_window(trial: Trial, steps: TrialSteps, progress: Progress) -> Window:
    """Synchronized at both ends, closed by ``window.closes`` (``steps.measure_steps`` steps and
    ``steps.min_measure_s`` seconds, or sooner with ``steps.precision``); peak memory counted from
    its start. Nothing else runs in it."""
    device, train_step, empty_every = trial.device, trial.step, trial.empty_every
    progress.phase = "measure"
    swap_window = swap.read_swap()  # after the gate: swap while waiting there is nobody's
    cpu_start = hostcpu.read()
    progress.mark(MK.WINDOW_START)
    backend.reset_peak(device)
    use_events = device == "cuda"
    marks: list[Any] = []
    driver_peak = 0
    losses: list[torch.Tensor] = []
    t0 = time.perf_counter()
    if use_events:
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        marks.append(start)
    else:
        marks.append(t0)
    times = StepTimes(marks)
    step = 0
    while True:
        progress.step = step
        losses.append(train_step())
        step += 1
        if use_events:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks.append(ev)
        else:
            if device == "mps":
                backend.synchronize(device)  # sync point: MPS memory is sampled after each step
                driver_peak = max(driver_peak, backend.driver_bytes(device) or 0)
            marks.append(time.perf_counter())
        if empty_every and step % empty_every == 0:  # after the sample: the step's peak counts
            backend.empty_cache(device)
        if closes(step, time.perf_counter() - t0, steps, times):
            break
    backend.synchronize(device)  # sync point: the window ends when the device is done
    elapsed = time.perf_counter() - t0
    cpu_end = hostcpu.read()
    progress.mark(MK.WINDOW_END)
    swap_end = swap.read_swap()
    return Window(step, elapsed, marks, losses, driver_peak, swap_window, swap_end, (cpu_start, cpu_end))


def figures(trial: Trial, warm: Warm, window: Window, fell_back: fallback.FallbackLog,
            allow_swap: bool) -> dict[str, Any]:
    """The window's figures, read from the device after it: throughput with its spread, step
    times, loss, peak memory, swap; and whether the trial swapped (unless ``allow_swap``)."""
    device, params, workload, step, elapsed = trial.device, trial.params, trial.workload, window.steps, window.elapsed
    marks = window.marks
    if device == "cuda":
        step_ms = [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
    else:
        step_ms = [(b - a) * 1000 for a, b in zip(marks, marks[1:])]
    window_losses = torch.stack(window.losses).float()
    mean_loss = window_losses.mean().item()  # after the window: deliberate host read
    finite = bool(torch.isfinite(window_losses).all().item()) and math.isfinite(warm.loss_first)

    samples_per_step = trial.samples_per_step
    result_metrics: dict[str, float | None] = {
        M.SAMPLES_PER_S: samples_per_step * step / elapsed,
        M.TOKENS_PER_S: (samples_per_step * step * workload.tokens_per_sample / elapsed
                         if workload.tokens_per_sample else None),
        M.STEP_TIME_MS_P50: statistics.median(step_ms),
        M.STEP_TIME_MS_P90: spread.percentile(step_ms, 0.9),
        **spread.window_figures(step_ms),  # throughput_cv, throughput_ci95
        M.LOSS: mean_loss,
        M.LOSS_FIRST: warm.loss_first,
        M.MEASURE_S: elapsed,
        M.MEASURE_STEPS: float(step),
        M.STARTUP_S: warm.startup_s,
        M.COMPILE_S: compiled.seconds() if params.get("compile") else None,
        M.HOST_CPU_OTHERS: hostcpu.others_busy(*window.cpu),
    }
    peaks = backend.peak_stats(device)
    result_metrics.update(peaks)
    if device == "cuda":
        result_metrics[M.PEAK_MEMORY_GIB] = peaks[M.PEAK_RESERVED_GIB]
    elif device == "mps":
        result_metrics[M.PEAK_DRIVER_GIB] = window.driver_peak / backend.GIB
        result_metrics[M.PEAK_MEMORY_GIB] = window.driver_peak / backend.GIB
    else:
        result_metrics[M.PEAK_MEMORY_GIB] = peaks[M.PEAK_RSS_GIB]

    swapping = swap.swap_figures(trial.swap_start, warm.swap_warmup, window.swap_window, window.swap_end)
    result_metrics.update(swapping)

    info = dict(workload.info)
    if device == "mps":
        ratio = params.get("memory_fraction", params.get("mps_high_watermark_ratio", 1.7))
        recommended = torch.mps.recommended_max_memory() / backend.GIB
        info.update(recommended_max_memory_gib=recommended,
                    effective_cap_gib=(ratio * recommended) if ratio else None)
    if device == "mps" or fell_back.ops:
        result_metrics[M.MPS_FALLBACK_OPS] = float(len(fell_back.ops))
        info["mps_fallback_ops"] = list(fell_back.ops)
    out = {"finite": finite, "metrics": result_metrics, "applied": trial.applied,
           "not_applied": trial.not_applied, "info": info, "device": device}
    if finite and swap.swapped(swapping) and not allow_swap:
        out.update(status="swapped", detail=swap.describe(swapping, result_metrics[M.SAMPLES_PER_S]))
    return out
