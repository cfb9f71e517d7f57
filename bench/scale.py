"""Planned past these machines by simulation: the search with 1, 2, 4, 8 and 64 concurrent slots.

    python bench/scale.py                                  # every landscape, GPU ones first
    python bench/scale.py --landscape bert_base_h200_cap015 --slots 1 8 --seeds 300
    python bench/scale.py --seeds 20 --first-seed 100

Each recorded landscape (``bench/landscapes/``, see its README) is replayed through the real sweep
loop (``orchestrator.replay.strategies.replay_sweep``: ``Sweep`` with the shipped sampler, TPE with 5 random
start-up trials and ``constant_liar``, the proposer's in-flight exclusion, nearest-neighbour rule
and OOM-aware skipping) on ``ReplayRunner``'s simulated clock with N slots: each trial takes its
recorded ``duration_s``, N trials at a time, and a slot's next trial starts when its last one
ends. For each N and seed (the same seed set for every N) we take, on the simulated clock:

- *time to band*: when the first *measured* configuration within ``--band`` (2%) of the
  landscape's best feasible samples_per_s finished (a skipped, repeated or deferred proposal never
  counts: nothing was measured);
- *time to complete*: when the study was complete. ``landscape_spec`` sets no ``n_trials``, so the
  study's target is the whole grid: every configuration has a result, measured or skipped as a
  predicted out-of-memory.

Reported as medians over seeds and as ratios of those medians to one slot's. Target (issue 10):
with 8 slots, time to the band at most 0.25x the one-slot time on the GPU landscapes (the verdict
is the ratio of the medians; the ratio of the means is printed beside it). Prints PASS/FAIL per
GPU landscape and exits 0 either way (non-zero only on an error, or if an invariant breaks: a
configuration measured twice, more trials in flight than slots, a configuration left without a
result).

Why 200 seeds: with 8 slots the time to the band is quantized in waves of about one trial
duration (the band is found in the first, blind, wave of 8 in about 40% of seeds on BERT-base,
22% on BERT-large, else mostly in the second), so the 8-slot median sits on the second wave and
the verdict rides on the one-slot median's noise: on BERT-base, 60-seed blocks gave ratios from
0.14 to 0.26, 200-seed blocks 0.20-0.24, 1,000 seeds 0.214. The default takes 4-5 minutes
with 2 processes on the 2-core CPU (``--jobs``; the figures do not depend on it).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.replay.landscape import Landscape, load_landscape  # noqa: E402
from orchestrator.replay.strategies import ReplayedTrial, landscape_spec, replay_sweep  # noqa: E402
from orchestrator.launch.slots import available_cores  # noqa: E402
from orchestrator.search.space import config_key  # noqa: E402

LANDSCAPES = ROOT / "bench" / "landscapes"
GPU_LANDSCAPES = ("bert_base_h200_cap015.csv", "bert_large_h200_cap015.csv")
SLOTS = (1, 2, 4, 8, 64)
SEEDS = 200  # fewer leave the verdict to the seed set (the module docstring says why)
BAND = 0.02
TARGET_SLOTS, TARGET_RATIO = 8, 0.25


@dataclass(frozen=True)
class Replay:
    """One replayed search with ``slots`` concurrent slots; times on the simulated clock (s)."""

    slots: int
    seed: int
    band_s: float | None
    """When the first measured configuration in the band finished; None if none was measured."""
    complete_s: float
    """When the last trial finished: every configuration then has a result."""
    measured: int
    """Processes run (configurations measured) in the whole search."""
    measured_to_band: int | None
    """Measured trials finished up to and including the one that reached the band."""
    skipped: int
    """Configurations skipped as predicted out of memory (no process, no time)."""
    repeats: int
    """Proposals of a configuration that already had a result (answered from the record)."""
    deferred: int
    """Proposals of a configuration in flight (told FAIL, a neighbour queued instead)."""
    max_in_flight: int
    """The most measured trials overlapping on the simulated clock."""
    duplicates: int
    """Configurations measured more than once (must be 0)."""
    busy_s: float
    """Sum of the measured trials' recorded durations (slot-seconds used)."""
    unresolved: int
    """Configurations of the grid without a result at the end (must be 0)."""


def in_flight(records: Iterable[ReplayedTrial]) -> int:
    """The most measured trials running at once: each occupies ``[finished_at - cost_s, finished_at)``."""
    edges: list[tuple[float, int]] = []
    for r in records:
        if r.measured and r.finished_at is not None:
            # rounded: the clock adds durations up, so start = end - duration carries float error
            start, end = round(r.finished_at - r.cost_s, 6), round(r.finished_at, 6)
            if end > start:
                edges += [(start, 1), (end, -1)]
    most = now = 0
    for _, step in sorted(edges):  # at equal times an end (-1) sorts before a start (+1)
        now += step
        most = max(most, now)
    return most


