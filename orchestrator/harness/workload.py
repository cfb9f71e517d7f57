"""The experiment contract: what an experiment module gives the trial harness.

An experiment is a Python module named by the spec's ``experiment:`` key. It provides::

    PARAMS: dict[str, object]          # its own parameters and their defaults (optional)
    def build(params: dict, device: torch.device) -> Workload: ...
    def validate_params(params: dict) -> None: ...   # optional: raise ValueError on bad fixed params
    def preload(fixed: dict) -> None: ...            # optional: import ahead what every trial imports

``params`` holds every fixed and sampled parameter of the trial (harness knobs such as
``batch_size`` and ``dtype`` included, read-only); ``PARAMS`` defaults are not filled in, so
``build`` applies its own. The harness owns everything else: the device, mixed precision, the
optimizer, gradient accumulation, activation checkpointing, ``torch.compile``, the timed window
and the memory figures. It initialises the device and seeds torch's global RNG with
``params.get("seed", 0)`` before ``build``; ``build``'s time is part of the trial's ``startup_s``
(its ``built`` mark in the result's timeline).

Rules an experiment must follow:
- ``build`` creates the model's parameters on ``device`` and initialises them there: under
  ``with torch.device(device):`` (torch's default init then runs on the device), or on the meta
  device and then ``model.to_empty(device=device)`` followed by an init of its own with a
  generator of that device (``device_generator``). Building on the CPU and copying costs start-up
  that is not the workload (BERT-base: 110M normal draws from one CPU generator, 1.5-2.6 s on a busy
  2-core machine, then a 440 MB copy). After ``to_empty``, tie shared weights again (it gives each
  module a Parameter of its own).
- Determinism: the same ``seed`` gives the same initial weights and the same batches on the same
  kind of device (and torch version). Not across devices: CPU, CUDA and MPS generators draw
  different numbers from one seed, so a CPU trial and a GPU trial start from different draws of
  the same distribution.
- ``make_batch`` runs inside the timed window for every micro-batch: keep it on the device,
  cheap and free of host syncs (no ``.item()``, no CPU->device copies).
- ``loss`` must call the model it is given (it may be the ``torch.compile``d one) and call each
  block as ``block(x)``, never ``block.forward(x)`` (checkpointing replaces ``forward``).
- ``validate_params`` sees the fixed parameters only (before any trial); a ``ValueError`` with a
  ``field`` attribute naming the parameter points the error at that line of the spec. Rules on
  swept values are checked by ``build`` (the trial then ends as ``error``).
- ``info`` must be JSON-serialisable.
- ``preload`` sees the fixed parameters, once per fork server (or pre-started interpreter), before
  any configuration: it imports what every trial of them would import on its own (a library's lazy
  imports: ``experiments.hf`` looks up the model's class, which imports its modules), so that each
  trial starts with them done. It must touch no device (no tensor on a GPU, no ``torch.cuda`` call
  but ``is_available``/``device_count``: a forked trial cannot use a CUDA context its server
  made). What it raises is ignored: the trials then import on their own
  (``orchestrator/harness/ahead.py``).

This module must stay importable without torch: the orchestrator reads it only for the docs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class Workload:
    """One trainable workload, built for one trial on one device."""

    model: "torch.nn.Module"
    """The model, on ``device``, in float32 (the harness applies autocast for other dtypes)."""

    make_batch: Callable[[int], Any]
    """``make_batch(batch_size)`` returns one micro-batch, already on the device."""

    loss: Callable[["torch.nn.Module", Any], "torch.Tensor"]
    """``loss(model, batch)`` runs the forward pass and returns a scalar loss tensor."""

    tokens_per_sample: int | None = None
    """Tokens in one sample (the sequence length for language models); None if not meaningful."""

    blocks: Sequence["torch.nn.Module"] = field(default_factory=tuple)
    """Submodules that ``activation_checkpointing: true`` wraps with ``torch.utils.checkpoint``."""

    lr: float = 1e-4
    """Learning rate the harness's optimizer uses (a spec's ``lr`` overrides it)."""

    info: dict[str, Any] = field(default_factory=dict)
    """Extra facts worth recording with the result (for example ``num_parameters``)."""

    enable_checkpointing: Callable[[], None] | None = None
    """The model's own way to checkpoint its activations (a Hugging Face model's
    ``gradient_checkpointing_enable``): when given, ``activation_checkpointing: true`` calls it
    instead of wrapping ``blocks``."""


def device_generator(device: "torch.device", seed: int) -> "torch.Generator | None":
    """A random generator on ``device`` seeded with ``seed``, for an experiment's initial weights
    and batches; None where the device has none (``meta``): use the global RNG there."""
    import torch

    try:
        return torch.Generator(device=device).manual_seed(seed)
    except (RuntimeError, TypeError):
        return None


def param_error(field: str, message: str) -> ValueError:
    """What an experiment's ``validate_params`` raises for a bad parameter: a ValueError that names
    it, so the orchestrator's spec error points at that parameter's line
    (``orchestrator.harness.probe`` reads ``field``)."""
    exc = ValueError(message)
    exc.field = field  # type: ignore[attr-defined]  # our own attribute on a ValueError, read by the probe
    return exc
