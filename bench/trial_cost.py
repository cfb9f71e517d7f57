"""A trial costs its measurement (issue #40): each row of the issue's table, a whole ``orchestrate
SPEC`` from an empty folder, for this checkout's code and others' side by side, alternating.

    python bench/trial_cost.py --compare /tmp/before               # a GPU: every row, before and after
    python bench/trial_cost.py --small --compare /tmp/before       # the CPU: the same rows, tiny models
    python bench/trial_cost.py --rows headline,hf_llama,compile,mlp --compare /tmp/before

The rows (``ROWS``), each the auto search from an empty folder:

- ``headline``: ``sweeps/bert_memory.yaml``;
- ``hf_llama``: ``experiments.hf``, a Llama-style model from ``model_type`` (hidden 768, 12 layers,
  intermediate 3072, 4 key/value heads, vocabulary 32,000: 153M parameters), 1024 tokens, under a
  15% memory cap (``sweeps/hf_causal_lm.yaml``'s space);
- ``hf_gpt2``: ``experiments.hf``, GPT-2 small, 512 tokens, under a 12% cap (the same space);
- ``mlp``: ``sweeps/mlp_launch_bound.yaml`` (launch-bound);
- ``compile`` (this checkout only; name it in ``--rows``): one BERT-base configuration with
  ``compile: true`` and ``trial.repeats: 2``: two processes, one after the other, sharing the
  study's Inductor cache: the first compiles, the second loads what the first compiled.

A variant is a checkout's root (``--compare DIR``: ``DIR/orchestrator`` and ``DIR/experiments`` run
the command and its trials, e.g. ``git archive REV orchestrator experiments | tar -x -C DIR``); the
specs are this checkout's. Each round runs every row with every variant, the variants' order
rotated from round to round, after one untimed one-trial command of each (``WARM``); each row's
table is printed once its last round has run. Per row and variant it prints: the command's wall time (spawn to
reap), the trials (out of memory among them), when the first trial started (the command's own
``start`` event, ``ORCHESTRATE_TIMELINE``), the trials' median ``startup_s`` and timed window,
the share of the wall that was measured (the windows' sum over the wall), the out-of-memory
trials' answer (from the configuration sent to the result written: median and max), and the
median time a trial held its slot (configuration sent to its process reaped). ``--small`` (the
CPU) swaps every model for a tiny one and shortens the trials, so that the whole runs in minutes:
its figures test the script, they are not the issue's.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

LLAMA_150M = {"model_type": "llama", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
              "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 32000, "seq_len": 1024}
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "seq_len": 64}
TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000,
             "n_positions": 128, "seq_len": 64}
SMALL_TRIAL = {"warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0.2, "timeout_s": 120}
SMALL_CAP = {"cpu_memory_limit_gib": 1.5}  # RLIMIT_DATA: the largest batches run out of memory


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "sweeps" / name).read_text())


def row_spec(row: str, small: bool) -> dict[str, Any]:
    """The spec a row runs (``--small``: its tiny CPU version)."""
    if row == "headline":
        spec = load("bert_memory.yaml")
        if small:
            spec["fixed"] = {"model": "tiny", "seq_len": 64, **SMALL_CAP}
            spec["space"]["batch_size"] = [8, 32, 128, 2048]
    elif row in ("hf_llama", "hf_gpt2"):
        spec = load("hf_causal_lm.yaml")
        spec["name"] = row
        if row == "hf_llama":
            spec["fixed"] = dict(TINY_LLAMA if small else LLAMA_150M)
            spec["fixed"].update(SMALL_CAP if small else {"memory_fraction": 0.15})
        else:
            spec["fixed"] = dict(TINY_GPT2) if small else {"model_type": "gpt2", "seq_len": 512}
            spec["fixed"].update(SMALL_CAP if small else {"memory_fraction": 0.12})
        if small:
            spec["space"]["batch_size"] = [4, 16, 64, 4096]
    elif row == "mlp":
        spec = load("mlp_launch_bound.yaml")
    elif row == "compile":
        spec = {"name": "compiled", "experiment": "experiments.bert", "device": "auto",
                "fixed": {"model": "bert-base", "seq_len": 128, "compile": True, "dtype": "bfloat16"},
                "space": {"batch_size": [64]}, "search": {"sampler": "grid"},
                "trial": {"warmup_steps": 3, "measure_steps": 10, "repeats": 2, "timeout_s": 900}}
        if small:
            spec.update(experiment="experiments.mlp", fixed={"compile": True, "hidden_size": 32, "in_features": 16,
                                                             "num_layers": 1})
            spec["space"] = {"batch_size": [8]}
    else:
        raise SystemExit(f"trial_cost: no row {row!r}; rows: {', '.join(ROWS)}, compile")
    spec = copy.deepcopy(spec)
    if small:
        spec["device"] = "cpu"
        spec["trial"] = {**SMALL_TRIAL, **({"repeats": 2} if row == "compile" else {})}
        spec.setdefault("search", {})["n_trials"] = 6 if row != "compile" else 1
    return spec


ROWS = ("headline", "hf_llama", "hf_gpt2", "mlp")
WARM = {"name": "warm", "experiment": "experiments.mlp", "device": "auto", "space": {"batch_size": [64]},
        "search": {"sampler": "grid"}, "trial": {"timeout_s": 300}}
"""The untimed command each variant runs first (``--no-warm`` skips it)."""


def run_command(code: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """One command from an empty folder, with ``code``'s ``orchestrator`` and ``experiments``."""
    folder = Path(tempfile.mkdtemp(prefix="bench-trial-cost-"))
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    events = folder / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": str(code) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "ORCHESTRATE_TIMELINE": str(events)}
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "spec.yaml"], cwd=folder, env=env,
                          capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        sys.exit(f"trial_cost: {spec['name']} with {code} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")
    lines = [json.loads(ln) for ln in events.read_text().splitlines() if ln.strip()] if events.exists() else []
    starts: dict[int, float] = {}
    exits: dict[int, float] = {}
    for e in lines:
        if e["event"] == "start" and e.get("trial") is not None:
            starts.setdefault(e["trial"], e["t"])  # the first process of a trial (repeats start again)
        elif e["event"] == "exited" and e.get("trial") is not None:
            exits[e["trial"]] = e["t"]
    results = []
    for path in sorted(glob.glob(str(folder / "mlruns" / ".trials" / "*" / "trial-*" / "**" / "result.json"),
                             recursive=True)):
        result = json.loads(Path(path).read_text())
        result["_trial"] = int(Path(path).relative_to(folder / "mlruns" / ".trials").parts[1].split("-")[1])
        result["_repeat"] = Path(path).parent.name if Path(path).parent.name.startswith("repeat-") else ""
        results.append(result)
    return {"wall_s": wall, "start": start, "starts": starts, "exits": exits, "results": results,
            "stdout": proc.stdout, "folder": str(folder)}


