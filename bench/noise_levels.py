"""The shipped search at several measured noise levels, replayed (``search_efficiency.py
--noise-levels``): is its answer within the band of the best, does it say when it cannot tell, and
how much later does it stop than on a quiet machine?

Each level is a ``replay.noise.Noise``: ``0.02``, ``0.10`` and ``0.30`` are the standard deviation
of the log of one measurement (2%, 10%, 30% CV; each trial reports its own spread, as a real one
does); ``drift`` starts at 2% and reaches 20% at ``DRIFT_OVER`` of the grid's replayed time while
every throughput falls by 10% (a laptop heating up). Per landscape, level and seed, the replayed
sweep's answer (the best it reports) is judged on the recorded throughput.

Figures, per landscape and level (over the seeds):
- ``answer``: the answer within the band (2%) of the landscape's best;
- ``unsure``: the stop said it could not tell its best from a rival (``search/remeasure``);
- ``silent``: the answer outside the band and the stop did not say so;
- ``stop``: when the sweep ended, over the grid's replayed time (median); ``vs 2%``: that over the
  same at 2% CV.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.replay.landscape import load_landscape
from orchestrator.replay.noise import Noise
from orchestrator.replay.strategies import landscape_spec, replay_run

LEVELS = ("0.02", "0.10", "0.30", "drift")
QUIET = "0.02"
DRIFT_OVER = 0.3
"""The drifting level reaches its end at this fraction of the grid's replayed time (the shipped
search stops at 0.1-0.4 of it on a quiet machine: the drift happens during the sweep)."""
TARGETS = {"answer": ("0.10", 0.95), "vs_quiet": ("0.10", 1.5), "unsure": ("0.30", 0.95), "silent": 0.05}
"""Issue #38: at 10% CV the answer within the band in 95% of seeds, the stop at most 1.5x as late as
at 2%; at 30% CV the stop says it is unsure (95% of seeds); at every level, at most 5% of seeds
give an answer outside the band without saying so."""


def noise_of(level: str, grid_s: float) -> Noise:
    if level == "drift":
        return Noise(0.02, 0.20, 0.10, DRIFT_OVER * grid_s)
    return Noise(float(level))


def label(level: str) -> str:
    return "drift 2%->20%, -10%" if level == "drift" else f"{float(level):.0%} CV"


@dataclass
class Level:
    level: str
    answer: list[bool] = field(default_factory=list)
    unsure: list[bool] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)

    def share(self, name: str) -> float:
        values = getattr(self, name)
        return sum(values) / len(values) if values else 0.0

    def silent(self) -> float:
        return sum(not a and not u for a, u in zip(self.answer, self.unsure)) / max(1, len(self.answer))


def replay_one(path: str, level: str, seed: int, band: float) -> tuple[bool, bool, float]:
    """One seed at one level: (answer within the band, said unsure, replayed seconds to the stop)."""
    warnings.filterwarnings("ignore", module="optuna")
    land = load_landscape(path)
    spec = {**landscape_spec(land, name=land.path.stem), "search": {"band": band}}
    run = replay_run(spec, land, seed, True, noise=noise_of(level, land.total_duration_s()))
    truth = land.row(run.answer).samples_per_s if run.answer is not None else None
    return truth is not None and truth >= (1 - band) * land.best_feasible(), run.unsure, run.end_s


def run_levels(path: Path, seeds: range, band: float, pool: Any, levels: tuple[str, ...] = LEVELS) -> list[Level]:
    jobs = {level: [pool.submit(replay_one, str(path), level, seed, band) for seed in seeds] for level in levels}
    out = []
    for level, futures in jobs.items():
        lv = Level(level)
        for f in futures:
            answer, unsure, stop = f.result()
            lv.answer.append(answer)
            lv.unsure.append(unsure)
            lv.stops.append(stop)
        out.append(lv)
    return out


def report(path: Path, levels: list[Level]) -> None:
    grid = load_landscape(path).total_duration_s()
    quiet = next((lv for lv in levels if lv.level == QUIET), None)
    print(f"\n== {path.name}: grid {grid:.1f} s; {len(levels[0].answer)} seeds per level")
    print(f"   {'noise':<20} {'answer':>7} {'unsure':>7} {'silent':>7} {'stop':>6} {'vs 2%':>6}")
    for lv in levels:
        stop = statistics.median(lv.stops)
        ratio = stop / statistics.median(quiet.stops) if quiet else float("nan")
        print(f"   {label(lv.level):<20} {lv.share('answer'):>7.0%} {lv.share('unsure'):>7.0%} {lv.silent():>7.0%} "
              f"{stop / grid:>6.3f} {ratio:>6.2f}")


def check(path: Path, levels: list[Level]) -> list[tuple[str, bool]]:
    by = {lv.level: lv for lv in levels}
    name, out = path.name, []
    level, want = TARGETS["answer"]
    if level in by:
        got = by[level].share("answer")
        out.append((f"{name}: at {label(level)} the answer within the band in {got:.0%} of seeds >= {want:.0%}",
                    got >= want))
    level, want = TARGETS["vs_quiet"]
    if level in by and QUIET in by:
        got = statistics.median(by[level].stops) / statistics.median(by[QUIET].stops)
        out.append((f"{name}: at {label(level)} the stop {got:.2f}x as late as at 2% <= {want}x", got <= want))
    level, want = TARGETS["unsure"]
    if level in by:
        got = by[level].share("unsure")
        out.append((f"{name}: at {label(level)} the stop says it is unsure in {got:.0%} of seeds >= {want:.0%}",
                    got >= want))
    for lv in levels:
        got = lv.silent()
        out.append((f"{name}: at {label(lv.level)} a wrong answer not said in {got:.0%} of seeds <= "
                    f"{TARGETS['silent']:.0%}", got <= TARGETS["silent"]))
    return out


def summary(levels: list[Level]) -> dict[str, Any]:
    """The ``--json`` entry of one landscape: per level, the shares and the stop's medians."""
    quiet = next((lv for lv in levels if lv.level == QUIET), None)
    out = {}
    for lv in levels:
        stop = statistics.median(lv.stops)
        out[lv.level] = {"answer": round(lv.share("answer"), 4), "unsure": round(lv.share("unsure"), 4),
                         "silent": round(lv.silent(), 4), "stop_s": round(stop, 3),
                         "vs_quiet": round(stop / statistics.median(quiet.stops), 3) if quiet else None}
    return out
