"""Where a trial's time goes: a sweep of near-empty trials and a real one, phase by phase, against
floors measured in the same run (bare ``python``, bare ``import torch``, ``import torch`` plus
device init).

    python bench/overhead.py                      # this checkout, on the CPU
    python bench/overhead.py --device cuda        # on an NVIDIA GPU
    python bench/overhead.py --compare /tmp/old   # another checkout's code side by side, alternating

Each sweep runs the installed ``orchestrate`` in a fresh folder with ``ORCHESTRATE_TIMELINE`` set:
the orchestrator appends wall-clock events (``orchestrator/timeline.py``) and each trial process
writes its own phase marks into its result file. Per trial (median over the sweep's trials):

- ``wall``: the sweep's wall time per trial, from its first trial's start to its last trial's end
  (the command's start-up and summary are in ``command`` and ``resume``);
- ``ask``: Optuna's ask + suggest; ``mlflow start``: creating the trial's MLflow run, when the loop
  waits for it;
- ``orchestrator``: the orchestrator's own time on the critical path: from trial k's process
  exit to trial k+1's start (its configuration sent to a waiting interpreter, or its process
  spawned);
- ``spawn + imports``: from the trial's start to the end of its imports (Python, torch, the
  harness), when the trial waited for them (0 when a pre-started interpreter was ready);
- ``init + warm-up``: device init, build, warm-up steps (the trial's ``startup_s`` covers these);
- ``gate``: the wait before the window for this device's pre-started interpreter to be idle;
- ``window``: the timed window (``measure_s``); ``result``: from the window's end to the result
  file; ``exit``: from the result file to the process's exit being seen;
- ``overhead``: per trial, the time since the previous trial's result minus its own
  ``startup_s + measure_s`` (the median over trials after the first): the figure issue #11
  targets; ``wall - mean(startup_s + measure_s)`` is ``overhead (mean)``, which a few slow
  trials or a few long windows move.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORCHESTRATE = [sys.executable, "-m", "orchestrator.cli"]

DEVICE_INIT = {
    "cpu": "import torch; (torch.ones(64, 64) @ torch.ones(64, 64)).sum().item()",
    "cuda": "import torch; x = torch.ones(64, 64, device='cuda'); (x @ x).sum().item()",
    "mps": "import torch; x = torch.ones(64, 64, device='mps'); (x @ x).sum().item()",
}

EMPTY_SPEC = """\
# near-empty trials: a 1-layer MLP of width 8, one warm-up step, one measured step
name: overhead_empty
experiment: experiments.mlp
device: {device}
fixed: {{in_features: 8, hidden_size: 8, num_layers: 1, num_classes: 2}}
space:
  batch_size: {batches}
