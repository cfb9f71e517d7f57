"""Seconds to the first trial: a whole ``orchestrate SPEC`` from an empty folder, mark by mark,
against a bare ``import torch`` on this machine (issue #29).

    python bench/first_trial.py                          # a one-trial CPU sweep, this checkout
    python bench/first_trial.py --compare /tmp/main      # another checkout's code too, side by side
    python bench/first_trial.py --spec sweeps/bert_memory.yaml --rounds 3   # the headline (a GPU)

The one-trial sweep (without ``--spec``): ``experiments.mlp`` (its default width and depth) on the
CPU, one batch size, the trial settings a spec gets by default (3 warm-up steps, a window of at
least 1 s). Each round runs ``python -c "import torch"`` and the command with every checkout's
code (``--compare DIR``: ``DIR/orchestrator`` and ``DIR/experiments``, e.g. ``git archive main
orchestrator experiments | tar -x -C DIR``), each in a fresh empty folder, in an order rotated
from round to round. Before the rounds each checkout runs once untimed (the machine's MLflow store
template, ``tracking.template_path``, then exists, as on any machine that has run a sweep once;
the files are in the page cache).

The command runs with ``ORCHESTRATE_TIMELINE`` (``orchestrator/timeline.py``: the command's marks)
and the first trial's result file gives the trial's own marks (``harness/marks.py``). Per mark it
prints the median over rounds of the seconds since the command was started (this script's
clock, before the process is spawned) and the median of their ratios to ``import torch`` in the
same round; last, when the prompt returned (the process was reaped), the CPU seconds of the
whole command (the orchestrator and every process it reaped), and the machine's load. Then, per
checkout, every trial's start-up phase by phase (its result's marks), pooled over the rounds, with
its step time: where a sweep's ``startup_s`` goes, beside what ``bench/startup.py`` shows for one
configuration. Marks a
checkout does not record are shown as ``-``. Each round also times, as a floor, the imports a
trial needs in one process (the experiment, ``torch._dynamo``, which every torch optimizer's step
imports, and ``torch.optim``: what the slot's fork server imports before the first trial); "beyond
the trial's imports and window" is, per round, the command's time less that floor and less the
first trial's timed window: what the orchestrator and the trial's own start-up add.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.harness import marks as MK  # noqa: E402 - standard library only (no torch)
ONE_TRIAL = """\
name: one_trial
experiment: experiments.mlp
device: cpu
space:
  batch_size: [64]
search: {sampler: grid}
trial: {timeout_s: 300}
"""
MARKS = [  # (label, where: "cmd" first event, "cmd-last" last event, "trial" trial 0's mark)
    ("Python and the CLI imported", "cmd", "cli_start"),
    ("probe asked for", "cmd", "probe_start"),
    ("MLflow, Optuna imported", "cmd", "imports_done"),
    ("probe answered", "cmd", "probe_answered"),
    ("smoke step answered", "cmd", "smoke_answered"),
    ("stores opened", "cmd", "stores_opened"),
    ("sweep loop started", "cmd", "loop_start"),
    ("first trial started", "cmd", "start"),
    ("  its window opened", "trial", "window_start"),
    ("  its window closed", "trial", "window_end"),
    ("last trial finished (told)", "cmd-last", "told"),
    ("stores closed (MLflow settled)", "cmd", "stores_closed"),
    ("summary printed", "cmd", "summary_printed"),
    ("command's own end", "cmd", "exit"),
]


def env_for(code: Path) -> dict[str, str]:
    """This environment, with ``code``'s ``orchestrator`` and ``experiments`` first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def spawn_timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(start, end) of the process by ``time.time()``: from before its spawn to its reaping."""
    start = time.time()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    end = time.time()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} in {cwd} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return start, end


