"""Does a process forked from one that has imported torch train as fast as a freshly started one?
The question under ``bench/fidelity.py``, without the harness: the same small MLP training step
(AdamW, cross-entropy) timed in a fresh ``python`` that imports torch and the harness's preload
itself, and in a child forked from this process after the same imports (as the fork server does),
alternating pairs so that drift falls on both alike.

    python bench/fork_vs_fresh.py                       # 10 pairs, batch 64
    taskset -c 2,3 python bench/fork_vs_fresh.py --pairs 20 --batch 512

Prints each pair and the pairwise ratio forked / fresh, then the median ratio and how many pairs
the forked child was the slower one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports() -> None:
    """What a trial process has loaded before its configuration arrives (the fork server's preload)."""
    sys.path.insert(0, str(ROOT))
    from orchestrator.harness.__main__ import preload

    preload("experiments.mlp")


def measure(batch: int, seconds: float) -> dict:
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU()) for _ in range(4)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(batch, 128), torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return {"samples_per_s": n * batch / (time.perf_counter() - t0), "threads": torch.get_num_threads()}


def forked(batch: int, seconds: float) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, json.dumps(measure(batch, seconds)).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 4096):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


def fresh(batch: int, seconds: float) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--batch", str(batch), "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0, help="each timed window")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    imports()
    if args.child:
        print(json.dumps(measure(args.batch, args.seconds)))
        return
    ratios = []
    for i in range(args.pairs):
        ways = ("fresh", "forked") if i % 2 == 0 else ("forked", "fresh")
        got = {w: (fresh if w == "fresh" else forked)(args.batch, args.seconds) for w in ways}
        ratios.append(got["forked"]["samples_per_s"] / got["fresh"]["samples_per_s"])
        print(f"pair {i + 1:>2} ({ways[0]} first): fresh {got['fresh']['samples_per_s']:>10,.1f}  "
              f"forked {got['forked']['samples_per_s']:>10,.1f} samples/s  ratio {ratios[-1]:.3f}  "
              f"threads {got['fresh']['threads']}/{got['forked']['threads']}", flush=True)
    print(f"batch {args.batch}, {args.pairs} pairs: forked / fresh median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); forked slower in "
          f"{sum(r < 1 for r in ratios)} of {len(ratios)}")


if __name__ == "__main__":
    main()