objective: {{metric: samples_per_s, direction: maximize}}
search: {{sampler: grid}}
trial: {{warmup_steps: 1, measure_steps: 1, min_measure_s: 0.0, timeout_s: 300}}
"""


def floor(code: str | None, env: dict[str, str], repeats: int) -> float:
    """Median wall time of ``python -c CODE`` (``None``: ``python -c pass``)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code or "pass"], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_sweep(spec_text: str, code_dir: Path | None, device: str, env: dict[str, str],
              extra_args: list[str]) -> dict:
    """Run a sweep in a fresh folder; return its events, trial results and command timings."""
    work = Path(tempfile.mkdtemp(prefix="overhead-"))
    try:
        spec = work / "spec.yaml"
        spec.write_text(spec_text)
        events = work / "events.jsonl"
        run_env = {**env, "ORCHESTRATE_TIMELINE": str(events)}
        src = str(code_dir or ROOT)
        run_env["PYTHONPATH"] = src + os.pathsep + str(ROOT) + os.pathsep + run_env.get("PYTHONPATH", "")
        t0 = time.perf_counter()
        proc = subprocess.run([*ORCHESTRATE, str(spec), *extra_args], cwd=work, env=run_env,
                              capture_output=True, text=True)
        command_s = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"the sweep failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        first = read_events(events)
        events.unlink()
        t0 = time.perf_counter()
        again = subprocess.run([*ORCHESTRATE, str(spec), *extra_args], cwd=work, env=run_env,
                               capture_output=True, text=True)
        resume_s = time.perf_counter() - t0
        if again.returncode != 0:
            sys.exit(f"the resume failed (rc {again.returncode}):\n{again.stderr[-3000:]}")
        results = {}
        for path in sorted(work.glob("mlruns/.trials/*/trial-*/result.json")):
            results[int(path.parent.name.split("-")[1])] = json.loads(path.read_text())
        return {"events": first, "results": results, "command_s": command_s, "resume_s": resume_s}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def breakdown(run: dict) -> dict[str, float | None]:
    """Per-trial phase durations (medians over trials), from the events and the result files."""
    by: dict[int, dict[str, float]] = {}
    for e in run["events"]:
        if e.get("trial") is not None:
            by.setdefault(e["trial"], {}).setdefault(e["event"], e["t"])
    ask_start = [e["t"] for e in run["events"] if e["event"] == "ask_start"]
    # a trial ends when its result is written: the loop tells it then, and does not wait for the
    # process's exit (the last trial's process may be ended by the sweep's close, with no event)
    trials = sorted(n for n in by if "start" in by[n] and n in run["results"]
                    and ("exited" in by[n] or "result_written" in run["results"][n].get("timeline", {})))
    if len(trials) < 2:
        sys.exit("fewer than two measured trials: nothing to break down")
    phases: dict[str, list[float]] = {k: [] for k in (
        "ask", "mlflow start", "orchestrator", "spawn + imports", "init + warm-up", "gate", "window",
        "result", "exit", "startup_s + measure_s", "overhead")}
    for i, n in enumerate(trials):
        ev, res = by[n], run["results"][n]
        tl = res.get("timeline", {})
        m = res.get("metrics", {})
        if "ask_end" in ev:
            before = [t for t in ask_start if t <= ev["ask_end"]]
            if before:
                phases["ask"].append(ev["ask_end"] - before[-1])
        if "mlflow_started" in ev and "ask_end" in ev and ev["mlflow_started"] <= ev["start"]:
            phases["mlflow start"].append(ev["mlflow_started"] - ev["ask_end"])
        if i:
            prev = by[trials[i - 1]]
            if "exited" in prev:
                phases["orchestrator"].append(ev["start"] - prev["exited"])
        got = max(tl.get("imports_done", ev["start"]), tl.get("config_received", ev["start"]))
        phases["spawn + imports"].append(max(0.0, got - ev["start"]))
        if "warmup_done" in tl:
            phases["init + warm-up"].append(tl["warmup_done"] - got)
            phases["gate"].append(tl["window_start"] - tl["warmup_done"])
            phases["window"].append(tl["window_end"] - tl["window_start"])
            phases["result"].append(tl["result_written"] - tl["window_end"])
            if "exited" in ev:
                phases["exit"].append(ev["exited"] - tl["result_written"])
        if "startup_s" in m and "measure_s" in m:
            phases["startup_s + measure_s"].append(m["startup_s"] + m["measure_s"])
    starts = [by[n]["start"] for n in trials]
    ends = [by[n].get("exited", run["results"][n].get("timeline", {}).get("result_written", 0.0))
            for n in trials]
    # steady state: from the first trial's start to the last one's end, per trial after the first
    wall = (ends[-1] - starts[0]) / len(trials)
    out: dict[str, float | None] = {k: (statistics.median(v) if v else None) for k, v in phases.items()}
    out["wall"] = wall
    own = [res["metrics"]["startup_s"] + res["metrics"]["measure_s"] for res in
           (run["results"][n] for n in trials) if "startup_s" in res.get("metrics", {})]
    done = [run["results"][n].get("timeline", {}).get("result_written", ends[i]) for i, n in enumerate(trials)]
    per_trial = [done[i] - done[i - 1] - (m["startup_s"] + m["measure_s"])
                 for i, m in ((i, run["results"][trials[i]].get("metrics", {})) for i in range(1, len(trials)))
                 if "startup_s" in m and "measure_s" in m]
    out["overhead"] = statistics.median(per_trial) if per_trial else None
    out["overhead (mean)"] = wall - statistics.mean(own) if own else None
    cli_start = next(e["t"] for e in run["events"] if e["event"] == "cli_start")
    out["first trial after start"] = starts[0] - cli_start
    out["first result after start"] = done[0] - cli_start
    out["command"] = run["command_s"]
    out["resume"] = run["resume_s"]
    out["trials"] = float(len(trials))
    return out


