"""A 1-D convolutional classifier of noisy sine waves: a complete experiment for orchestrate.

docs/experiment.md builds this file step by step; examples/my_experiment.yaml sweeps it:
    orchestrate examples/my_experiment.yaml
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from orchestrator.harness.workload import Workload, device_generator, param_error

# Every parameter this experiment takes, with its default. A spec may set any of them (or a
# harness knob such as batch_size); any other name is rejected as a typo before a trial runs.
# The defaults are not merged into `params` for you: build() applies them.
PARAMS: dict[str, Any] = {"channels": 32, "num_blocks": 4, "signal_length": 256, "num_classes": 4,
                          "noise": 0.5, "lr": 1e-3, "seed": 0}


def validate_params(params: dict[str, Any]) -> None:
    """The fixed parameters, checked before any trial: param_error names the spec's line."""
    for key in ("channels", "num_blocks", "signal_length"):
        value = params.get(key)
        if value is not None and not (isinstance(value, int) and value > 0):
            raise param_error(key, f"{key} must be a positive integer, got {value!r}")
    if "num_classes" in params and not (isinstance(params["num_classes"], int) and params["num_classes"] >= 2):
        raise param_error("num_classes", f"num_classes must be an integer >= 2, got {params['num_classes']!r}")


class Block(nn.Module):
    """x + conv(relu(norm(x))): one residual block, the unit activation checkpointing wraps."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(channels)
        self.conv = nn.Conv1d(channels, channels, kernel_size=5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(F.relu(self.norm(x)))


class ConvNet(nn.Module):
    def __init__(self, channels: int, num_blocks: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv1d(1, channels, kernel_size=5, padding=2)
        self.blocks = nn.ModuleList(Block(channels) for _ in range(num_blocks))
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, 1, length)
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)  # call the block, never block.forward(x): checkpointing replaces forward
        return self.head(x.mean(dim=2))


def build(params: dict[str, Any], device: torch.device) -> Workload:
    """One trial's workload, on ``device``; harness knobs in ``params`` (batch_size, dtype) are ignored."""
    validate_params(params)  # swept values were not seen by the orchestrator's check
    p = {**PARAMS, **params}
    torch.manual_seed(p["seed"])
    with torch.device(device):  # the parameters are created, and initialised, on the device
        model = ConvNet(p["channels"], p["num_blocks"], p["num_classes"])
    generator = device_generator(device, p["seed"])  # the batches' own, on the device
    t = torch.linspace(0, 2 * math.pi, p["signal_length"], device=device)

    def make_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Class k is a sine of frequency k + 1 with a random phase, plus noise; made on the device."""
        labels = torch.randint(0, p["num_classes"], (batch_size,), device=device, generator=generator)
        phase = torch.rand(batch_size, 1, device=device, generator=generator) * 2 * math.pi
        noise = torch.randn(batch_size, p["signal_length"], device=device, generator=generator)
        x = torch.sin((labels[:, None] + 1) * t + phase) + p["noise"] * noise
        return x.unsqueeze(1), labels

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)

    return Workload(model=model, make_batch=make_batch, loss=loss, tokens_per_sample=None,
                    blocks=tuple(model.blocks), lr=p["lr"],
                    info={"num_parameters": sum(w.numel() for w in model.parameters())})
