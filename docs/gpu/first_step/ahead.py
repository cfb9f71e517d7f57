"""How much of a trial's first training step can be paid before its configuration is known (issue
#40): on an H100 a headline trial's first step takes 0.7-1.1 s against 0.02-0.4 s for the next
ones. One process per line, each timing its own first three steps of the headline's BERT-base
after some work done "ahead" (what a prepared trial process could do while it waits):

    python docs/gpu/first_step/ahead.py VARIANT DTYPE BATCH

VARIANT: ``none`` (the context only), ``generic`` (small matmuls and the usual layers' forward
and backward in float32, float16 and bfloat16, a fused AdamW step: no model), ``model`` (the
model built and one step at batch 8 in each precision, then freed).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

sys.path.insert(0, os.getcwd())
from experiments import bert  # noqa: E402

variant, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
AMP = {"float16": torch.float16, "bfloat16": torch.bfloat16}
device = torch.device("cuda")
torch.zeros(1, device=device)
torch.cuda.synchronize()
context = time.perf_counter()


def autocast(name: str):
    return torch.autocast("cuda", dtype=AMP[name]) if name in AMP else contextlib.nullcontext()


def generic() -> None:
    layer = torch.nn.Linear(256, 256, device=device)
    norm = torch.nn.LayerNorm(256, device=device)
    opt = torch.optim.AdamW([*layer.parameters(), *norm.parameters()], lr=1e-4, fused=True)
    for name in ("float32", "float16", "bfloat16"):
        with autocast(name):
            x = torch.randn(64, 32, 256, device=device)
            h = norm(F.gelu(layer(x)))
            att = torch.softmax(h @ h.transpose(1, 2), dim=-1) @ h
            logits = F.dropout(att, 0.1).reshape(-1, 256)
            loss = F.cross_entropy(logits.float(), torch.randint(0, 256, (logits.shape[0],), device=device))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def model() -> None:
    w = bert.build({"model": "bert-base", "seq_len": 128}, device)
    opt = torch.optim.AdamW(w.model.parameters(), lr=1e-4, fused=True)
    for name in ("float32", "float16", "bfloat16"):
        with autocast(name):
            loss = w.loss(w.model, w.make_batch(8))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if variant != "none":
    {"generic": generic, "model": model}[variant]()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
ahead = time.perf_counter()
reserved = torch.cuda.memory_reserved() / 2**20
w = bert.build({"model": "bert-base", "seq_len": 128}, device)
opt = torch.optim.AdamW(w.model.parameters(), lr=1e-4, fused=True)
built = time.perf_counter()
steps = []
for _ in range(3):
    s = time.perf_counter()
    with autocast(dtype):
        loss = w.loss(w.model, w.make_batch(batch))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    steps.append(time.perf_counter() - s)
print(f"{variant:8s} {dtype:9s} b{batch}: import+context {context - t0:.2f} s, ahead {ahead - context:.2f} s "
      f"(left reserved {reserved:.0f} MiB), build {built - ahead:.2f} s, steps {' '.join(f'{x:.3f}' for x in steps)} s, "
      f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
os._exit(0)
