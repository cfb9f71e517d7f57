"""Last session's script-tour fixes, on CUDA (docs/gpu/script_tour/run.sh): batch layouts the
harness once counted by their shape, and PyTorch's compiled optimizer step, in a small
transformer's plain loop. The script logs its own count: one line a step, ``step time seen``
(``time.perf_counter`` after the loss is read, so the GPU's work is done), to own-ARGS.log.

  --layout tuple     default-collated ((tokens, features), label): counted 2 a step before
  --layout seqfirst  a sequence-first (L, B) batch (pad_sequence): counted its padded length
  --layout packed    a padding-free (1, T) row of the batch's sequences: counted 1
  --compile step     torch.compile(optimizer.step): its step hook was traced, 30-70x too slow
"""
import argparse
import sys
import time

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

LOG = open(f"own-{'_'.join(a.lstrip('-') for a in sys.argv[1:])}.log", "w", buffering=1)
VOCAB, WIDTH = 1000, 256


class Docs(Dataset):
    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int):
        n = 32 + i % 33  # 32-64 tokens
        return (torch.randint(0, VOCAB, (n,)), torch.randn(8)), i % 4


def seq_first(batch):
    tokens = pad_sequence([t for (t, _), _ in batch])  # (L, B)
    return tokens, torch.stack([f for (_, f), _ in batch]), torch.tensor([y for _, y in batch])


def packed(batch):
    tokens = torch.cat([t for (t, _), _ in batch]).unsqueeze(0)  # (1, T)
    lengths = torch.tensor([len(t) for (t, _), _ in batch])
    return tokens, lengths, torch.tensor([y for _, y in batch])


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.body = nn.TransformerEncoder(nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, batch_first=True), 2)
        self.head = nn.Linear(WIDTH + 8, 4)

    def forward(self, tokens, features):  # tokens (B, L)
        return self.head(torch.cat([self.body(self.embed(tokens)).mean(1), features], 1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--layout", choices=["tuple", "seqfirst", "packed"], default="tuple")
    p.add_argument("--compile", choices=["none", "step"], default="none")
    a = p.parse_args()
    dev = "cuda"
    collate = {"tuple": None, "seqfirst": seq_first, "packed": packed}[a.layout]
    if a.layout == "tuple":  # fixed length: the default collate stacks it
        data = [((torch.randint(0, VOCAB, (48,)), torch.randn(8)), i % 4) for i in range(4096)]
    else:
        data = Docs()
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True, collate_fn=collate, drop_last=True)
    model = Model().to(dev)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    step = torch.compile(opt.step) if a.compile == "step" else opt.step
    seen = 0
    for i, batch in enumerate(b for _ in range(1000) for b in loader):
        LOG.write(f"{i} {time.perf_counter():.6f} {seen}\n")
        if a.layout == "tuple":
            (tokens, features), y = batch
        elif a.layout == "seqfirst":
            tokens, features, y = batch
            tokens = tokens.t()
        else:  # packed: the model takes the rows back apart (a padding-free kernel would not)
            row, lengths, y = batch
            tokens = pad_sequence(list(row[0].split(lengths.tolist())), batch_first=True)
            features = torch.zeros(len(lengths), 8)
        tokens, features, y = tokens.to(dev), features.to(dev), y.to(dev)
        loss = nn.functional.cross_entropy(model(tokens, features), y)
        loss.backward()
        step()
        opt.zero_grad()
        loss.item()  # the loop logs its loss: the step's work is done at the next line's time
        seen += len(y)


if __name__ == "__main__":
    main()
