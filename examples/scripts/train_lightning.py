"""A Lightning ``Trainer`` script: a LightningModule, a DataLoader and the Trainer's flags from
argparse. Nothing in it knows about orchestrate (``lightning.yaml`` sweeps it unchanged)."""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 10))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", default="32-true", help="32-true, bf16-mixed, 16-mixed")
    parser.add_argument("--accumulate-grad-batches", type=int, default=1)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--max-steps", type=int, default=100_000)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(65536, 64, generator=g), torch.randint(0, 10, (65536,), generator=g))
    trainer = L.Trainer(accelerator=args.accelerator, devices=1, precision=args.precision,
                        accumulate_grad_batches=args.accumulate_grad_batches, max_steps=args.max_steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Classifier(args.width), DataLoader(data, batch_size=args.batch_size, shuffle=True))


if __name__ == "__main__":
    main()
