"""Several trials at once, replayed: how much sooner does the shipped search reach the band and end
itself with 2 and 4 slots than with one (issue #41 item 1)?

    python bench/search_slots.py                                   # every landscape, seeds 5000-5019
    python bench/search_slots.py bench/landscapes/x.csv --seeds 10 --first-seed 1000 --slots 1,4
    python bench/search_slots.py --noise 0.10 --check              # exit 1 if a target fails
    python bench/search_slots.py --first-seed 7000 --where         # also where 4 slots' time goes

The shipped search (``sampler: auto``, ``stop: auto``, ``trial.repeats: auto``) is replayed over each
recorded landscape through the real sweep loop (``orchestrator.replay.strategies``) with ``N``
trials at a time on the simulated clock: a trial takes its recorded duration, and a slot is asked
for its next configuration as soon as its trial's result is known, while the others still run.
Per landscape and slot count, over the seeds (medians, simulated seconds): ``band``, when the
first result in the band (2% of the best) was known; ``stop``, when the sweep ended itself;
``N/1``, the stop over one slot's; ``in band``, the seeds whose sweep had measured the band by its
stop; ``trials``, the processes run (against one slot's: what the slots cost in machine time).

Targets (``TARGETS``): with 4 slots the stop at most 0.40x of one slot's (median over the
landscapes) and the band measured before the stop in at least 95% of seeds on every landscape; 2
slots are reported. Prints the figures and PASS/FAIL lines; exits 0 (``--check``: 1 on a FAIL).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from search_efficiency import LANDSCAPES, _truth  # noqa: E402

from orchestrator.replay.landscape import load_landscape  # noqa: E402
from orchestrator.replay.strategies import landscape_spec, replay_run  # noqa: E402

TARGETS = {4: 0.40}
"""Slots -> the most the stop may take over one slot's (median over landscapes), issue #41."""
IN_BAND = 0.95


