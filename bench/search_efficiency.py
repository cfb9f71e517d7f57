"""How fast does each search find a near-best configuration, and does the shipped one know when
to stop? Replayed on recorded landscapes through the orchestrator's real sweep loop.

    python bench/search_efficiency.py                               # every landscape, seeds 1000-1099
    python bench/search_efficiency.py bench/landscapes/x.csv --seeds 20 --first-seed 5000
    python bench/search_efficiency.py --noise 0.02 --json out.json  # measurements 2% noisy
    python bench/search_efficiency.py --check                       # exit 1 if a target fails
    python bench/search_efficiency.py --noise-levels --first-seed 7000   # 2%, 10%, 30% CV, a drift

Each landscape (``bench/landscapes/``, see its README) holds the real result of every
configuration of a space. A search is replayed over it (``orchestrator.replay.strategies``): trials are
answered from the table and cost the recorded wall time of their process. For each strategy and
seed we take the first *measured* trial within ``--band`` (2%) of the landscape's best feasible
samples_per_s (a skipped or repeated trial never counts: nothing was measured), and report the
replayed time it took as a ratio to the exhaustive grid's full replayed time (every
configuration run once): the median over seeds (``ratio``) and its 90th percentile
(``ratio_p90``). A seed that never reaches the band counts as infinitely late.

Strategies:
- ``grid``: every configuration in the spec's order (deterministic);
- ``random``, ``tpe+skip`` (TPE with OOM-aware skipping and the nearest-neighbour rule: what a
  spec got by default before the ``auto`` search);
- ``shipped``: whatever a spec gets by default (today ``sampler: auto`` with ``stop: auto``,
  ``orchestrator.search.planner``). It also ends itself: ``stop_ratio`` is the replayed time until it
  did, over the grid's, and ``stopped_in_band`` the fraction of seeds whose sweep had measured a
  configuration in the band by then;
- ``lightning``: PyTorch Lightning's batch-size finder (power mode) per precision, activation
  checkpointing off, then the fastest of the largest batches that fitted (deterministic);
- ``optuna-gp`` (with ``--gp``): Optuna's ``GPSampler`` (5 start-up trials) with OOM-aware
  skipping, over the same categorical encoding the other samplers get. A comparison only: it
  imports torch, which the orchestrator's process never does, so it cannot ship there.

``--noise S`` replays each measured throughput as the recorded one times ``exp(N(0, S))``, seeded:
what a search sees is a measurement, not the truth (the band is judged on the recorded value).
With ``--noise 0`` the shipped search is deterministic and every seed gives the same answer.

Targets (``TARGETS``, issues #20 and #27), where the priors hold: shipped ratio <= 0.15 and
ratio_p90 <= 0.40; on GPU landscapes time to band <= 0.5x Lightning's; the band measured before
the stop in >= 95% of seeds at a median stop_ratio <= 0.40. On landscapes recorded to contradict
a prior (``contradicts`` in landscapes.json; ``CONTRADICTING``): the band measured before the stop
in >= 95% of seeds, ratio <= 0.30 and time to band <= 1.5x Lightning's. Prints figures and
PASS/FAIL lines; exits 0 (``--check``: 1 when a target fails).

``--noise-levels`` replays only the shipped search, at 2%, 10% and 30% CV and at a CV that drifts
during the sweep, and judges its answer and its stop (``bench/noise_levels.py``, issue #38).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.replay.landscape import RECORDED_STATUSES, Landscape, load_landscape  # noqa: E402
from orchestrator.replay.strategies import (default_others, landscape_spec, lightning_pick, lightning_search,  # noqa: E402
                                 replay_run, time_to_band)
from orchestrator.report.summary import fmt_params  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import noise_levels  # noqa: E402

LANDSCAPES = ROOT / "bench" / "landscapes"
FIRST_SEED, SEEDS = 1000, 100  # seeds 0-299 tuned the TPE defaults; the auto search was built on 0
SEEDED = {"random": {"sampler": "random"}, "tpe+skip": {"sampler": "tpe"}, "shipped": {}}
SEARCH = {**SEEDED, "grid": {"sampler": "grid"}, "optuna-gp": {"sampler": "tpe"}}
"""Each strategy's ``search:`` section (``shipped``: none, the defaults)."""
TARGETS = {"ratio": 0.15, "ratio_p90": 0.40, "vs_lightning": 0.5, "stopped_in_band": 0.95, "stop_ratio": 0.40}
"""Where the priors hold (issue #27; #20's were ratio 0.22 and 0.8x Lightning)."""
CONTRADICTING = {"ratio": 0.30, "vs_lightning": 1.5, "stopped_in_band": 0.95}
"""Landscapes recorded to contradict a prior (``contradicts`` in landscapes.json)."""


