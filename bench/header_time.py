"""Seconds from ``orchestrate SPEC`` to its header line, for a small space and for a space of
100,000 configurations with the ``auto`` search (issue #39: 143 s of silence for 99,000), side by
side in one run, and where the big space's extra seconds go (in-process: the configurations, the
planner's construction and its first decision).

    python bench/header_time.py                       # this checkout
    python bench/header_time.py --root /tmp/pre39     # the same, with another checkout's code too

Each command runs from an empty folder (a new study: probe, smoke step, stores created) and again
on the study it made (a resume: one result, a budget of two), ``--rounds`` times; the median is
printed. The header comes after the probe (torch imported) whatever the space: the big space's
cost is its difference from the small one's, which issue #39 asks to keep under 2 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SMALL = {"batch_size": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], "hidden_size": [8, 16]}
BIG = {"batch_size": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
       "seq_len": list(range(8, 208, 8)), "grad_accum_steps": list(range(1, 11)), "dtype": ["float32", "bfloat16"],
       "activation_checkpointing": [False, True], "lr": [round(0.001 * i, 3) for i in range(1, 11)]}


def spec_text(name: str, space: dict[str, list]) -> str:
    dims = "\n".join(f"  {k}: {v!r}".replace("'", "").replace("True", "true").replace("False", "false")
                     for k, v in space.items())
    return (f"name: {name}\nexperiment: experiments.faults\ndevice: cpu\nspace:\n{dims}\nsearch: {{sampler: auto}}\n"
            "trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: 60}\n")


def header_s(root: Path, folder: Path, budget: int) -> float:
    """Seconds until the command's first line on stdout (the header); the command then runs on."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "spec.yaml", "--n-trials", str(budget)],
                            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    took = time.monotonic() - start
    proc.communicate(timeout=600)
    if not line.startswith("orchestrate: "):
        raise SystemExit(f"no header from {root} in {folder}: {line!r}")
    return took


def in_process(root: Path, space: dict[str, list]) -> str:
    """The big space's own costs, timed in a fresh interpreter with ``root``'s code."""
    code = f"""
import sys, time
sys.path.insert(0, {str(root)!r})
from orchestrator.spec.load import load_spec
from orchestrator.search.space import configurations, make_plan
from orchestrator.search.planner import Planner
spec = load_spec(sys.argv[1], {{}}); plan = make_plan(spec, "cpu")
t0 = time.perf_counter(); configs = configurations(plan); t1 = time.perf_counter()
(metric, direction), = spec.objective.metrics
planner = Planner(configs, plan.searched, metric, direction, "cpu", spec.search.memory_order, spec.search.band)
t2 = time.perf_counter(); planner.decide({{}}, set()); t3 = time.perf_counter()
print(f"{{len(configs):,}} configurations {{t1 - t0:.2f}} s, planner built {{t2 - t1:.2f}} s, first decision {{t3 - t2:.2f}} s")
"""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "spec.yaml").write_text(spec_text("big", space))
        out = subprocess.run([sys.executable, "-c", code, str(Path(tmp, "spec.yaml"))], capture_output=True, text=True,
                             timeout=1200, cwd=tmp)
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", action="append", type=Path, default=[], help="another checkout to time too")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    roots = [ROOT, *args.root]
    print(f"header_time: {os.uname().nodename}, {os.cpu_count()} cores; load {os.getloadavg()}")
    for root in roots:
        print(f"  {root}: {in_process(root, BIG)}")
    times: dict[tuple[Path, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for root in roots:
                for name, space in (("small", SMALL), ("big", BIG)):
                    folder = Path(tmp, name)
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir()
                    (folder / "spec.yaml").write_text(spec_text(name, space))
                    times.setdefault((root, name, "new"), []).append(header_s(root, folder, 1))
                    times.setdefault((root, name, "resume"), []).append(header_s(root, folder, 2))
    for root in roots:
        for run in ("new", "resume"):
            small = statistics.median(times[(root, "small", run)])
            big = statistics.median(times[(root, "big", run)])
            print(f"  {root.name:>12} {run:>6}: header after {small:6.2f} s (20 configurations), {big:6.2f} s "
                  f"(100,000), the big space's cost {big - small:+.2f} s")
    print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
