"""The commands that only read a finished study, against a bare ``import torch`` on this machine:
``orchestrate best SPEC``, ``orchestrate report SPEC --format json``, ``orchestrate report SPEC``
(text), and the finished study's own command, ``orchestrate SPEC``, run again. Issue #20's
targets: ``best`` and ``report --format json`` at most 0.7x ``import torch``, the finished study's
command at most 0.5x.

    python bench/commands.py                       # this checkout, 7 rounds
    python bench/commands.py --compare /tmp/old    # another checkout's code too, side by side
    python bench/commands.py --project DIR         # DIR holds spec.yaml and its finished study

The study: without ``--project``, this checkout's ``orchestrate`` first runs a small real sweep in
a temporary folder (``experiments.faults`` on the CPU, 6 trials that end ok, oom and diverged;
none ends ``error``, which would run again on every invocation; about 30 s). Each round runs ``python -c "import torch"`` and every command of every
checkout once, each in a fresh interpreter, in an order rotated from round to round. A command's
ratio is the median over rounds of its time divided by ``import torch``'s time in the same round
(load from other processes moves both); its seconds are the median of its times. Last, each
command is run once more to list the heavy packages it imported (torch, mlflow, optuna, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "mlflow", "optuna", "sqlalchemy", "alembic", "matplotlib", "numpy", "pandas", "yaml")
COMMANDS = {"best": ["best", "spec.yaml"], "report --format json": ["report", "spec.yaml", "--format", "json"],
            "report (text)": ["report", "spec.yaml"], "the sweep again": ["spec.yaml"]}
TARGETS = {"best": 0.7, "report --format json": 0.7, "the sweep again": 0.5}
SPEC = """\
name: bench_commands
experiment: experiments.faults
device: cpu
fixed: {batch_size: 8}
space:
  fault: [none, oom_cpu, nan]
  hidden_size: [16, 32]
search: {sampler: grid, max_failures: 20}
trial: {warmup_steps: 1, measure_steps: 3, min_measure_s: 0.1, timeout_s: 60}
"""
MODULES = ("import json, os, sys\nfrom orchestrator.cli import main\nmain(sys.argv[1:])\n"
           "json.dump(sorted({m.split('.')[0] for m in sys.modules}), open(os.environ['BENCH_MODULES'], 'w'))\n")


def env_for(code: Path) -> dict[str, str]:
    """This environment, with ``code``'s ``orchestrator`` package first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
    return took


def make_study(folder: Path) -> Path:
    (folder / "spec.yaml").write_text(SPEC)
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "spec.yaml"], cwd=folder, env=env_for(ROOT),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the sweep failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return folder


def imported(code: Path, args: list[str], cwd: Path) -> list[str]:
    """The heavy top-level packages the command imported."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-c", MODULES, *args], cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, env={**env_for(code), "BENCH_MODULES": out.name})
        return [m for m in HEAVY if m in json.loads(Path(out.name).read_text())]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds (at least 5 for a median)")
    p.add_argument("--compare", type=Path, help="another checkout's root: its code runs the same commands")
    p.add_argument("--project", type=Path, help="a folder holding spec.yaml and its finished study")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    codes = {"this checkout": ROOT}
    if args.compare:
        codes = {args.compare.name: args.compare.resolve(), **codes}
    project = args.project.resolve() if args.project else make_study(Path(tempfile.mkdtemp(prefix="bench-commands-")))
    runs = [(c, name) for c in codes for name in COMMANDS]
    torch_s: list[float] = []
    times: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    for r in range(args.rounds):
        order = [None] + runs  # None: import torch
        k = r % len(order)
        for run in order[k:] + order[:k]:  # rotated: no command always runs right after another
            if run is None:
                torch_s.append(timed([sys.executable, "-c", "import torch"], project, dict(os.environ)))
            else:
                times[run].append(timed([sys.executable, "-m", "orchestrator.cli", *COMMANDS[run[1]]], project,
                                        env_for(codes[run[0]])))
    base = statistics.median(torch_s)
    print(f"import torch: median {base:.2f} s over {args.rounds} rounds "
          f"(from {min(torch_s):.2f} to {max(torch_s):.2f} s); study in {project}")
    print(f"{'command':<22s} {'code':<16s} {'median s':>9s} {'x import torch':>15s}  imports")
    figures = {"import_torch_s": torch_s, "commands": []}
    for code, name in runs:
        ratio = statistics.median(t / b for t, b in zip(times[(code, name)], torch_s))
        heavy = imported(codes[code], COMMANDS[name], project)
        target = TARGETS.get(name)
        mark = "" if target is None else f"  (target <= {target}: {'met' if ratio <= target else 'NOT met'})"
        print(f"{name:<22s} {code:<16s} {statistics.median(times[(code, name)]):>9.2f} {ratio:>15.2f}  "
              f"{', '.join(heavy) or '-'}{mark}")
        figures["commands"].append({"command": name, "code": code, "seconds": times[(code, name)], "ratio": ratio,
                                    "imports": heavy})
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