@dataclass
class Runs:
    """One strategy on one landscape: per seed, the time to the band (inf: never) and, for a
    search that ends itself, when it ended and whether it had measured the band by then."""

    strategy: str
    to_band: list[float] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)
    in_band: list[bool] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    """Real seconds of each replayed sweep (the search's own cost; the trials are looked up)."""
    note: str = ""

    def median(self) -> float:
        return statistics.median(self.to_band)

    def p90(self) -> float:
        return _quantile(self.to_band, 0.9)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    if math.isinf(ordered[hi]):
        return math.inf
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _replay(path: str, strategy: str, seed: int, band: float, noise: float,
            slots: int = 1) -> tuple[float, float, bool, float]:
    """One seed of one strategy: (time to band, time it ended, band measured by then, the real
    seconds the replay took: the search's own cost, since the trials cost nothing here). With
    ``slots`` > 1 the trials run that many at a time on the simulated clock, and the time to band
    is the clock when the first result in the band was known."""
    warnings.filterwarnings("ignore", module="optuna")
    started = time.perf_counter()
    land = load_landscape(path)
    threshold = (1 - band) * land.best_feasible()
    search = {**SEARCH[strategy], "band": band}
    spec = {**landscape_spec(land, name=land.path.stem), "search": search}
    skip = strategy not in ("random", "grid")  # the grid runs every configuration: the reference
    sampler = None
    if strategy == "optuna-gp":
        import optuna

        sampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    run = replay_run(spec, land, seed, skip, sampler=sampler, noise=noise if strategy != "grid" else 0.0,
                     slots=slots if strategy != "grid" else 1)
    truth = _truth(land)
    hit = time_to_band(run.records, threshold, truth)
    found = [r for r in run.records if r.measured and r.status == "ok" and (truth(r) or 0) >= threshold]
    to_band = math.inf if hit is None else hit.cost_s
    if slots > 1 and strategy != "grid":
        to_band = min((r.finished_at for r in found if r.finished_at is not None), default=math.inf)
    return to_band, run.end_s, bool(found), time.perf_counter() - started


def _truth(land: Landscape) -> Any:
    return lambda r: land.row(r.params).samples_per_s


def run_landscape(path: Path, seeds: range, band: float, noise: float, pool: Any,
                  gp: bool = False, strategies: set[str] | None = None, slots: int = 1) -> tuple[list[Runs], float]:
    land = load_landscape(path)
    threshold = (1 - band) * land.best_feasible()
    grid_total = land.total_duration_s()
    results = []
    if strategies is None or "grid" in strategies:
        grid = Runs("grid", note="deterministic")
        hit, end, _, wall = _replay(str(path), "grid", 0, band, 0.0)
        grid.to_band.append(hit)
        grid.walls.append(wall)
        results.append(grid)
    for strategy in list(SEEDED) + (["optuna-gp"] if gp else []):
        if strategies is not None and strategy not in strategies:
            continue
        runs = Runs(strategy)
        deterministic = strategy == "shipped" and noise == 0
        chosen = seeds[:1] if deterministic else seeds
        jobs = [pool.submit(_replay, str(path), strategy, seed, band, noise, slots) for seed in chosen]
        for job in jobs:
            hit, end, in_band, wall = job.result()
            runs.to_band.append(hit)
            runs.stops.append(end)
            runs.in_band.append(in_band)
            runs.walls.append(wall)
        if deterministic:
            runs.note = "deterministic (no noise): one seed stands for all"
        elif strategy == "tpe+skip":
            runs.note = "the default before the auto search"
        elif strategy == "optuna-gp":
            runs.note = "comparison only: imports torch"
        results.append(runs)
    if strategies is not None and "lightning" not in strategies:
        return results, grid_total
    lightning = lightning_search(land)
    hit = time_to_band(lightning, threshold)
    pick = lightning_pick(lightning)
    held = " ".join(f"{k}={v}" for k, v in default_others(land, "batch_size", "dtype").items())
    pick_text = "picks nothing" if pick is None else (
        f"picks {fmt_params(pick.params)}, {pick.samples_per_s:,.0f}/s"
        f"{' (in band)' if (pick.samples_per_s or 0) >= threshold else ' (NOT in band)'}")
    results.append(Runs("lightning", [hit.cost_s if hit else math.inf],
                        note=f"deterministic; per dtype, {held or 'nothing else'} held; {pick_text}"))
    return results, grid_total