def one(path: str, slots: int, seed: int, noise: float, band: float) -> tuple[float, float, bool, int, float, float, float]:
    """One replayed sweep: (when the band was first known, when it ended, band measured by then,
    processes run, real seconds the replay took, the share of the slots' time busy with trials,
    the share spent on trials started after the band was known)."""
    import warnings

    warnings.filterwarnings("ignore", module="optuna")
    started = time.perf_counter()
    land = load_landscape(path)
    threshold = (1 - band) * land.best_feasible()
    spec = {**landscape_spec(land, name=land.path.stem), "search": {"band": band}}
    run = replay_run(spec, land, seed, True, noise=noise, slots=slots)
    truth = _truth(land)
    found = [r.finished_at for r in run.records
             if r.measured and r.status == "ok" and (truth(r) or 0) >= threshold and r.finished_at is not None]
    measured = sum(r.measured for r in run.records)
    first = min(found, default=float("inf"))
    ran = [r for r in run.records if r.measured and r.finished_at is not None]
    room = slots * run.end_s or 1.0  # the slots' seconds until the sweep ended
    after = sum(r.cost_s for r in ran if r.finished_at - r.cost_s >= first)  # ran: each has finished_at
    return (first, run.end_s, bool(found), measured, time.perf_counter() - started,
            sum(r.cost_s for r in ran) / room, after / room)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("landscapes", nargs="*", type=Path, help="landscape CSVs (default: bench/landscapes/*.csv)")
    p.add_argument("--slots", default="1,2,4", help="slot counts, the first the reference (default 1,2,4)")
    p.add_argument("--seeds", type=int, default=20, help="seeds per landscape and slot count (default 20)")
    p.add_argument("--first-seed", type=int, default=5000, help="the first seed (default 5000)")
    p.add_argument("--noise", type=float, default=0.02, help="measurement noise, CV (default 0.02)")
    p.add_argument("--band", type=float, default=0.02)
    p.add_argument("--jobs", type=int, default=2, help="replays in parallel (default 2)")
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    p.add_argument("--where", action="store_true", help="also where the most slots' time goes: busy, the band's "
                   "time over the stop, and the share of slot time spent on trials started after the band")
    args = p.parse_args(argv)
    counts = [int(s) for s in args.slots.split(",")]
    paths = args.landscapes or sorted(LANDSCAPES.glob("*.csv"))
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.perf_counter()
    print(f"shipped search, seeds {seeds.start}-{seeds.stop - 1}, noise {args.noise:g} CV; medians over seeds, "
          f"simulated seconds; N/1 = stop with N slots over the stop with {counts[0]}")
    head = "".join(f" {f'band {n}':>8}" for n in counts) + "".join(f" {f'stop {n}':>8}" for n in counts)
    head += "".join(f" {f'{n}/{counts[0]}':>6}" for n in counts[1:]) + "".join(f" {f'trials {n}':>9}" for n in counts)
    print(f"{'landscape':<38}{head} {'in band':>8}")
    ratios: dict[int, list[float]] = {n: [] for n in counts[1:]}
    checks: list[tuple[str, bool]] = []
    walls = []
    where: list[str] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for path in paths:
            jobs = {n: [pool.submit(one, str(path), n, s, args.noise, args.band) for s in seeds] for n in counts}
            got = {n: [j.result() for j in js] for n, js in jobs.items()}
            walls += [r[4] for rs in got.values() for r in rs]
            band = {n: statistics.median(r[0] for r in rs) for n, rs in got.items()}
            stop = {n: statistics.median(r[1] for r in rs) for n, rs in got.items()}
            trials = {n: statistics.median(r[3] for r in rs) for n, rs in got.items()}
            in_band = {n: sum(r[2] for r in rs) / len(rs) for n, rs in got.items()}
            line = "".join(f" {band[n]:>8.1f}" for n in counts) + "".join(f" {stop[n]:>8.1f}" for n in counts)
            for n in counts[1:]:
                ratios[n].append(stop[n] / stop[counts[0]])
                line += f" {stop[n] / stop[counts[0]]:>6.2f}"
            line += "".join(f" {trials[n]:>9.0f}" for n in counts)
            print(f"{path.name:<38}{line} {'/'.join(f'{in_band[n]:.0%}' for n in counts):>8}", flush=True)
            if args.where:
                most = got[counts[-1]]
                where.append(f"{path.name:<38} {statistics.median(r[5] for r in most):>6.2f} "
                             f"{statistics.median(min(1.0, r[0] / r[1]) if r[1] else 1.0 for r in most):>10.2f} "
                             f"{statistics.median(r[6] for r in most):>11.2f}")
            for n in counts[1:]:
                checks.append((f"{path.name}: {n} slots, band measured before the stop in {in_band[n]:.0%} of seeds "
                               f">= {IN_BAND:.0%}", in_band[n] >= IN_BAND))
    if args.where:
        print(f"\nwhere {counts[-1]} slots' time goes (medians over seeds): busy = trial seconds over the slots' "
              "seconds to the stop; band/stop = when the band was first known over the stop; after band = the "
              "share of the slots' seconds spent on trials started once it was")
        print(f"{'landscape':<38} {'busy':>6} {'band/stop':>10} {'after band':>11}")
        print("\n".join(where))
    print()
    for n in counts[1:]:
        median = statistics.median(ratios[n])
        print(f"{n} slots: stop {min(ratios[n]):.2f}-{max(ratios[n]):.2f}x of {counts[0]} slot(s), median {median:.2f}")
        if n in TARGETS and counts[0] == 1:
            checks.insert(0, (f"{n} slots: median stop {median:.2f}x of one slot's <= {TARGETS[n]}",
                              median <= TARGETS[n]))
    print(f"replay's own time: median {statistics.median(walls):.2f} s a sweep")
    print("\nTargets:")
    for text, ok in checks:
        print(f"   {'PASS' if ok else 'FAIL'}  {text}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 1 if args.check and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
