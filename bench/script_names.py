"""The auto search on a script's own parameter names (issue #37 item 5): recorded landscapes
replayed with their columns renamed to names the search has no prior for, against the same
landscapes under the harness's knob names.

    python bench/script_names.py                     # 4 landscapes, seeds 1000-1019, 2% noise
    python bench/script_names.py --seeds 100 --first-seed 9000

A script's flags are its own: ``precision: [fp32, bf16]`` instead of ``dtype``, ``accum`` instead
of ``grad_accum_steps``, ``gc: [false, true]`` instead of ``activation_checkpointing``. The search
then knows nothing of them (no prior effect, no memory order: each is a category, an integer or a
boolean it models with its Gaussian process alone), and still must find the best and look at every
value before it stops (the evidence rule). The batch keeps its name (``batch_size``), as the docs
advise: what the search knows of batches is what makes a sweep short, and a script names its batch
flag in ``args`` whatever its spelling. Per landscape and naming: in how many seeds the sweep
measured a configuration within the band (2%) of the landscape's best, in how many every value of
every parameter was measured before the stop, and the stop's time as a fraction of the grid's.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LANDSCAPES = ROOT / "bench" / "landscapes"
DEFAULT = ("bert_base_accum_h100_cap020.csv", "bert_base_h200_cap015.csv", "mlp_narrow_h100.csv",
           "bert_tiny_cpu_rlimit.csv")
RENAME = {"dtype": "precision", "grad_accum_steps": "accum", "activation_checkpointing": "gc"}
VALUES = {"precision": {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}}


def renamed_copy(name: str, folder: Path) -> Path:
    """The landscape ``name`` with its knob columns (and dtype's values) renamed, in ``folder``,
    with its entry of ``landscapes.json`` (device, memory limit)."""
    with open(LANDSCAPES / name, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(folder / name, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([RENAME.get(c, c) for c in rows[0]])
        for row in rows:
            writer.writerow([VALUES.get(RENAME.get(k, k), {}).get(v, v) for k, v in row.items()])
    index_path = folder / "landscapes.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index[name] = json.loads((LANDSCAPES / "landscapes.json").read_text()).get(name, {})
    index_path.write_text(json.dumps(index))
    return folder / name


def spec_of(landscape: Any, script: bool) -> dict[str, Any]:
    """The spec a user would write: a script spec (every column a placeholder in ``args``) or the
    module spec the recorded sweep ran."""
    cols = list(landscape.columns)
    spec: dict[str, Any] = {"name": "r", "device": landscape.device,
                            "space": {c: list(landscape.values(c)) for c in cols},
                            "objective": {"metric": "samples_per_s", "direction": "maximize"},
                            "search": {"sampler": "auto"}}
    if script:
        spec.update(script="train.py", args=[f"{{{c}}}" for c in cols])
    else:
        spec["experiment"] = "experiments.bert"
    return spec


def replay(landscape: Any, script: bool, seeds: range, noise: float) -> dict[str, Any]:
    """The figures of one landscape under one naming, over ``seeds``."""
    from orchestrator.replay.strategies import replay_run
    from orchestrator.keys import config_key

    spec = spec_of(landscape, script)
    best = max(r.samples_per_s for r in landscape.rows.values() if r.status == "ok" and r.samples_per_s)
    grid = sum(r.duration_s for r in landscape.rows.values())
    found = looked = 0
    stops = []
    for seed in seeds:
        run = replay_run(spec, landscape, seed, True, noise=noise)
        measured = [r for r in run.records if r.measured]
        truth = [landscape.rows[config_key(r.params)].samples_per_s or 0.0 for r in measured if r.status == "ok"]
        found += max(truth, default=0.0) >= best * 0.98
        seen = {c: {str(r.params[c]) for r in measured} for c in landscape.columns if c != "batch_size"}
        looked += all(len(seen[c]) == len(landscape.values(c)) for c in seen)
        stops.append(run.end_s / grid)
    return {"found": found, "looked": looked, "seeds": len(seeds), "stop": statistics.median(stops)}


def main(argv: list[str] | None = None) -> int:
    from orchestrator.replay.landscape import load_landscape

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("landscapes", nargs="*", default=list(DEFAULT))
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=1000)
    p.add_argument("--noise", type=float, default=0.02)
    args = p.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"seeds {seeds.start}-{seeds.stop - 1}, noise {args.noise:.0%}; renamed: "
          + ", ".join(f"{a} -> {b}" for a, b in RENAME.items()))
    print(f"{'landscape':38s} {'names':8s} {'best found':>10s} {'every value':>11s} {'stop / grid':>11s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.landscapes:
            for script in (False, True):
                land = load_landscape(renamed_copy(name, Path(tmp)) if script else LANDSCAPES / name)
                out = replay(land, script, seeds, args.noise)
                print(f"{name:38s} {'script' if script else 'knobs':8s} {out['found']:>6d}/{out['seeds']:<3d} "
                      f"{out['looked']:>7d}/{out['seeds']:<3d} {out['stop']:>10.3f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