ORDER = ("wall", "ask", "mlflow start", "orchestrator", "spawn + imports", "init + warm-up", "gate",
         "window", "result", "exit", "startup_s + measure_s", "overhead", "overhead (mean)",
         "first trial after start", "first result after start",
         "command", "resume", "trials")


def print_table(title: str, columns: dict[str, dict[str, float | None]], floors: dict[str, float]) -> None:
    names = list(columns)
    print(f"\n{title}")
    head = f"  {'per trial (median), s':<26s}" + "".join(f"{n:>14s}" for n in names)
    head += "".join(f"{'x import torch':>15s}" for _ in names[:1])
    if len(names) == 2:
        head += f"{'ratio':>9s}"
    print(head)
    for key in ORDER:
        vals = [columns[n].get(key) for n in names]
        row = f"  {key:<26s}" + "".join(f"{v:>14.3f}" if v is not None else f"{'-':>14s}" for v in vals)
        if key in ("wall", "overhead", "overhead (mean)", "orchestrator", "resume") and vals[-1] is not None:
            row += f"{vals[-1] / floors['import torch']:>15.2f}"
        elif names:
            row += f"{'':>15s}"
        if len(names) == 2 and vals[0] and vals[1] is not None and key != "trials":
            row += f"{vals[1] / vals[0]:>9.2f}"
        print(row)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"))
    p.add_argument("--trials", type=int, default=8, help="near-empty trials per sweep")
    p.add_argument("--real", type=Path, default=ROOT / "sweeps" / "mlp_classifier.yaml",
                   help="the real sweep (a spec path; its device is set to --device)")
    p.add_argument("--no-real", action="store_true", help="only the near-empty sweep")
    p.add_argument("--compare", type=Path, help="another checkout's root: its code runs the same sweeps, "
                   "alternating with this one's")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds (with --compare)")
    p.add_argument("--floor-repeats", type=int, default=5)
    p.add_argument("--json", type=Path, help="also write every figure to this file")
    args = p.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATE_TIMELINE"}
    env["PYTHONUNBUFFERED"] = "1"
    floors = {"python": floor(None, env, args.floor_repeats),
              "import torch": floor("import torch", env, args.floor_repeats),
              "import torch + device init": floor(DEVICE_INIT[args.device], env, args.floor_repeats)}
    print(f"floors ({args.device}, median of {args.floor_repeats}): " + ", ".join(
        f"{k} {v:.3f} s" for k, v in floors.items()))

    batches = "[" + ", ".join(str(b) for b in range(1, args.trials + 1)) + "]"
    sweeps = {"near-empty trials": EMPTY_SPEC.format(device=args.device, batches=batches)}
    if not args.no_real:
        text = args.real.read_text()
        sweeps[f"real: {args.real.name}"] = text
    codes: dict[str, Path | None] = {"this checkout": None}
    if args.compare:
        codes = {f"{args.compare.name}": args.compare, "this checkout": None}
    results: dict[str, dict[str, list[dict]]] = {s: {c: [] for c in codes} for s in sweeps}
    for r in range(args.rounds):
        for sweep_name, text in sweeps.items():
            order = list(codes.items()) if r % 2 == 0 else list(codes.items())[::-1]
            for code_name, code_dir in order:  # alternating, first one way then the other
                run = run_sweep(text, code_dir, args.device, env, ["--device", args.device])
                results[sweep_name][code_name].append(breakdown(run))
    report = {"floors": floors, "sweeps": {}}
    for sweep_name, by_code in results.items():
        columns = {c: {k: statistics.median([r[k] for r in rs if r.get(k) is not None])
                       if any(r.get(k) is not None for r in rs) else None for k in ORDER}
                   for c, rs in by_code.items()}
        report["sweeps"][sweep_name] = columns
        print_table(sweep_name, columns, floors)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
