"""A small image classifier trained the usual way: argparse flags, a Dataset, a DataLoader and a
plain PyTorch loop. Nothing in it knows about orchestrate (docs/script.md sweeps it unchanged)."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RandomImages(Dataset):
    """Stand-in for a real dataset: ``n`` random 16x16 images and labels (2,048 distinct ones)."""

    def __init__(self, n: int, classes: int = 10) -> None:
        g = torch.Generator().manual_seed(0)
        self.n = n
        self.x = torch.randn(2048, 3, 16, 16, generator=g)
        self.y = torch.randint(0, classes, (2048,), generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i % 2048], self.y[i % 2048]


def make_model(width: int, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(2 * width, classes),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--samples", type=int, default=1_000_000, help="samples in one epoch")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    device = torch.device(args.device)
    model = make_model(args.width).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(RandomImages(args.samples), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    for epoch in range(args.epochs):
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        print(f"epoch {epoch}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