def replay_scaled(landscape: Landscape, slots: int, seed: int, band: float = BAND) -> Replay:
    """The shipped search (TPE, skipping on) over ``landscape`` with ``slots`` trials at a time."""
    spec = {**landscape_spec(landscape, name=landscape.path.stem), "search": {"sampler": "tpe"}}
    records = replay_sweep(spec, landscape, seed, skip=True, slots=slots)
    threshold = (1 - band) * landscape.best_feasible()
    measured = [r for r in records if r.measured]
    band_s = measured_to_band = None
    for i, r in enumerate(measured):  # records are in the order their results were known
        if r.status == "ok" and r.samples_per_s is not None and r.samples_per_s >= threshold:
            band_s, measured_to_band = r.finished_at, i + 1
            break
    keys = [config_key({c: r.params[c] for c in landscape.columns}) for r in measured]
    resolved = {config_key({c: r.params[c] for c in landscape.columns})
                for r in records if r.measured or r.status == "skipped"}
    return Replay(slots, seed, band_s, max((r.finished_at or 0.0) for r in records), len(measured),
                  measured_to_band, sum(r.status == "skipped" for r in records),
                  sum(r.repeat_of is not None and r.status != "deferred" for r in records),
                  sum(r.status == "deferred" for r in records), in_flight(records),
                  len(keys) - len(set(keys)), sum(r.cost_s for r in measured),
                  len(set(landscape.rows) - resolved))


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return _median(values), _median(values)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _fmt(x: float, spec: str) -> str:
    return "never" if math.isinf(x) else ("-" if math.isnan(x) else format(x, spec))


def band_times(replays: list[Replay]) -> list[float]:
    """Per seed; a seed that never reached the band counts as infinitely late."""
    return [r.band_s if r.band_s is not None else math.inf for r in replays]


_LOADED: dict[str, Landscape] = {}


def _replay_job(job: tuple[str, int, int, float]) -> Replay:
    """``replay_scaled`` in a worker process (the landscape read once per process)."""
    path, slots, seed, band = job
    if path not in _LOADED:
        warnings.filterwarnings("ignore", module="optuna")
        _LOADED[path] = load_landscape(path)
    return replay_scaled(_LOADED[path], slots, seed, band)