def _fmt(x: float, spec: str) -> str:
    return "never" if math.isinf(x) else format(x, spec)


def report(path: Path, results: list[Runs], grid_total: float, band: float, seeds: range, noise: float) -> None:
    land = load_landscape(path)
    threshold = (1 - band) * land.best_feasible()
    rows = land.rows.values()
    in_band = sum(r.status == "ok" and (r.samples_per_s or 0) >= threshold for r in rows)
    counts = {s: sum(r.status == s for r in rows) for s in RECORDED_STATUSES}
    print(f"\n== {path.name} ({land.device}): {len(land.rows)} configurations "
          f"({', '.join(f'{n} {s}' for s, n in counts.items() if n)}) of {' x '.join(land.columns)}")
    print(f"   best feasible {land.best_feasible():,.1f} samples/s; band (within {band:.0%}) >= "
          f"{threshold:,.1f}: {in_band} configuration(s); grid's full replayed time {grid_total:.1f} s")
    print(f"   seeds {seeds.start}-{seeds.stop - 1}, measurement noise {noise:g}; ratio = time to band / "
          "grid time (median, 90th percentile); stop = when the sweep ended itself; "
          "search = real seconds of one replayed sweep (median), what the search itself costs")
    print(f"   {'strategy':<10} {'to band':>9} {'ratio':>6} {'p90':>6} {'reached':>8} {'stop':>6} "
          f"{'in band':>8} {'search':>7}  note")
    for r in results:
        n = len(r.to_band)
        stop = _fmt(statistics.median(r.stops) / grid_total, ".3f") if r.stops else "-"
        in_band_text = f"{sum(r.in_band)}/{len(r.in_band)}" if r.in_band else "-"
        print(f"   {r.strategy:<10} {_fmt(r.median(), '.1f') + ' s':>9} {_fmt(r.median() / grid_total, '.3f'):>6} "
              f"{_fmt(r.p90() / grid_total, '.3f') if n > 1 else '-':>6} "
              f"{f'{sum(not math.isinf(x) for x in r.to_band)}/{n}':>8} {stop:>6} {in_band_text:>8} "
              f"{f'{statistics.median(r.walls):.2f}s' if r.walls else '-':>7}  {r.note}")


def summary(path: Path, results: list[Runs], grid_total: float) -> dict[str, Any]:
    """The ``--json`` entry of one landscape (the shape checks outside the repository read)."""
    out: dict[str, Any] = {"grid_s": round(grid_total, 3), "strategies": {}}
    for r in results:
        entry: dict[str, Any] = {"ratio": _round(r.median() / grid_total), "time_to_band_s": _round(r.median())}
        if len(r.to_band) > 1 or r.strategy == "shipped":
            entry["ratio_p90"] = _round(r.p90() / grid_total)
        if r.stops:
            entry["stop_ratio"] = _round(statistics.median(r.stops) / grid_total)
            entry["stopped_in_band"] = round(sum(r.in_band) / len(r.in_band), 4)
            entry["sim_s"] = _round(statistics.median(r.stops))
        if r.walls:
            entry["wall_s"] = round(statistics.median(r.walls), 4)
        out["strategies"][r.strategy] = entry
    return out


def _round(x: float) -> float | None:
    return None if math.isinf(x) else round(x, 4)


