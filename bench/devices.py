"""What the other GPUs of a host buy: one spec run in fresh folders, on one GPU and on several
(``--devices``), then the same configurations compared.

    python bench/devices.py sweeps/bert_base_devices.yaml                # cuda:0 against auto
    python bench/devices.py SPEC --one cuda:0 --many cuda:0,cuda:1 --rounds 2
    python bench/devices.py sweeps/bert_memory.yaml --many cuda:0,cuda:1 --many auto --rounds 2   # 1, 2, 4 GPUs

Prints each configuration's throughput both ways and their ratio (a trial must measure the same
alone on its GPU whatever runs on the others: target at least 0.97), the share of the host's CPU
other processes used in its several-device windows (``host_cpu_others``), the GPU each ran on, and the
sweeps' wall times: the whole command, and the trial loop (first trial's start to last result).
With ``--rounds N`` (N >= 2) the two ways alternate (one, several, one, several, ...), each
configuration's figure is its median over the rounds, and the control line compares the single-
device rounds with each other: how far one process's measurement of a configuration moves between
two runs of the same sweep, the floor under any several/one ratio. ``--repeats K`` runs the spec
with ``trial.repeats: K`` (each configuration the median of K processes), for configurations whose
single measurement scatters more than the comparison needs.

``--many`` may be given several times (2 GPUs, then every GPU, say): each round then runs one GPU
and each several-GPU way, in an order rotated from round to round, and each several-GPU way is
compared with the one-GPU sweeps. For each several-GPU sweep it also prints (issue #41 items 2-3,
``bench/concurrency.py``) what ran beside each configuration's timed window on the other slots
(processes being prepared, set-ups, exits, other windows, the orchestrator's CPU), next to the
configuration's ratio, sorted from the slowest; each slot's first trial after the loop began; and
what the command did after its last result. Last, where each trial made its CUDA context
(``bench/contexts.py``: prepared ahead or in the trial, and beside how many other GPUs' contexts),
on CUDA.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from concurrency import beside, report, start_and_end, trials as trials_of  # noqa: E402
from contexts import summary_of as contexts_of  # noqa: E402


def with_repeats(spec: Path, repeats: int) -> Path:
    """A copy of ``spec`` whose trials are each the median of ``repeats`` processes."""
    import yaml

    data = yaml.safe_load(spec.read_text())
    data["trial"] = {**(data.get("trial") or {}), "repeats": repeats}
    copy = Path(tempfile.mkdtemp(prefix="devices-spec-")) / spec.name
    copy.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def run(spec: Path, devices: str, log: Path | None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="devices-"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONUNBUFFERED": "1", "ORCHESTRATE_TIMELINE": str(work / "events.jsonl")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", str(spec.resolve()), "--devices", devices],
                          cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"devices: the sweep on {devices} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    import optuna

    from orchestrator.search.space import config_key
    from orchestrator.store.records import results_of

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import yaml

    name = yaml.safe_load(spec.read_text())["name"]  # the study's name, not the line (a comment may follow it)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{work}/mlruns/optuna.db")
    results = results_of(study.get_trials())
    trials = {config_key(t.params): t for t in results}
    stop = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Stopped:")), None)
    starts = [t.user_attrs["started_at"] for t in trials.values() if t.user_attrs.get("started_at")]
    ends = [t.datetime_complete.timestamp() for t in trials.values() if t.datetime_complete]
    events = [json.loads(ln) for ln in (work / "events.jsonl").read_text().splitlines() if ln.strip()] \
        if (work / "events.jsonl").exists() else []
    slot_of = {t.number: t.user_attrs.get("slot", "?") for t in study.get_trials()}  # a repeat's process too
    return {"wall_s": wall, "loop_s": (max(ends) - min(starts)) if starts and ends else None, "trials": trials,
            "measured_twice": len(results) - len(trials), "stop": stop, "devices": devices,
            "beside": beside(work, events, slot_of), "start_end": start_and_end(events, slot_of),
            "timeline": timeline(study.get_trials(), events, work)}


def timeline(all_trials: list[Any], events: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    """Every trial of the sweep (repeats and stopped ones too), seconds after the loop began: where a
    slow round's time went (two 4-GPU rounds took 45 s where a third took 29 s, 2026-11-26), with
    why the search chose it (``chosen_by``) and its own marks (``harness/marks.py``: set-up, warm-up
    and window), so a slow trial shows which of them took the time; ``exited``: when its process
    was seen to have exited (its slot free for the next trial)."""
    t0 = next((e["t"] for e in events if e.get("event") == "loop_start"), None)
    if t0 is None:
        return []
    start = {e["trial"]: e["t"] - t0 for e in events if e.get("event") == "start" and e.get("trial") is not None}
    told = {e["trial"]: e["t"] - t0 for e in events if e.get("event") == "told" and e.get("trial") is not None}
    exited = {e["trial"]: e["t"] - t0 for e in events if e.get("event") == "exited" and e.get("trial") is not None}
    marks = {t["trial"]: {k: round(v - t0, 3) for k, v in t["tl"].items() if isinstance(v, (int, float))}
             for t in trials_of(work, events)}
    return [{"trial": t.number, "slot": t.user_attrs.get("slot"), "params": t.params, "state": t.state.name,
             "status": t.user_attrs.get("status"), "chosen_by": t.user_attrs.get("chosen_by"),
             "start": start.get(t.number), "told": told.get(t.number), "exited": exited.get(t.number),
             "marks": marks.get(t.number, {})}
            for t in all_trials]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", type=Path)
    ap.add_argument("--one", default="cuda:0", help="the single device (default cuda:0)")
    ap.add_argument("--many", action="append", help="the several devices (default auto: every visible GPU); "
                    "repeatable: each is compared with the single device")
    ap.add_argument("--logs", type=Path, help="write every sweep's output into this folder")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the ways this many times; figures are medians over the rounds")
    ap.add_argument("--repeats", type=int, help="run the spec with trial.repeats set to this")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.repeats is not None and args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    spec = with_repeats(args.spec, args.repeats) if args.repeats else args.spec
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    manys_flag = args.many or ["auto"]
    ways = [("one", args.one)] + [(f"many{i + 1}" if len(manys_flag) > 1 else "many", m) for i, m in enumerate(manys_flag)]
    got: dict[str, list[dict]] = {w: [] for w, _ in ways}
    for r in range(1, args.rounds + 1):
        suffix = "" if args.rounds == 1 else f"_{r}"
        k = (r - 1) % len(ways) if len(ways) > 2 else 0  # two ways alternate one, several, one, ...
        for way, devices in ways[k:] + ways[:k]:
            got[way].append(run(spec, devices, args.logs / f"{way}{suffix}.log" if args.logs else None))
            print(f"round {r}: {devices}: {got[way][-1]['wall_s']:.1f} s", flush=True)
    out = {"rounds": args.rounds, "ways": {}}
    for way, devices in ways[1:]:
        out["ways"][devices] = compare(args, spec, got["one"], got[way], devices)
    if args.one.startswith("cuda"):
        print("\nwhere each trial made its CUDA context (bench/contexts.py):")
        print("\n".join(contexts_of([out["ways"]])))
    if args.json:
        args.json.write_text(json.dumps(out))


def compare(args: argparse.Namespace, spec: Path, ones: list[dict], manys: list[dict], many: str) -> dict:
    """The single-device sweeps against one several-device way's: printed, and returned."""
    slots = sorted({t.user_attrs.get("slot", "?") for m in manys for t in m["trials"].values()})
    print(f"\n{args.spec.name}: {args.one} against {many} ({len(slots)} slots: {', '.join(slots)})"
          + (f", median of {args.rounds} rounds each way" if args.rounds > 1 else "")
          + (f", each trial the median of {args.repeats} processes" if args.repeats else ""))
    print(f"{'configuration':<60} {'status':>8} {'one':>10} {'several':>10} {'ratio':>6} {'others':>6}  gpu")
    ratios, control, rows = [], [], []
    searched = any(set(r["trials"]) != set(ones[0]["trials"]) for r in ones + manys)
    keys = sorted(set().union(*(r["trials"] for r in ones + manys)))
    for key in keys:
        a = next((r["trials"][key] for r in ones if key in r["trials"]), None)
        b = next((r["trials"][key] for r in manys if key in r["trials"]), None)
        label = ", ".join(f"{k}={v}" for k, v in sorted((a or b).params.items()))
        if a is None or b is None:
            if not searched:
                print(f"{label:<60} missing in the {'several' if b is None else 'single'}-device sweep")
            continue
        ta, tb = throughput(ones, key), throughput(manys, key)
        where = f"{b.user_attrs.get('slot')} ({b.user_attrs.get('gpu_uuid', '')[:12]})"
        if ta and tb:
            ratios.append(tb / ta)
            cpu = throughput(manys, key, "host_cpu_others")  # the host's CPU others used in its window
            print(f"{label:<60} {b.user_attrs.get('status'):>8} {ta:>10,.1f} {tb:>10,.1f} {tb / ta:>6.3f} "
                  f"{'-' if cpu is None else f'{cpu:.0%}':>6}  {where}")
            for m in manys:  # each several-device sweep's window of it, beside what else ran then
                t = m["trials"].get(key)
                if t is not None and t.user_attrs.get("status") == "ok":
                    rows.append({"label": label, "ratio": tb / ta, "beside": m["beside"].get(t.number)})
        else:
            status = f"{a.user_attrs.get('status')}/{b.user_attrs.get('status')}"
            print(f"{label:<60} {status:>8} {'':>10} {'':>10} {'':>6} {'':>6}  {where}")
        singles = [v for v in (throughput([o], key) for o in ones) if v]
        if len(singles) >= 2:
            control.append(min(singles) / max(singles))
    if ratios:
        print(f"throughput ratio several / one: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
              f"max {max(ratios):.3f} over {len(ratios)} configurations (target >= 0.97 everywhere: "
              f"{'PASS' if min(ratios) >= 0.97 else 'FAIL'})")
    if control:
        print(f"control, the {args.rounds} single-device rounds against each other (slowest / fastest): "
              f"min {min(control):.3f}, median {statistics.median(control):.3f}; "
              f"{sum(c < 0.97 for c in control)} of {len(control)} configurations moved more than 3% between them")
    print("\n".join(report(rows)))
    sweeps = [("one", r, o) for r, o in enumerate(ones, 1)] + [("several", r, m) for r, m in enumerate(manys, 1)]
    bests = {}
    for way, r, g in sweeps:
        best = best_of(g["trials"], spec)
        bests.setdefault(way, []).append(best)
        label = ", ".join(f"{k}={v}" for k, v in sorted(best[0].items())) if best else "none"
        print(f"round {r}, {way}: {len(g['trials'])} configurations measured, {g['measured_twice']} measured "
              f"twice; best {label} -> {best[1]:,.1f}" if best else f"round {r}, {way}: no result")
        if g["stop"]:
            print(f"  {g['stop'][:200]}")
        if way == "several":
            for line in g["start_end"]:
                print(f"  {line}")
    if bests.get("one") and bests.get("several") and all(bests["one"] + bests["several"]):
        top_one = max(b[1] for b in bests["one"])
        worst_several = min(b[1] for b in bests["several"])
        print(f"best found: several's worst round {worst_several:,.1f} against one's best round {top_one:,.1f}: "
              f"{worst_several / top_one:.3f} (target >= 0.99: {'PASS' if worst_several / top_one >= 0.99 else 'FAIL'}); "
              f"measured twice: {sum(g['measured_twice'] for _, _, g in sweeps)} (target 0: "
              f"{'PASS' if not any(g['measured_twice'] for _, _, g in sweeps) else 'FAIL'})")
    walls = {}
    target = {2: 0.60, 4: 0.45}.get(len(slots))
    for what in ("wall_s", "loop_s"):
        a, b = median_of(ones, what), median_of(manys, what)
        if a and b:
            walls[what] = (a, b)
            label = "command wall time" if what == "wall_s" else "trial loop (first start to last result)"
            verdict = f" (target <= {target:.2f}: {'PASS' if b / a <= target else 'FAIL'})" if what == "wall_s" and target else ""
            print(f"{label}: one {a:.1f} s, several {b:.1f} s, ratio {b / a:.2f}{verdict}")
    return {"ratios": ratios, "control": control, "walls": walls, "slots": slots,
            "beside": rows, "sweeps": [{"way": way, "round": r, "wall_s": g["wall_s"], "loop_s": g["loop_s"],
                                        "configurations": len(g["trials"]), "measured_twice": g["measured_twice"],
                                        "stop": g["stop"], "best": best_of(g["trials"], spec),
                                        "start_end": g["start_end"], "timeline": g["timeline"]} for way, r, g in sweeps]}


def best_of(trials: dict, spec: Path) -> tuple[dict, float] | None:
    """The best ok configuration of one sweep and its throughput (the spec's objective is maximized)."""
    got = [(t.params, t.user_attrs.get("metrics", {}).get("samples_per_s")) for t in trials.values()
           if t.user_attrs.get("status") == "ok"]
    got = [g for g in got if g[1]]
    return max(got, key=lambda g: g[1]) if got else None


def throughput(runs: list[dict], key, metric: str = "samples_per_s") -> float | None:
    """The configuration's median samples/s (or ``metric``) over the runs where it finished ok."""
    got = [t.user_attrs.get("metrics", {}).get(metric) for r in runs
           if (t := r["trials"].get(key)) is not None and t.user_attrs.get("status") == "ok"]
    got = [g for g in got if g is not None]
    return statistics.median(got) if got else None


def median_of(runs: list[dict], what: str) -> float | None:
    got = [r[what] for r in runs if r[what]]
    return statistics.median(got) if got else None


if __name__ == "__main__":
    main()
