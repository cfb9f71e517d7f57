"""An Accelerate training loop: the Accelerator prepares the model, the optimizer and the
DataLoader, and does mixed precision. Nothing in it knows about orchestrate (``accelerate.yaml``
sweeps it unchanged)."""

import argparse

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--mixed-precision", default="no", choices=["no", "bf16", "fp16"])
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args()

    accelerator = Accelerator(mixed_precision=args.mixed_precision, cpu=args.cpu,
                              gradient_accumulation_steps=args.gradient_accumulation_steps)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(65536, 64, generator=g), torch.randint(0, 10, (65536,), generator=g))
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(args.epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    main()