def check_targets(path: Path, results: list[Runs], grid_total: float) -> list[tuple[str, bool]]:
    """The targets of the landscape's group: where the priors hold (issue #27 keeps #20's stop and
    tightens the time to band), and where a prior is wrong (``contradicts`` in landscapes.json)."""
    by = {r.strategy: r for r in results}
    if "shipped" not in by:
        return []
    shipped, lightning = by["shipped"], by.get("lightning")
    land = load_landscape(path)
    name, t = path.name, (CONTRADICTING if land.contradicts else TARGETS)
    ratio, p90 = shipped.median() / grid_total, shipped.p90() / grid_total
    stop = statistics.median(shipped.stops) / grid_total
    found = sum(shipped.in_band) / len(shipped.in_band)
    checks = [(f"{name}: shipped ratio {_fmt(ratio, '.3f')} <= {t['ratio']}", ratio <= t["ratio"]),
              (f"{name}: stopped with the band measured in {found:.0%} of seeds >= {t['stopped_in_band']:.0%}",
               found >= t["stopped_in_band"])]
    if "ratio_p90" in t:
        checks.append((f"{name}: shipped ratio_p90 {_fmt(p90, '.3f')} <= {t['ratio_p90']}", p90 <= t["ratio_p90"]))
    if "stop_ratio" in t:
        checks.append((f"{name}: shipped stop_ratio {stop:.3f} <= {t['stop_ratio']}", stop <= t["stop_ratio"]))
    if lightning is not None and (land.device != "cpu" or land.contradicts):
        mine, theirs = shipped.median(), lightning.median()
        checks.append((f"{name}: shipped time to band {_fmt(mine, '.1f')} s <= {t['vs_lightning']}x "
                       f"lightning's {_fmt(theirs, '.1f')} s", mine <= t["vs_lightning"] * theirs))
    return [(("[contradicts] " if land.contradicts else "") + text, ok) for text, ok in checks]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("landscapes", nargs="*", type=Path, help="landscape CSVs (default: bench/landscapes/*.csv)")
    p.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per seeded strategy (default {SEEDS})")
    p.add_argument("--first-seed", type=int, default=FIRST_SEED, help=f"the first seed (default {FIRST_SEED})")
    p.add_argument("--band", type=float, default=0.02, help="how close to the best counts as found (default 0.02)")
    p.add_argument("--noise", type=float, default=0.0, help="measurement noise, a log-normal sigma (default 0)")
    p.add_argument("--jobs", type=int, default=2, help="replays in parallel (default 2)")
    p.add_argument("--json", type=Path, help="write the figures as JSON (see summary())")
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    p.add_argument("--gp", action="store_true", help="also replay Optuna's GPSampler (needs torch; slow)")
    p.add_argument("--slots", type=int, default=1, help="trials at a time on the simulated clock (issue #31: "
                   "compare --slots 2 with 1; default 1)")
    p.add_argument("--noise-levels", nargs="?", const=",".join(noise_levels.LEVELS),
                   help="replay the shipped search at these noise levels (default "
                        f"{','.join(noise_levels.LEVELS)}) and judge its answer and stop (issue #38)")
    p.add_argument("--strategies", help="replay only these, comma-separated (grid, random, tpe+skip, shipped, "
                   "lightning, optuna-gp); targets are checked where shipped is among them")
    args = p.parse_args(argv)
    paths = args.landscapes or sorted(LANDSCAPES.glob("*.csv"))
    wanted = set(args.strategies.split(",")) if args.strategies else set()
    unknown = wanted - {*SEARCH, "lightning"}
    if unknown:
        p.error(f"--strategies: unknown {', '.join(sorted(unknown))}; known: {', '.join([*SEARCH, 'lightning'])}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.perf_counter()
    checks: list[tuple[str, bool]] = []
    figures: dict[str, Any] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        if args.noise_levels:
            levels = tuple(args.noise_levels.split(","))
            print(f"seeds {seeds.start}-{seeds.stop - 1}; the answer judged on the recorded throughput, band {args.band:.0%}")
            for path in paths:
                judged = noise_levels.run_levels(path, seeds, args.band, pool, levels)
                noise_levels.report(path, judged)
                checks += noise_levels.check(path, judged)
                figures[path.name] = noise_levels.summary(judged)
            paths = []
        for path in paths:
            results, grid_total = run_landscape(path, seeds, args.band, args.noise, pool,
                                                args.gp or "optuna-gp" in wanted, wanted or None, args.slots)
            report(path, results, grid_total, args.band, seeds, args.noise)
            checks += check_targets(path, results, grid_total)
            figures[path.name] = summary(path, results, grid_total)
    print("\nTargets (shipped = what a spec gets by default: the auto search, stop: auto, trial.repeats: auto):")
    for text, ok in checks:
        print(f"   {'PASS' if ok else 'FAIL'}  {text}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 1 if args.check and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