def figures(run: dict[str, Any]) -> dict[str, Any]:
    """One command's row of figures (see the module)."""
    results = run["results"]
    ok = [r for r in results if r.get("status") == "ok"]
    oom = [r for r in results if r.get("status") == "oom"]
    windows = [r["metrics"]["measure_s"] for r in ok if r.get("metrics", {}).get("measure_s") is not None]
    startups = [r["metrics"]["startup_s"] for r in ok if r.get("metrics", {}).get("startup_s") is not None]
    answers = [r["timeline"]["result_written"] - run["starts"][r["_trial"]] for r in oom
               if r.get("timeline", {}).get("result_written") and r["_trial"] in run["starts"] and not r["_repeat"]]
    held = [run["exits"][t] - s for t, s in run["starts"].items() if t in run["exits"]]
    first = min(run["starts"].values()) - run["start"] if run["starts"] else None
    return {"wall_s": run["wall_s"], "trials": len({r["_trial"] for r in results}), "oom": len(oom),
            "first_trial_s": first, "startup_s": median(startups), "window_s": median(windows),
            "measured": sum(windows) / run["wall_s"], "oom_answer_s": median(answers),
            "oom_answer_max_s": max(answers) if answers else None, "slot_held_s": median(held)}


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


LABELS = [("wall_s", "wall, s", ".1f"), ("trials", "trials", "d"), ("oom", "  of which out of memory", "d"),
          ("first_trial_s", "first trial started, s", ".2f"), ("startup_s", "startup_s, median", ".3f"),
          ("window_s", "timed window, median, s", ".3f"), ("measured", "share of wall measured", ".0%"),
          ("oom_answer_s", "out-of-memory answer, median, s", ".2f"),
          ("oom_answer_max_s", "out-of-memory answer, max, s", ".2f"),
          ("slot_held_s", "a trial's slot time, median, s", ".2f")]


