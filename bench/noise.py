"""A real CPU sweep under a load that comes and goes: does the command say so, and does the same
sweep run twice give the same best, or say why it could not tell? (issue #38)

    python bench/noise.py                      # busy loop on, two sweeps, then one configuration x8
    python bench/noise.py --json docs/logs/noise_cpu.json --no-load   # the same on a machine left alone

It starts a busy loop of its own (``--spinners`` processes, each computing for 1-4 s and sleeping
for 1-4 s, seeded) and, while it runs:

1. runs the same small auto-search sweep twice (``experiments.mlp``, batch x precision x width, two
   studies of their own in a temporary folder), each with the installed ``orchestrate`` command
   as a user runs it, and reads from its output: the ``Noise:`` line, the best configuration, and
   whether the stop said it was unsure of the answer;
2. measures one configuration ``--repeats`` times (each in its own process, ``trial.repeats``) and
   compares how far the processes' throughputs spread (the standard deviation of their log) with
   how far each window's parts did (``throughput_ci95 / 1.96``, ``harness/spread``): the model
   takes the second for the first.

Then it stops its busy loop (its own processes only) and prints the figures with ``uptime``. The
figures are the machine's: on a 2-core machine shared with other work, expect the windows' parts
and the processes to spread by tens of percent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SPEC = """name: {name}
experiment: experiments.mlp
device: cpu
fixed:
  in_features: 64
  num_layers: 4
space:
  batch_size: [32, 128, 512]
  dtype: [float32, bfloat16]
  hidden_size: [128, 256]
objective:
  metric: samples_per_s
  direction: maximize
trial:
  warmup_steps: 2
  measure_steps: 5
  min_measure_s: {window}
  timeout_s: 120
"""
REPEATED = """name: {name}
experiment: experiments.mlp
device: cpu
fixed:
  in_features: 64
  num_layers: 4
  batch_size: 128
  dtype: float32
  hidden_size: 256
space:
  seed: [0]
objective:
  metric: samples_per_s
  direction: maximize
search:
  sampler: grid
trial:
  warmup_steps: 2
  measure_steps: 5
  min_measure_s: {window}
  timeout_s: 120
  repeats: {repeats}
"""
SPIN = """
import random, sys, time
random.seed(int(sys.argv[1]))
while True:
    until = time.time() + random.uniform(1.0, 4.0)
    while time.time() < until:
        pass
    time.sleep(random.uniform(1.0, 4.0))
"""


def orchestrate() -> list[str]:
    """The installed command beside this Python (a user's ``.venv/bin/orchestrate``)."""
    here = Path(sys.executable).parent / "orchestrate"
    return [str(here)] if here.exists() else [sys.executable, "-m", "orchestrator.cli"]


def sweep(folder: Path, spec_text: str, name: str) -> tuple[str, float]:
    """Run ``orchestrate SPEC`` in ``folder``; its output and wall seconds."""
    spec = folder / f"{name}.yaml"
    spec.write_text(spec_text)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    proc = subprocess.run([*orchestrate(), spec.name], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=1800)
    return proc.stdout + proc.stderr, time.perf_counter() - started


def read_sweep(out: str) -> dict[str, Any]:
    """What a sweep's output says: its best, its stop line, its noise line."""
    lines = out.splitlines()
    best = next((ln.split(": ", 2)[2].split(" -> ")[0] for ln in lines if ln.startswith("Best: trial ")), None)
    stopped = next((ln[len("Stopped: "):] for ln in lines if ln.startswith("Stopped: ")), None)
    noise = next((ln for ln in lines if ln.startswith("Noise: ")), None)
    trials = sum(1 for ln in lines if ln.startswith("#"))
    return {"best": best, "stopped": stopped, "unsure": bool(stopped and stopped.startswith("unsure")),
            "noise_line": noise, "trials": trials}


def repeated_figures(folder: Path, name: str) -> dict[str, Any]:
    """The processes' spread against their windows' own, from the study's one trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{folder / 'mlruns' / 'optuna.db'}")
    runs = next(t.user_attrs.get("repeat_metrics") or [] for t in study.trials if t.user_attrs.get("status") == "ok")
    values = [m["samples_per_s"] for m in runs]
    within = [m["throughput_ci95"] / 1.96 for m in runs if m.get("throughput_ci95") is not None]
    between = statistics.stdev(math.log(v) for v in values) if len(values) > 1 else None
    return {"processes": len(values), "samples_per_s": [round(v, 1) for v in values],
            "between_sd": None if between is None else round(between, 4),
            "within_sd_median": round(statistics.median(within), 4) if within else None,
            "ratio": round(between / statistics.median(within), 2) if between and within else None}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spinners", type=int, default=1, help="busy-loop processes (default 1)")
    p.add_argument("--no-load", action="store_true", help="start no busy loop (the machine as it is)")
    p.add_argument("--repeats", type=int, default=8, help="processes of the one configuration (default 8)")
    p.add_argument("--window", type=float, default=0.5, help="trial.min_measure_s (default 0.5)")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    print(f"before: {uptime()}", flush=True)
    spinners = [] if args.no_load else [
        subprocess.Popen([sys.executable, "-c", SPIN, str(i)]) for i in range(args.spinners)]
    figures: dict[str, Any] = {"load": "none" if args.no_load else f"{args.spinners} busy loop(s), 1-4 s on, 1-4 s off"}
    try:
        with tempfile.TemporaryDirectory(prefix="noise-bench-") as tmp:
            folder = Path(tmp)
            for run in ("first", "second"):
                name = f"noise_bench_{run}"
                out, wall = sweep(folder, SPEC.format(name=name, window=args.window), name)
                got = read_sweep(out)
                got["wall_s"] = round(wall, 1)
                figures[run] = got
                print(f"\n== sweep {run} ({wall:.0f} s, {got['trials']} trial lines; during it: {uptime()})")
                print("\n".join(ln for ln in out.splitlines() if ln.startswith(("#", "Stopped:", "Best:", "Noise:"))))
            name = "noise_bench_repeated"
            out, wall = sweep(folder, REPEATED.format(name=name, window=args.window, repeats=args.repeats), name)
            figures["repeated"] = repeated_figures(folder, name)
            print(f"\n== one configuration, {args.repeats} processes ({wall:.0f} s): {figures['repeated']}")
    finally:
        for s in spinners:  # our own busy loop only
            s.terminate()
            s.wait(timeout=10)
    first, second = figures["first"], figures["second"]
    same = first["best"] == second["best"]
    told = all(f["noise_line"] for f in (first, second))
    explained = same or first["unsure"] or second["unsure"]
    figures.update(same_best=same, noise_line_printed=told, same_best_or_said_unsure=explained, after=uptime())
    print(f"\nafter: {figures['after']}")
    print(f"noise line printed by both sweeps: {told}")
    print(f"same best twice: {same} ({first['best']!r} / {second['best']!r}); "
          f"where not, a stop said it was unsure: {explained}")
    rep = figures["repeated"]
    print(f"one configuration, {rep['processes']} processes: sd of log throughput between processes "
          f"{rep['between_sd']}, median within a window {rep['within_sd_median']} (ratio {rep['ratio']})")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if explained and (told or args.no_load) else 1


if __name__ == "__main__":
    sys.exit(main())
