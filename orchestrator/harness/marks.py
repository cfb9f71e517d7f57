"""The marks a trial writes into its result's ``timeline``: where its start-up goes.

Each mark is the wall-clock time (``time.time()``, comparable with the orchestrator's events and
the process's own ``main``/``forked``/``config_received``) at which ``harness/train.py``'s
phases (``set_up``, ``warm_up``, ``timed_window``) reached a point, in this order:

- ``device``: the trial starts (its configuration is read); ``startup_s`` counts from here;
- ``device_ready``: the device is initialised (CUDA: the runtime and the context, created by the
  first allocation; MPS: its allocator; CPU: nothing to do);
- ``limits_applied``: process-wide memory limits are set (``memory_fraction``,
  ``cpu_memory_limit_gib``);
- ``built``: the experiment's ``build`` returned (the model on the device, initialised);
- ``wrapped``: activation checkpointing and ``torch.compile`` are applied (``compile`` only wraps
  here: it compiles during the first warm-up step);
- ``optimizer_ready``: the optimizer exists (its state is created by its first step);
- ``warmup_1`` ... ``warmup_N``: the end of each warm-up step, on the device: on CUDA the time its
  work finished on the GPU (an event recorded after the step, read after the warm-up's final
  synchronize: no sync is added), on the CPU the time it returned (the CPU runs a step
  synchronously), on MPS the time it was queued;
- ``warmup_done``: the warm-up's final synchronize returned; ``startup_s`` is this mark less
  ``device``.

Then ``window_start`` and ``window_end`` (the timed window, after the launcher's gate). This module
does not import torch: ``bench/startup.py`` reads the names from here.
"""

from __future__ import annotations

DEVICE = "device"
DEVICE_READY = "device_ready"
LIMITS_APPLIED = "limits_applied"
BUILT = "built"
WRAPPED = "wrapped"
OPTIMIZER_READY = "optimizer_ready"
WARMUP_DONE = "warmup_done"
WINDOW_START = "window_start"
WINDOW_END = "window_end"

BEFORE_WARMUP = (DEVICE, DEVICE_READY, LIMITS_APPLIED, BUILT, WRAPPED, OPTIMIZER_READY)
"""The marks before the first warm-up step, in the order a trial reaches them."""


def warmup_step(i: int) -> str:
    """The mark of the end of warm-up step ``i`` (1-based)."""
    return f"warmup_{i}"


def startup_marks(warmup_steps: int) -> tuple[str, ...]:
    """Every start-up mark of a trial with ``warmup_steps`` warm-up steps, in order: ``startup_s``
    is the span from the first to the last."""
    return (*BEFORE_WARMUP, *(warmup_step(i) for i in range(1, warmup_steps + 1)), WARMUP_DONE)
