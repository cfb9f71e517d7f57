"""Why a command's first trial, and its first bfloat16 trial, spend 1.3-1.9 s more in their first
step than later trials of the same command (4 x H100, 2026-11-26): one process per line, run one
after another, each timing its own first and second training step of the headline's BERT-base.

    python docs/gpu/first_step/probe.py DTYPE BATCH [_exit]   # one process: prints its steps' seconds
                                                              # (_exit: leaves by os._exit, as a trial does)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402

sys.path.insert(0, os.getcwd())
from experiments import bert  # noqa: E402

dtype, batch = sys.argv[1], int(sys.argv[2])
backend = os.environ.get("PROBE_SDPA")  # FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION, MATH: only that one
imported = time.perf_counter()
device = torch.device("cuda")
torch.zeros(1, device=device)
torch.cuda.synchronize()
context = time.perf_counter()
w = bert.build({"model": "bert-base", "seq_len": 128}, device)
opt = torch.optim.AdamW(w.model.parameters(), lr=1e-4, fused=True)
amp = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(dtype)
built = time.perf_counter()
steps = []
if backend:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa_kernel([getattr(SDPBackend, backend)]).__enter__()
for _ in range(3):
    s = time.perf_counter()
    with torch.autocast("cuda", dtype=amp) if amp else contextlib.nullcontext():
        loss = w.loss(w.model, w.make_batch(batch))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    steps.append(time.perf_counter() - s)
print(f"{dtype:9s} b{batch}: import {imported - t0:.2f} s, context {context - imported:.2f} s, build {built - context:.2f} s, "
      f"steps {' '.join(f'{x:.3f}' for x in steps)} s{' (os._exit)' if sys.argv[3:] == ['_exit'] else ''}"
      f"{f' SDPA {backend} only' if backend else ''}", flush=True)
if sys.argv[3:] == ["_exit"]:
    os._exit(0)
