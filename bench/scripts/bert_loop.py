"""BERT pre-training as a user writes it: a plain loop over experiments.bert's model and batches,
fused AdamW, autocast for half precision. bench/script_vs_module.py sweeps it as a script against
experiments.bert as a module; with --time it also times its own steps (synchronized at both ends)."""

import argparse
import contextlib
import time

import torch

from experiments.bert import build


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="bert-base")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--time", type=int, default=0, metavar="N", help="print samples/s over steps N+1..--steps")
    a = p.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(0)
    work = build({"model": a.model, "seq_len": a.seq_len, "seed": 0}, device)
    model = work.model.train()
    try:  # fused where the device has it, as the harness's default optimizer
        opt = torch.optim.AdamW(model.parameters(), lr=work.lr, fused=True)
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(model.parameters(), lr=work.lr, foreach=True)
    half = getattr(torch, a.dtype)
    autocast = torch.autocast(a.device, dtype=half) if a.dtype != "float32" else contextlib.nullcontext()
    for step in range(1, a.steps + 1):
        if a.time and step == a.time + 1:
            torch.cuda.synchronize() if a.device == "cuda" else None
            t0 = time.perf_counter()
        with autocast:
            loss = work.loss(model, work.make_batch(a.batch_size))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if a.time:
        torch.cuda.synchronize() if a.device == "cuda" else None
        print(f"LOOP {a.batch_size * (a.steps - a.time) / (time.perf_counter() - t0):.3f} samples/s", flush=True)


if __name__ == "__main__":
    main()