def run_landscape(landscape: Landscape, slots: Iterable[int], seeds: range, band: float,
                  jobs: int = 1) -> dict[int, list[Replay]]:
    """Every (slot count, seed), in ``jobs`` processes (the results do not depend on it)."""
    slots = list(slots)
    if jobs <= 1:
        return {n: [replay_scaled(landscape, n, seed, band) for seed in seeds] for n in slots}
    import multiprocessing

    work = [(str(landscape.path), n, seed, band) for n in slots for seed in seeds]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        done = pool.map(_replay_job, work, chunksize=max(1, len(work) // (8 * jobs)))
    return {n: [r for r in done if r.slots == n] for n in slots}


def report(landscape: Landscape, by_slots: dict[int, list[Replay]], band: float, seeds: range) -> None:
    rows = landscape.rows.values()
    threshold = (1 - band) * landscape.best_feasible()
    in_band = sum(r.status == "ok" and r.samples_per_s is not None and r.samples_per_s >= threshold for r in rows)
    durations = [r.duration_s for r in rows]
    print(f"\n== {landscape.path.name}: {len(landscape.rows)} configurations of {' x '.join(landscape.columns)}; "
          f"{in_band} in the band (>= {threshold:,.1f} samples/s, within {band:.0%} of the best "
          f"{landscape.best_feasible():,.1f})")
    print(f"   trial durations {min(durations):.1f}-{max(durations):.1f} s "
          f"(median {statistics.median(durations):.1f}), "
          f"{sum(durations):.1f} s for the whole grid on one slot")
    print(f"   medians over {len(seeds)} seeds ({seeds.start}-{seeds.stop - 1}) of the simulated wall time; "
          f"'x1' = that median / the one-slot median; complete = all {len(landscape.rows)} configurations "
          f"have a result (no n_trials: the whole grid)")
    print("   'trials' = measured trials until the band (median); 'run' / 'skip' / 'repeat' / 'defer' = per search "
          "(median): processes run, predicted OOMs skipped, proposals answered from the record, proposals "
          "of a configuration in flight; 'util' = slot-seconds used / (slots x time to complete)")
    base = by_slots.get(1)
    base_band = _median(band_times(base)) if base else math.nan
    base_complete = _median([r.complete_s for r in base]) if base else math.nan
    print(f"   {'slots':>5} {'to band':>9} {'x1':>6} {'band IQR':>13} {'complete':>9} {'x1':>6} {'trials':>6} "
          f"{'run':>5} {'skip':>5} {'repeat':>6} {'defer':>5} {'util':>5} {'in flight':>9} {'reached':>8}")
    for n, replays in by_slots.items():
        bands = band_times(replays)
        med, (lo, hi) = _median(bands), _quartiles(bands)
        complete = _median([r.complete_s for r in replays])
        trials = _median([r.measured_to_band if r.measured_to_band is not None else math.inf for r in replays])
        util = _median([r.busy_s / (n * r.complete_s) if r.complete_s else math.nan for r in replays])
        print(f"   {n:>5} {_fmt(med, '.1f') + ' s':>9} {_fmt(med / base_band, '.3f'):>6} "
              f"{_fmt(lo, '.1f') + '-' + _fmt(hi, '.1f') + ' s':>13} {_fmt(complete, '.1f') + ' s':>9} "
              f"{_fmt(complete / base_complete, '.3f'):>6} {_fmt(trials, '.1f'):>6} "
              f"{_median([r.measured for r in replays]):>5.1f} {_median([r.skipped for r in replays]):>5.1f} "
              f"{_median([r.repeats for r in replays]):>6.1f} {_median([r.deferred for r in replays]):>5.1f} "
              f"{_fmt(util, '.2f'):>5} {max(r.max_in_flight for r in replays):>9} "
              f"{sum(r.band_s is not None for r in replays)}/{len(replays):<6}")
    broken = [r for rs in by_slots.values() for r in rs if r.duplicates or r.unresolved or r.max_in_flight > r.slots]
    if broken:
        raise RuntimeError(f"{landscape.path.name}: invariant broken (a configuration measured twice, one left "
                           f"without a result, or more trials in flight than slots): {broken[0]}")


def verdict(landscape: Landscape, by_slots: dict[int, list[Replay]]) -> str | None:
    if landscape.path.name not in GPU_LANDSCAPES or 1 not in by_slots or TARGET_SLOTS not in by_slots:
        return None
    many, one = band_times(by_slots[TARGET_SLOTS]), band_times(by_slots[1])
    ratio = _median(many) / _median(one)
    means = statistics.mean(many) / statistics.mean(one)  # inf / inf (never reached) is nan: printed "-"
    return (f"{landscape.path.name}: {TARGET_SLOTS} slots: time to 2% band = {_fmt(ratio, '.3f')} x one slot "
            f"(target <= {TARGET_RATIO:.2f}x): {'PASS' if ratio <= TARGET_RATIO else 'FAIL'}  "
            f"[ratio of the means: {_fmt(means, '.3f')}]")


def resolve(name: str) -> Path:
    path = Path(name)
    if path.exists():
        return path
    for candidate in (LANDSCAPES / name, LANDSCAPES / f"{name}.csv"):
        if candidate.exists():
            return candidate
    known = ", ".join(p.stem for p in sorted(LANDSCAPES.glob("*.csv")))
    raise SystemExit(f"scale.py: no landscape {name!r} (a path, or one of: {known})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--landscape", action="append", default=[], metavar="NAME",
                   help="a landscape CSV or its name in bench/landscapes (repeatable; default: all, GPU ones first)")
    p.add_argument("--slots", type=int, nargs="+", default=list(SLOTS), help=f"slot counts (default {SLOTS}); "
                   "1 is added when missing (the reference)")
    p.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per slot count (default {SEEDS})")
    p.add_argument("--first-seed", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--jobs", type=int, default=len(available_cores()),
                   help="processes replaying at once (default: the CPU cores available; "
                        "the figures do not depend on it)")
    p.add_argument("--band", type=float, default=BAND, help=f"how close to the best counts as found (default {BAND})")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1 or any(n < 1 for n in args.slots):
        p.error("--seeds, --jobs and --slots must be at least 1")
    warnings.filterwarnings("ignore", module="optuna")

    if args.landscape:
        paths = [resolve(n) for n in args.landscape]
    else:
        paths = sorted(LANDSCAPES.glob("*.csv"), key=lambda q: (q.name not in GPU_LANDSCAPES, q.name))
    slots = sorted(set(args.slots) | {1})
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.perf_counter()
    verdicts = []
    for path in paths:
        landscape = load_landscape(path)
        by_slots = run_landscape(landscape, slots, seeds, args.band, args.jobs)
        report(landscape, by_slots, args.band, seeds)
        line = verdict(landscape, by_slots)
        if line is not None:
            verdicts.append(line)
    if verdicts:
        print("\nTarget (issue 10; the shipped search: TPE, 5 start-up trials, constant_liar, skipping on):")
        for line in verdicts:
            print(f"   {line}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
