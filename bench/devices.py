"""What the other GPUs of a host buy: one spec run twice in fresh folders, on one GPU and on
several (``--devices``), then the same configurations compared.

    python bench/devices.py sweeps/bert_base_devices.yaml                # cuda:0 against auto
    python bench/devices.py SPEC --one cuda:0 --many cuda:0,cuda:1

Prints each configuration's throughput both ways and their ratio (a trial must measure the same
alone on its GPU whatever runs on the others: target at least 0.97), the GPU each ran on, and the
sweeps' wall times: the whole command, and the trial loop (first trial's start to last result).
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


def run(spec: Path, devices: str, log: Path | None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="devices-"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", str(spec.resolve()), "--devices", devices],
                          cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"devices: the sweep on {devices} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    import optuna

    from orchestrator.records import results_of
    from orchestrator.space import config_key

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = next(ln.split(":", 1)[1].strip() for ln in spec.read_text().splitlines() if ln.startswith("name:"))
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{work}/mlruns/optuna.db")
    trials = {config_key(t.params): t for t in results_of(study.get_trials())}
    starts = [t.user_attrs["started_at"] for t in trials.values() if t.user_attrs.get("started_at")]
    ends = [t.datetime_complete.timestamp() for t in trials.values() if t.datetime_complete]
    return {"wall_s": wall, "loop_s": (max(ends) - min(starts)) if starts and ends else None, "trials": trials}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", type=Path)
    ap.add_argument("--one", default="cuda:0", help="the single device (default cuda:0)")
    ap.add_argument("--many", default="auto", help="the several devices (default auto: every visible GPU)")
    ap.add_argument("--logs", type=Path, help="write both sweeps' output into this folder")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    one = run(args.spec, args.one, args.logs / "one.log" if args.logs else None)
    many = run(args.spec, args.many, args.logs / "many.log" if args.logs else None)
    slots = sorted({t.user_attrs.get("slot", "?") for t in many["trials"].values()})

    print(f"\n{args.spec.name}: {args.one} against {args.many} ({len(slots)} slots: {', '.join(slots)})")
    print(f"{'configuration':<60} {'status':>8} {'one':>10} {'several':>10} {'ratio':>6}  gpu")
    ratios = []
    for key in sorted(one["trials"]):
        a, b = one["trials"][key], many["trials"].get(key)
        label = ", ".join(f"{k}={v}" for k, v in sorted(a.params.items()))
        if b is None:
            print(f"{label:<60} missing in the several-device sweep")
            continue
        sa, sb = a.user_attrs.get("status"), b.user_attrs.get("status")
        ta = a.user_attrs.get("metrics", {}).get("samples_per_s")
        tb = b.user_attrs.get("metrics", {}).get("samples_per_s")
        where = f"{b.user_attrs.get('slot')} ({b.user_attrs.get('gpu_uuid', '')[:12]})"
        if ta and tb:
            ratios.append(tb / ta)
            print(f"{label:<60} {sb:>8} {ta:>10,.1f} {tb:>10,.1f} {tb / ta:>6.3f}  {where}")
        else:
            print(f"{label:<60} {sa + '/' + sb:>8} {'':>10} {'':>10} {'':>6}  {where}")
    if ratios:
        print(f"throughput ratio several / one: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
              f"max {max(ratios):.3f} over {len(ratios)} configurations (target >= 0.97 everywhere: "
              f"{'PASS' if min(ratios) >= 0.97 else 'FAIL'})")
    for what in ("wall_s", "loop_s"):
        if one[what] and many[what]:
            label = "command wall time" if what == "wall_s" else "trial loop (first start to last result)"
            print(f"{label}: one {one[what]:.1f} s, several {many[what]:.1f} s, ratio {many[what] / one[what]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"ratios": ratios, "one": {k: one[k] for k in ("wall_s", "loop_s")},
                                         "many": {k: many[k] for k in ("wall_s", "loop_s")}, "slots": slots}))


if __name__ == "__main__":
    main()