def run_command(code: Path, spec_text: str, keep: bool) -> dict[str, float]:
    """One command from an empty folder: {mark: seconds since the start}, ``prompt`` and ``cpu_s``."""
    folder = Path(tempfile.mkdtemp(prefix="bench-first-trial-"))
    (folder / "spec.yaml").write_text(spec_text)
    events = folder / "events.jsonl"
    env = {**env_for(code), "ORCHESTRATE_TIMELINE": str(events)}
    before = resource_children()
    start, end = spawn_timed([sys.executable, "-m", "orchestrator.cli", "spec.yaml"], folder, env)
    cpu = resource_children() - before  # the command and every process it reaped
    lines = [json.loads(ln) for ln in events.read_text().splitlines() if ln.strip()] if events.exists() else []
    out: dict[str, float] = {"prompt": end - start, "cpu_s": cpu}
    for label, where, name in MARKS:
        hits = [e["t"] for e in lines if e["event"] == name and (name not in ("start", "told") or e.get("trial") is not None)]
        if where == "cmd" and hits:
            out[label] = hits[0] - start
        elif where == "cmd-last" and hits:
            out[label] = hits[-1] - start
        elif where == "trial":
            results = sorted(glob.glob(str(folder / "mlruns" / ".trials" / "*" / "trial-0000" / "result.json")))
            if results:
                mark = json.loads(Path(results[0]).read_text()).get("timeline", {}).get(name)
                if mark is not None:
                    out[label] = mark - start
    exit_cpu = [e.get("cpu") for e in lines if e["event"] == "exit"]
    if exit_cpu and exit_cpu[0] is not None:
        out["orchestrator_cpu_s"] = exit_cpu[0]
    results = [json.loads(Path(p).read_text())
               for p in glob.glob(str(folder / "mlruns" / ".trials" / "*" / "trial-*" / "result.json"))]
    startups = [r.get("metrics", {}).get("startup_s") for r in results]
    startups = [s for s in startups if s is not None]
    if startups:
        out["startup_s"] = statistics.median(startups)
        out["trials"] = len(startups)
    out["phases"] = [trial_phases(r) for r in results if r.get("status") == "ok"]
    if not keep:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return out


def trial_phases(result: dict) -> dict[str, float]:
    """One trial's start-up, phase by phase (``harness/marks.py``), with its step time (the timed
    window over its steps): where ``startup_s`` goes, and how much of it is the warm-up doing the
    configuration's own steps."""
    tl, metrics = result.get("timeline", {}), result.get("metrics", {})
    warmups = sum(1 for k in tl if k.startswith("warmup_") and k[len("warmup_"):].isdigit())
    marks = [m for m in MK.startup_marks(warmups) if m in tl]
    out = {"forked -> device": tl[MK.DEVICE] - tl["forked"]} if "forked" in tl and MK.DEVICE in tl else {}
    out.update({f"{a} -> {b}": tl[b] - tl[a] for a, b in zip(marks, marks[1:])})
    steps, window = metrics.get("measure_steps_done"), metrics.get("measure_s")
    if steps and window:
        out["step (window / steps)"] = window / steps
    if metrics.get("startup_s") is not None:
        out["startup_s"] = metrics["startup_s"]
    return out