def print_row(row: str, spec: dict[str, Any], by_variant: dict[str, list[dict[str, Any]]]) -> None:
    names = list(by_variant)
    print(f"\n{row}: {spec['experiment']} {json.dumps(spec.get('fixed', {}))}")
    print(f"{'median over rounds':<34s}" + "".join(f"{n[:22]:>24s}" for n in names)
          + ("   after/before" if len(names) > 1 else ""))
    for key, label, fmt in LABELS:
        cells, values = [], []
        for name in names:
            got = [f[key] for f in by_variant[name] if f.get(key) is not None]
            value = statistics.median(got) if got else None
            values.append(value)
            cells.append(f"{format(value, fmt) if value is not None and fmt != 'd' else (str(round(value)) if value is not None else '-'):>24s}")
        ratio = ""
        if len(names) > 1 and values[0] and values[-1] is not None and fmt not in ("d", ".0%"):
            ratio = f"   {values[-1] / values[0]:.2f}x"
        print(f"{label:<34s}" + "".join(cells) + ratio)


def compile_row(spec: dict[str, Any]) -> None:
    """This checkout: one configuration compiled twice (``trial.repeats: 2``), one study cache."""
    run = run_command(ROOT, spec)
    got = sorted(run["results"], key=lambda r: r["_repeat"])
    print(f"\ncompile: {spec['experiment']} {json.dumps(spec['fixed'])}, trial.repeats 2 (two processes, one "
          "after the other, one Inductor cache: the study's)")
    for label, r in zip(("first process (cold cache)", "second process (the first's graphs)"), got):
        m = r.get("metrics", {})
        comp, startup = m.get("compile_s"), m.get("startup_s")
        print(f"  {label:<38s} compile_s {fmt(comp, '.2f'):>7s}   startup_s {fmt(startup, '.2f'):>7s} "
              f"(without compiling {fmt(startup - comp if comp is not None and startup else None, '.2f')})   "
              f"window {fmt(m.get('measure_s'), '.3f')} s   {fmt(m.get('samples_per_s'), ',.1f')} samples/s")
    if len(got) == 2 and all(r.get("metrics", {}).get("compile_s") for r in got):
        a, b = (r["metrics"]["compile_s"] for r in got)
        print(f"  second compile / first: {b / a:.2f} ({a:.1f} s -> {b:.1f} s); cache: "
              f"{', '.join(sorted(p.name for p in Path(run['folder']).glob('mlruns/.trials/*/.inductor/*') if len(p.name) > 2))}")
    print(f"  command wall {run['wall_s']:.1f} s")


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", type=Path, action="append", default=[],
                    help="another checkout's root (its orchestrator/ and experiments/), listed first; repeatable")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"rows to run, in this order, of {', '.join(ROWS)} "
                    "and compile")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds (figures: medians over them)")
    ap.add_argument("--small", action="store_true", help="tiny models on the CPU: tests the script")
    ap.add_argument("--json", type=Path, help="also write every command's figures here")
    ap.add_argument("--no-warm", action="store_true",
                    help="skip the untimed one-trial command each variant runs first (the machine's MLflow "
                         "template made, the files in the page cache, as on any machine that has run a sweep)")
    args = ap.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    codes = {c.resolve().name: c.resolve() for c in args.compare}
    codes["this checkout"] = ROOT
    for name, code in codes.items():
        if not (code / "orchestrator" / "harness").is_dir():
            raise SystemExit(f"trial_cost: {name} has no orchestrator/harness: not a checkout's root")
    print(f"trial_cost: rows {', '.join(rows)}; {args.rounds} round(s), variants alternating: {', '.join(codes)}"
          + ("; --small (tiny models on the CPU)" if args.small else ""), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    if not args.no_warm:
        for code in codes.values():
            run_command(code, WARM if not args.small else {**WARM, "device": "cpu"})
    out: dict[str, dict[str, list[dict[str, Any]]]] = {row: {n: [] for n in codes} for row in rows}
    names = list(codes)
    for r in range(args.rounds):
        for i, row in enumerate(rows):
            spec = row_spec(row, args.small)
            if row == "compile":
                if r == args.rounds - 1:
                    compile_row(spec)
                continue
            k = (r + i) % len(names)
            for name in names[k:] + names[:k]:
                got = figures(run_command(codes[name], spec))
                got["load"] = os.getloadavg()[0]
                out[row][name].append(got)
                print(f"  round {r + 1} {row:<9s} {name:>20s}: wall {got['wall_s']:.1f} s, {got['trials']} trials "
                      f"({got['oom']} oom), first trial at {fmt(got['first_trial_s'], '.2f')} s, startup_s "
                      f"{fmt(got['startup_s'], '.3f')}, load {got['load']:.2f}", flush=True)
            if r == args.rounds - 1:  # printed as soon as it is complete: a run cut short keeps it
                print_row(row, spec, out[row])
                sys.stdout.flush()
                if args.json:
                    args.json.write_text(json.dumps(out, indent=1))
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
