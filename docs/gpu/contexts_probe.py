"""CUDA contexts made alone and at once on several GPUs of one host (issue #41, ``bench/contexts.py``'s
inference checked directly): each process imports torch, waits for a common start time, then times
``torch.cuda.init()`` (the driver and torch's CUDA state) and its first allocation (the context),
as ``harness/backend.init_device`` does. Each process sees only its own GPU, as a slot's trials do.

    python3 docs/gpu/contexts_probe.py --rounds 3      # alone on GPU 0, on GPUs 0-1 at once, on every GPU at once

Prints one line per process: the GPU, both phases in seconds, and the round's way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, time
import torch
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))
t0 = time.time()
torch.cuda.init()
t1 = time.time()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
t2 = time.time()
print(json.dumps({"late": t0 - start, "init": t1 - t0, "context": t2 - t1}))
"""


def gpus() -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def round_of(uuids: list[str]) -> list[dict]:
    start = time.time() + 6.0  # every process has imported torch by then
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(start)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": u}) for u in uuids]
    return [{**json.loads(p.communicate()[0].strip().splitlines()[-1]), "gpu": i} for i, p in enumerate(procs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    uuids = gpus()
    for r in range(1, args.rounds + 1):
        for way, chosen in (("alone", uuids[:1]), ("2 at once", uuids[:2]), (f"{len(uuids)} at once", uuids)):
            for got in round_of(chosen):
                print(f"round {r}, {way}: GPU {got['gpu']}: init {got['init']:.3f} s, context {got['context']:.3f} s "
                      f"(started {got['late'] * 1000:.0f} ms late)", flush=True)


if __name__ == "__main__":
    main()
