"""What a script changes in its own process that the harness follows or checks, outside its
steps and batches: the thread counts it sets (followed), the device it trains on (checked against
the spec's), and the process group it trains in (``world_size``: a launcher inside the script,
such as Lightning's ``strategy="ddp"``, keeps rank 0 in the trial's process and starts the other
ranks as its children; the harness sees rank 0's steps and batches only)."""

from __future__ import annotations

import os
from typing import Callable

import torch


class Unmeasurable(Exception):
    """The harness's own finding that it cannot measure what the script does (no samples counted,
    the wrong device): said as it is, not as the script's exception at the script's line."""

    ended = True


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def follow_threads(before: dict[str, str | None]) -> None:
    """A script that sets ``OMP_NUM_THREADS`` (or MKL's) at its top, before importing torch, runs
    with that many threads as ``python train.py``: torch reads it as it loads. Here torch was
    loaded before the script ran (the fork server's import, the harness's own), so at the first
    step the count is set as the script asked (a tour: 2 threads where the script set 1)."""
    for name in THREAD_VARS:
        value = os.environ.get(name, "")
        if value != (before.get(name) or "") and value.isdigit() and int(value) > 0:
            torch.set_num_threads(int(value))
            return


def check_device(device: str) -> None:
    """The script trained where the spec says, else the window measured the wrong device (its
    synchronize and its memory): raised from the step hook, it ends the trial as an error."""
    if device == "cpu" and torch.cuda.is_initialized():
        raise Unmeasurable("the spec's device is cpu but the script used CUDA: pass the device to it "
                           "(e.g. \"--device\", \"{device}\" in args), or set device: cuda")
    if device == "cuda" and not torch.cuda.max_memory_allocated():
        raise Unmeasurable("the spec's device is cuda but the script put nothing on the GPU: pass the device "
                           "to it (e.g. \"--device\", \"{device}\" in args), or set device: cpu")


def world_size() -> int:
    """The script's ``torch.distributed`` world size, 1 where it started no process group. With
    data parallelism (DDP, FSDP) every rank trains its own batches in step with rank 0, so the
    job's samples are rank 0's times this (a Lightning tour: 2 ranks recorded 6,425.9 samples/s,
    each rank's own log 6,411.0 and 6,420.3)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


SPAWNED = ("the script trains in processes it starts (torch.multiprocessing's start_processes: mp.spawn, Lightning's "
           "strategy='ddp_spawn', Accelerate's notebook_launcher), whose steps the harness cannot see: train in the "
           "script's own process (Lightning's strategy='ddp' keeps rank 0 there)")


def refusing_spawn(steps: Callable[[], int]) -> Callable[[], None]:
    """``torch.multiprocessing.start_processes`` called before the script's first optimizer step
    (``steps``: how many it made) raises ``Unmeasurable`` into it, at once: the smoke step waited
    its whole ``trial.timeout_s`` (15 minutes by default) for a step that came only in the children
    (a script tour: Lightning's ``ddp_spawn``). After a step (an evaluation in workers) it starts
    them as asked. Returns what puts the function back."""
    import sys

    import torch.multiprocessing as mp

    spawn = sys.modules["torch.multiprocessing.spawn"]  # `spawn` calls it from there; launchers from mp
    original = spawn.start_processes

    def start_processes(*args: object, **kwargs: object) -> object:
        if steps() == 0:
            raise Unmeasurable(SPAWNED)
        return original(*args, **kwargs)

    def put(function: object) -> None:
        for module in (spawn, mp):
            setattr(module, "start_processes", function)

    put(start_processes)
    return lambda: put(original)
