"""Checkpoints a script writes inside its timed window. The harness sees only the optimizer steps,
so a save between two steps is part of the step after it, and its time counts as training: a
``Trainer`` with ``save_steps`` inside the window measures slower than it trains between saves.
Not left out (a user's run pays for its saves too), but said: the sweep's line names how many of
the window's steps held a save and the time they took beyond the median step without one
(``report/batchflag.py``): the whole save (the ``Trainer``'s weights through safetensors too),
though not what it slows after it (a disk busy writing back: a tour's 60-MB checkpoint every 5
steps slowed every step up to 6x on a loaded 2-core machine).

Seen where torch writes, ``torch.save``: a plain loop's checkpoint, each of Hugging Face's
``Trainer`` (its optimizer, scheduler, random states and arguments), Lightning's, Accelerate's
``save_state``."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Sequence
from typing import ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")


def counting_saves(on_save: Callable[[], None]) -> Callable[[], None]:
    """``on_save()`` after each ``torch.save`` (also as ``torch.serialization.save``); returns the undo."""
    inner = torch.serialization.save
    torch.save = torch.serialization.save = then(inner, on_save)  # where scripts and libraries call it

    def undo() -> None:
        torch.save = torch.serialization.save = inner  # the original put back
    return undo


def then(inner: Callable[P, R], after: Callable[[], None]) -> Callable[P, R]:
    """``inner``, calling ``after()`` after each call, returned or raised."""
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return inner(*args, **kwargs)
        finally:
            after()
    return call


def figures(saved: Collection[int], step_ms: Sequence[float]) -> dict[str, float | None]:
    """``info``'s ``saves`` (how many of the window's steps, ``saved`` by their index in
    ``step_ms``, held a save) and ``save_s`` (their time beyond the median step without a save;
    None where every step held one); nothing where no save was in the window."""
    held = [step_ms[i] for i in saved if 0 <= i < len(step_ms)]
    if not held:
        return {}
    free = [ms for i, ms in enumerate(step_ms) if i not in saved]
    if not free:  # save_steps 1: no step to set them against
        return {"saves": len(held), "save_s": None}
    median = statistics.median(free)
    return {"saves": len(held), "save_s": sum(max(0.0, ms - median) for ms in held) / 1000}
