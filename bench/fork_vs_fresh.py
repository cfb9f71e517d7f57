"""Does a process forked from one that has imported torch train as fast as a freshly started one?
The question under ``bench/fidelity.py``, without the harness: the same small MLP training step
(AdamW, cross-entropy) timed in a fresh ``python`` that imports torch and the harness's preload
itself, and in a child forked from this process after the same imports (as the fork server does),
alternating pairs so that drift falls on both alike.

    python bench/fork_vs_fresh.py                       # 10 pairs, batch 64
    taskset -c 2,3 python bench/fork_vs_fresh.py --pairs 20 --batch 512
    python bench/fork_vs_fresh.py --interleave 300 --process-pairs 6   # taking turns (below)
    python bench/fork_vs_fresh.py --from-log run.log                    # its summary again

Prints each pair and the pairwise ratio forked / fresh, then the median ratio and how many pairs
the forked child was the slower one.

``--interleave N``: on a shared machine, whose speed moves by 10-50% from one second to the next,
two windows seconds apart cannot show 1%. So two processes are started, built and warmed up,
then take turns: N slices each of ``--steps`` training steps (tens of milliseconds), one running
while the other waits on a pipe, in the order first-second, second-first, ... Drift falls on
both within a fraction of a second. ``--process-pairs P`` such pairs of a fresh process and a
forked one, and P pairs of two fresh processes as the control (how far two processes started
the same way differ). Each pair's two processes are built and warmed up one after the other,
never together. Prints each pair's throughput ratio over all its slices, with a bootstrap 95%
interval over slice pairs, then per way the median and the geometric mean over pairs with a
bootstrap interval over pairs (a process's own speed is the noise that matters). ``--siblings``
adds pairs of two children forked from this process: whether forked children share a speed.
``--from-log LOG`` prints the summary again from a log's pair lines (a run cut off by its time
limit prints none).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]


def imports() -> None:
    """What a trial process has loaded before its configuration arrives (the fork server's preload)."""
    sys.path.insert(0, str(ROOT))
    from orchestrator.harness.child import preload

    preload("experiments.mlp")


def warmed_step(batch: int):  # noqa: ANN201
    """The training step, built and run 20 times."""
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
    return step


def measure(batch: int, seconds: float) -> dict:
    import torch

    step = warmed_step(batch)
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


def serve_slices(batch: int, steps: int, orders: TextIO, answers: TextIO) -> None:
    """Build and warm up, say ``ready``, then per ``go`` line time ``steps`` steps and answer
    with the seconds they took; any other line ends it."""
    import torch

    step = warmed_step(batch)
    answers.write(f"ready {torch.get_num_threads()}\n")
    answers.flush()
    for line in orders:
        if line.strip() != "go":
            return
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        answers.write(f"{time.perf_counter() - t0}\n")
        answers.flush()


class Slices:
    """One process built, warmed up and waiting for ``go``: forked from this one, or fresh."""

    def __init__(self, way: str, batch: int, steps: int) -> None:
        self.way, self.pid, self.proc = way, None, None
        if way == "forked":  # the fork server's way: a child of this process, after its imports
            to_child, orders = os.pipe()
            answers, from_child = os.pipe()
            self.pid = os.fork()
            if self.pid == 0:
                os.close(orders)
                os.close(answers)
                try:
                    serve_slices(batch, steps, os.fdopen(to_child), os.fdopen(from_child, "w"))
                finally:
                    os._exit(0)
            os.close(to_child)
            os.close(from_child)
            self.orders, self.answers = os.fdopen(orders, "w", buffering=1), os.fdopen(answers)
        else:
            self.proc = subprocess.Popen([sys.executable, __file__, "--serve-slices", "--batch", str(batch),
                                          "--steps", str(steps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True, bufsize=1)
            self.orders, self.answers = self.proc.stdin, self.proc.stdout
        self.threads = 0

    def ready(self) -> None:
        """Wait for ``ready``: built and warmed up."""
        self.threads = int(self.answers.readline().split()[1])

    def turn(self, pause_s: float = 0.01) -> float:
        time.sleep(pause_s)  # the other one's threads stop spinning first
        self.orders.write("go\n")
        return float(self.answers.readline())

    def close(self) -> None:
        self.orders.write("stop\n")
        self.orders.close()
        if self.pid is not None:
            os.waitpid(self.pid, 0)
        else:
            self.proc.wait()


def interleave(ways: tuple[str, str], batch: int, steps: int, slices: int, seed: int) -> dict:
    """Two processes alive at once, taking turns (see the module's docstring): the throughput
    ratio second / first over all slices, with a bootstrap 95% interval over slice pairs."""
    # one at a time: the first is built and warmed up alone before the second starts. Started
    # together, whichever warmed up first ran faster for its whole life, forked or fresh (two
    # children forked from one process: the second slower in 10 of 10 pairs, by 5% on average)
    a, b = Slices(ways[0], batch, steps), None
    try:
        a.ready()
        b = Slices(ways[1], batch, steps)
        b.ready()
        for _ in range(4):  # settle: both have run before anything counts
            a.turn(), b.turn()
        taken: list[tuple[float, float]] = []
        for i in range(slices):
            if i % 2 == 0:
                ta = a.turn()
                taken.append((ta, b.turn()))
            else:
                tb = b.turn()
                taken.append((a.turn(), tb))
    finally:
        a.close()
        if b is not None:
            b.close()

    def ratio(idx: list[int]) -> float:
        return sum(taken[i][0] for i in idx) / sum(taken[i][1] for i in idx)

    rng = random.Random(seed)
    boot = sorted(ratio([rng.randrange(slices) for _ in range(slices)]) for _ in range(1000))
    return {"ratio": ratio(list(range(slices))), "low": boot[25], "high": boot[974],
            "slice_s": statistics.median([t for pair in taken for t in pair]), "threads": (a.threads, b.threads),
            "rates": (slices * steps * batch / sum(t for t, _ in taken), slices * steps * batch / sum(t for _, t in taken))}


def interleaved(batch: int, steps: int, slices: int, process_pairs: int, siblings: bool = False) -> None:
    """``process_pairs`` pairs of (fresh, forked) processes and as many (fresh, fresh) ones, in
    turn: the second tells how far two processes started the same way differ (the floor under
    any fork-against-fresh figure: a process's speed is partly its own)."""
    got: dict[str, list[dict]] = {"fresh, forked": [], "fresh, fresh": []}
    if siblings:
        got["forked, forked"] = []
    for k in range(process_pairs):
        for name in got:
            r = interleave(tuple(name.split(", ")), batch, steps, slices, seed=k)  # type: ignore[arg-type]
            got[name].append(r)
            print(f"pair {k + 1:>2} {name:<13}: {r['rates'][0]:>11,.1f} and {r['rates'][1]:>11,.1f} samples/s, "
                  f"second / first {r['ratio']:.4f} (95% interval {r['low']:.4f}-{r['high']:.4f}; "
                  f"slices {r['slice_s'] * 1000:.0f} ms, threads {r['threads'][0]}/{r['threads'][1]})", flush=True)
    print(f"batch {batch}, {process_pairs} process pairs each, {slices} interleaved slices of {steps} steps each way per pair")
    summarize({name: [round(r["ratio"], 4) for r in rs] for name, rs in got.items()})  # as printed: --from-log agrees


def over_pairs(ratios: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean of per-pair ratios with a bootstrap 95% interval over pairs of
    processes: the expected ratio, with each process's own speed counted as the noise it is."""
    def gmean(xs: list[float]) -> float:
        return math.exp(statistics.fmean(math.log(x) for x in xs))

    rng = random.Random(seed)
    boot = sorted(gmean([rng.choice(ratios) for _ in ratios]) for _ in range(2000))
    return gmean(ratios), boot[50], boot[1949]


def summarize(got: dict[str, list[float]]) -> None:
    """The per-way lines and the verdict, from each pair's ratio second / first."""
    for name, rs in got.items():
        if not rs:
            continue
        ratios = sorted(rs)
        mean, low, high = over_pairs(ratios)
        print(f"  {name:<13} second / first: median {statistics.median(ratios):.4f}, min {ratios[0]:.4f}, "
              f"max {ratios[-1]:.4f}; second slower in {sum(x < 1 for x in ratios)} of {len(ratios)}; "
              f"geometric mean {mean:.4f} (95% interval over pairs {low:.4f}-{high:.4f})")
    forked, control = got["fresh, forked"], got["fresh, fresh"]
    mean, low, high = over_pairs(forked)
    print(f"forked / fresh: {mean:.4f} (95% interval {low:.4f}-{high:.4f}) over {len(forked)} pairs of processes"
          + (f"; two fresh processes differed by up to {max(abs(r - 1) for r in control):.1%}" if control else ""))
    if got.get("forked, forked"):
        print(f"two children forked from this one process differed by up to "
              f"{max(abs(r - 1) for r in got['forked, forked']):.1%}")


def from_log(path: str) -> None:
    """The summary again from a log's pair lines (a run cut off by its time limit prints none)."""
    got: dict[str, list[float]] = {"fresh, forked": [], "fresh, fresh": []}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"pair +\d+ (\w+, \w+) *:.*second / first ([\d.]+)", line)
        if m:
            got.setdefault(m[1], []).append(float(m[2]))
    if not got["fresh, forked"]:
        sys.exit(f"{path}: no 'pair N fresh, forked: ...' line (the lines an --interleave run prints)")
    print(f"{path}: {' and '.join(str(len(rs)) for rs in got.values())} pairs of processes")
    summarize(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0, help="each timed window")
    ap.add_argument("--interleave", type=int, metavar="N", help="both ways alive, N slices each, taking turns")
    ap.add_argument("--process-pairs", type=int, default=4, help="pairs of processes each way (with --interleave)")
    ap.add_argument("--steps", type=int, default=40, help="training steps per slice (with --interleave)")
    ap.add_argument("--siblings", action="store_true",
                    help="also pairs of two children forked from this process (with --interleave): do they share a speed?")
    ap.add_argument("--from-log", metavar="LOG", help="print the summary of an --interleave run's log again")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--serve-slices", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.from_log:
        from_log(args.from_log)
        return
    imports()
    if args.serve_slices:
        serve_slices(args.batch, args.steps, sys.stdin, sys.stdout)
        return
    if args.child:
        print(json.dumps(measure(args.batch, args.seconds)))
        return
    if args.interleave:
        interleaved(args.batch, args.steps, args.interleave, args.process_pairs, args.siblings)
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
