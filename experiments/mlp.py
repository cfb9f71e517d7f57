"""A residual MLP classifier on synthetic data labelled by a fixed random teacher network.

A second experiment under the same contract as ``experiments.bert``: inputs are standard normal,
and each label is the argmax of a random one-hidden-layer tanh "teacher" fixed by the seed, so the
classes are learnable (the student can represent the teacher) but not linearly separable.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from orchestrator.harness.workload import Workload, device_generator, param_error

PARAMS: dict[str, object] = {"in_features": 64, "hidden_size": 256, "num_layers": 4, "num_classes": 10,
                             "lr": 1e-3, "seed": 0}
TEACHER_WIDTH = 128
POSITIVE_INTS = ("in_features", "hidden_size", "num_layers")


def validate_params(params: dict[str, Any]) -> None:
    """Raise ValueError naming the rule and the value; only keys present in ``params`` are checked."""
    for key in POSITIVE_INTS:
        if key in params and not (isinstance(params[key], int) and not isinstance(params[key], bool)
                                  and params[key] > 0):
            raise param_error(key, f"{key} must be a positive integer, got {params[key]!r}")
    if "num_classes" in params:
        n = params["num_classes"]
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 2):
            raise param_error("num_classes", f"num_classes must be an integer >= 2, got {n!r}")


class Block(nn.Module):
    """One hidden layer: x + Linear(GELU(Linear(LayerNorm(x))))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class MLP(nn.Module):
    """Input projection -> ``num_layers`` residual blocks -> LayerNorm -> class logits."""

    def __init__(self, in_features: int, hidden_size: int, num_layers: int, num_classes: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, hidden_size)
        self.blocks = nn.ModuleList(Block(hidden_size) for _ in range(num_layers))
        self.norm = nn.LayerNorm(hidden_size)
        self.head = nn.Linear(hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def build(params: dict[str, Any], device: torch.device) -> Workload:
    """The workload for one trial; harness keys in ``params`` (batch_size, dtype, ...) are ignored."""
    validate_params(params)
    p = {**PARAMS, **params}
    in_features, hidden, layers, classes = (int(p[k]) for k in ("in_features", "hidden_size", "num_layers",
                                                                 "num_classes"))
    seed = int(p["seed"])

    torch.manual_seed(seed)  # torch's default init draws from the device's global generator
    with torch.device(device):  # the parameters are created, and initialised, on the device
        model = MLP(in_features, hidden, layers, classes)
    teacher = device_generator(device, seed)
    w1 = torch.randn(in_features, TEACHER_WIDTH, device=device, generator=teacher) / math.sqrt(in_features)
    w2 = torch.randn(TEACHER_WIDTH, classes, device=device, generator=teacher) / math.sqrt(TEACHER_WIDTH)
    generator = device_generator(device, seed + 1)  # the batches'

    def make_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch_size, in_features, device=device, generator=generator)
        return x, (torch.tanh(x @ w1) @ w2).argmax(dim=1)

    return Workload(model=model, make_batch=make_batch, loss=classification_loss, tokens_per_sample=None,
                    blocks=tuple(model.blocks), lr=float(p["lr"]),
                    info={"num_parameters": sum(w.numel() for w in model.parameters()),
                          "in_features": in_features, "hidden_size": hidden, "num_layers": layers,
                          "num_classes": classes})
