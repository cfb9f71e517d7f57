"""The workload ``orchestrate doctor --check`` runs: each step needs one known allocation.

An experiment under the usual contract (docs/experiment.md). Its batch is one float32
tensor of ``batch_size`` x ``width`` (so ``batch_size`` = 65,536 at width 1,024 is exactly 256 MiB)
through an elementwise model, ``x * w + b``: cheap to compute on any device, and the step needs the
batch plus about three more tensors of its size (output, its square, the gradient). A memory cap
below the batch's size cannot hold it, and without the cap it fits anywhere ``doctor`` would run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from orchestrator.harness.workload import Workload

PARAMS: dict[str, object] = {"width": 1024}


class Scale(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


def squared_mean(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).square().mean()


def data_segment_bytes() -> int | None:
    """Linux: this process's data segment now (``VmData``), what RLIMIT_DATA is checked against."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def build(params: dict[str, Any], device: torch.device) -> Workload:
    width = int(params.get("width", PARAMS["width"]))
    model = Scale(width).to(device)

    def make_batch(batch_size: int) -> torch.Tensor:
        return torch.full((batch_size, width), 0.5, device=device)  # the known allocation

    batch_bytes = int(params["batch_size"]) * width * 4
    return Workload(model=model, make_batch=make_batch, loss=squared_mean, tokens_per_sample=None,
                    blocks=(), lr=1e-3, info={"batch_bytes": batch_bytes,
                                              "data_segment_bytes_at_build": data_segment_bytes()})
