"""CUDA contexts made alone and at once on several GPUs of one host (issue #41, ``bench/contexts.py``'s
inference checked directly): each process imports torch, waits for a common start time, then times
``torch.cuda.init()`` (the driver and torch's CUDA state) and its first allocation (the context),
as ``harness/backend.init_device`` does. Each process sees only its own GPU, as a slot's trials do.

    python3 docs/gpu/contexts_probe.py --rounds 3      # alone on GPU 0, on GPUs 0-1 at once, on every GPU at once
    python3 docs/gpu/contexts_probe.py --visible uuid,index,all   # alone, the GPU named three ways

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


def round_of(uuids: list[str], visible: str = "uuid") -> list[dict]:
    """One process per GPU in ``uuids``, started together; ``visible``: how each is shown its GPU
    (``uuid``, as a slot does; ``index``; ``all``: every GPU visible, the process uses cuda:0)."""
    start = time.time() + 6.0  # every process has imported torch by then
    names = {"uuid": uuids, "index": [str(i) for i in range(len(uuids))], "all": [None] * len(uuids)}[visible]
    envs = [{k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
            | ({} if n is None else {"CUDA_VISIBLE_DEVICES": n}) for n in names]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(start)], stdout=subprocess.PIPE, text=True, env=env)
             for env in envs]
    return [{**json.loads(p.communicate()[0].strip().splitlines()[-1]), "gpu": i} for i, p in enumerate(procs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--visible", default="uuid", help="uuid (as a slot: the default), index, or a list "
                    "such as uuid,index,all: each way alone, one after the other, each round")
    args = ap.parse_args()
    uuids = gpus()
    kinds = args.visible.split(",")
    for r in range(1, args.rounds + 1):
        if len(kinds) > 1:  # how the GPU is named, alone on GPU 0
            for kind in kinds:
                got = round_of(uuids[:1], kind)[0]
                print(f"round {r}, alone, CUDA_VISIBLE_DEVICES as {kind}: init {got['init']:.3f} s, "
                      f"context {got['context']:.3f} s", flush=True)
            continue
        for way, chosen in (("alone", uuids[:1]), ("2 at once", uuids[:2]), (f"{len(uuids)} at once", uuids)):
            for got in round_of(chosen, kinds[0]):
                print(f"round {r}, {way}: GPU {got['gpu']}: init {got['init']:.3f} s, context {got['context']:.3f} s "
                      f"(started {got['late'] * 1000:.0f} ms late)", flush=True)


if __name__ == "__main__":
    main()