def resource_children() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is over them)")
    p.add_argument("--compare", type=Path, action="append", default=[],
                   help="another checkout's root, run side by side (repeatable); listed first")
    p.add_argument("--spec", type=Path, help="run this spec instead of the one-trial CPU sweep (e.g. the headline)")
    p.add_argument("--keep", action="store_true", help="keep the projects' folders (their paths are printed)")
    p.add_argument("--json", type=Path, help="also write every round's figures here")
    args = p.parse_args()
    spec_text = args.spec.read_text() if args.spec else ONE_TRIAL
    codes = {c.resolve().name: c.resolve() for c in args.compare}
    codes["this checkout"] = ROOT
    for code in codes.values():  # untimed: the MLflow template exists, the files are cached
        run_command(code, spec_text, keep=False)
    experiment = yaml.safe_load(spec_text)["experiment"]
    imports = f"import {experiment}, torch._dynamo, torch.optim"  # what a fork server imports (child.preload)
    torch_s: list[float] = []
    imports_s: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
    loads: list[float] = []
    order: list[str | None] = [None, "", *codes]
    for r in range(args.rounds):
        k = r % len(order)
        for name in order[k:] + order[:k]:
            loads.append(os.getloadavg()[0])
            if name is None:
                start, end = spawn_timed([sys.executable, "-c", "import torch"], ROOT, dict(os.environ))
                torch_s.append(end - start)
            elif name == "":
                start, end = spawn_timed([sys.executable, "-c", imports], ROOT, env_for(ROOT))
                imports_s.append(end - start)
            else:
                runs[name].append(run_command(codes[name], spec_text, args.keep))
        print(f"round {r + 1}: import torch {torch_s[-1]:.2f} s; the trial's imports {imports_s[-1]:.2f} s; "
              + "; ".join(f"{n} {runs[n][-1]['prompt']:.2f} s" for n in codes), flush=True)
    base = statistics.median(torch_s)
    what = f"{args.spec}" if args.spec else "a one-trial CPU sweep (experiments.mlp, batch 64, default trial settings)"
    print(f"\n{what}, from an empty folder; {args.rounds} rounds, interleaved")
    print(f"import torch: median {base:.2f} s ({min(torch_s):.2f}-{max(torch_s):.2f}); load average (1 min) during "
          f"the runs {min(loads):.2f}-{max(loads):.2f}, median {statistics.median(loads):.2f} ({os.cpu_count()} CPUs)")
    print(f"the trial's imports, one process (python -c {imports!r}, what the slot's fork server imports): "
          f"median {statistics.median(imports_s):.2f} s, {statistics.median(i / t for i, t in zip(imports_s, torch_s)):.2f}x "
          "import torch (torch._dynamo: every torch optimizer's step imports it)")
    width = 18
    print(f"{'median s since the command started':<38s}" + "".join(f"{n[:width]:>{width + 9}s}" for n in codes))

    def cell(name: str, key: str) -> str:
        values = [(run[key], t) for run, t in zip(runs[name], torch_s) if key in run]
        if len(values) < len(runs[name]):
            return f"{'-':>{width + 9}s}"
        seconds = statistics.median(v for v, _ in values)
        ratio = statistics.median(v / t for v, t in values)
        return f"{seconds:>{width}.2f} {ratio:>6.2f}x "

    def row(label: str, cells: list[str]) -> None:
        print((f"{label:<38s}" + "".join(cells)).rstrip())

    def medians(key: str, digits: int = 2) -> list[str]:
        return [f"{statistics.median(r[key] for r in runs[n]):>{width}.{digits}f}{'':9s}" for n in codes]

    for label, _, _ in MARKS:
        row(label, [cell(n, label) for n in codes])
    row("prompt returned (process reaped)", [cell(n, "prompt") for n in codes])
    for name in codes:  # what is left beside the physical floor, round by round
        for run, imp in zip(runs[name], imports_s):
            if "  its window opened" in run and "  its window closed" in run:
                run["beyond_floor"] = run["prompt"] - imp - (run["  its window closed"] - run["  its window opened"])
    row("beyond the trial's imports and window", [cell(n, "beyond_floor") for n in codes])
    row("CPU s, the command and its processes", medians("cpu_s"))
    if all("orchestrator_cpu_s" in r for n in codes for r in runs[n]):
        row("CPU s, the orchestrator to its end", medians("orchestrator_cpu_s"))
    if all("startup_s" in r for n in codes for r in runs[n]):
        row("trials startup_s (median over trials)", medians("startup_s", 3))
    print("(ratios: median over rounds of each figure over import torch's in the same round)")
    for name in codes:
        pooled = [p for run in runs[name] for p in run.get("phases", [])]
        keys = list(dict.fromkeys(k for p in pooled for k in p))  # the marks' order
        if pooled:
            print(f"\n{name}: the trials' start-up phase by phase, median (min-max) over {len(pooled)} trials, s")
            for k in keys:
                values = [p[k] for p in pooled if k in p]
                print(f"  {k:<34s} {statistics.median(values):8.3f} ({min(values):.3f}-{max(values):.3f})")
    if args.json:
        args.json.write_text(json.dumps({"import_torch_s": torch_s, "trial_imports_s": imports_s, "loads": loads,
                                         "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
