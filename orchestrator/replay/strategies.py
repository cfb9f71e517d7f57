"""Replay a recorded landscape: answer trials from a table of real results instead of training.

A landscape is a CSV with one row per configuration (``bench/export_landscape.py`` writes it from a
finished grid study): the swept parameters as columns, then ``status``, ``samples_per_s``,
``peak_memory_gib`` and ``duration_s`` (the wall time of the trial's process, what a replayed
trial costs). ``replay_sweep`` runs the real ``Sweep`` loop over it, with an in-memory Optuna
study, a launcher that looks results up (``ReplayLauncher``) and a tracker that records nothing
(``NullTracker``), so a search strategy is judged by exactly the orchestrator's decisions: its
samplers, its repeats, its OOM-aware skipping. ``lightning_search`` is the doubling batch-size
search of PyTorch Lightning's batch-size finder, replayed on the same table for comparison.
Never imports torch; Optuna only inside the functions that need it.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from orchestrator.protocol import TrialResult
from orchestrator.replay.landscape import Landscape
from orchestrator.replay.noise import Noise, measure
from orchestrator.launch import Launched, StopFlag
from orchestrator import trialdir
from orchestrator.protocol import TrialConfig
from orchestrator.outcome import Outcome, Status
from orchestrator.store import record

if TYPE_CHECKING:
    from optuna import Study

REPLAY_PATH = Path("<replay>")


class ReplayLauncher:
    """``launch.launch_trial``'s signature; answers from the landscape and creates nothing on disk.
    ``noise``: what a measurement sees of the recorded throughput (``replay.noise``; a number is a
    constant CV), seeded by ``seed``, at the time ``clock()`` says (the runner's simulated clock)."""

    def __init__(self, landscape: Landscape, noise: float | Noise = 0.0, seed: int = 0,
                 clock: Callable[[], float] = lambda: 0.0) -> None:
        self.landscape = landscape
        self.noise = noise if isinstance(noise, Noise) else Noise(float(noise))
        self.rng = random.Random(seed)
        self.clock = clock
        self.calls: list[dict[str, Any]] = []

    def __call__(self, config: TrialConfig, trial_dir: Path, env: dict[str, str], timeout_s: float,
                 stop: StopFlag | None = None) -> Launched:
        row = self.landscape.row(config.params)
        self.calls.append({c: row.params[c] for c in self.landscape.columns})
        metrics = measure(row.samples_per_s, self.noise, self.clock(), self.rng) if row.samples_per_s is not None else {}
        if row.peak_memory_gib is not None:
            metrics["peak_memory_gib"] = row.peak_memory_gib
        ok = row.status == Status.OK
        detail = None if ok else f"replayed from {self.landscape.path.name}: {row.status}"
        return Launched(Outcome(Status(row.status), detail, TrialResult(row.status, metrics=metrics)),
                        0 if ok else 1, row.duration_s, None, trial_dir / trialdir.LOG)


class NullTracker:
    """The tracker methods the sweep loop calls, recording nothing (no MLflow)."""

    down = None

    @staticmethod
    def notice() -> None:
        return None

    def start_trial(self, number: int, params: dict[str, Any], tags: dict[str, str],
                    on_created: object = None) -> str:
        return f"replay-{number}"

    def finish_trial(self, ref: str, status: str, metrics: dict[str, float], tags: Mapping[str, object],
                     files: list[tuple[Path, str | None]]) -> None:
        return None

    @staticmethod
    def run_id(ref: str, wait: bool = True) -> str:
        return ref

    def trial_runs(self) -> dict[int, list[Any]]:
        return {}


class _ReplayRun:
    """A replayed trial on the simulated clock: its result is known once the clock passes ``end``."""

    def __init__(self, runner: "ReplayRunner", launched: Launched, start: float) -> None:
        self.runner, self._launched, self.end = runner, launched, start + launched.duration_s

    @property
    def has_result(self) -> bool:
        return self.runner.clock >= self.end

    exited = has_result

    def poll(self) -> None:
        return None

    def launched(self) -> Launched:
        return self._launched

    def kill(self) -> None:
        self.end = self.runner.clock


class ReplayRunner:
    """``launch.ProcessRunner``'s interface over a landscape: ``slots`` trials at a time, each taking
    its recorded duration on a simulated clock (``wait`` jumps to the next trial's end), so
    concurrency is replayed as it would unfold, in no time."""

    def __init__(self, launcher: Callable[..., Launched], slots: int = 1) -> None:
        from orchestrator.launch.slots import Slot

        self.launcher = launcher
        self.slots = [Slot(f"replay:{i}") for i in range(slots)]
        self.running: dict[int, _ReplayRun] = {}
        self.clock = 0.0

    def idle(self, i: int) -> bool:
        run = self.running.get(i)
        return run is None or run.exited

    def start(self, i: int, config: TrialConfig, trial_dir: Path, env: dict[str, str], timeout_s: float,
              guesses: list[dict[str, str]]) -> _ReplayRun:
        run = _ReplayRun(self, self.launcher(config, trial_dir, env, timeout_s, None), self.clock)
        self.running[i] = run
        return run

    def wait(self, timeout_s: float) -> None:
        pending = [r.end for r in self.running.values() if not r.exited]
        if pending:
            self.clock = max(self.clock, min(pending))

    def now(self) -> float:
        return self.clock

    def close(self) -> None:
        self.running.clear()


@dataclass(frozen=True)
class ReplayedTrial:
    """One trial of a replayed search, in the order the search made it."""

    number: int
    params: dict[str, Any]
    status: str
    samples_per_s: float | None
    cost_s: float
    """Replayed time: the recorded duration; 0 for skipped and repeated trials (no process ran)."""
    repeat_of: int | None = None
    finished_at: float | None = None
    """On the simulated clock: when the trial's result was known (several slots run at once)."""

    @property
    def measured(self) -> bool:
        return self.status != Status.SKIPPED and self.repeat_of is None


def landscape_spec(landscape: Landscape, name: str = "replay", device: str | None = None) -> dict[str, Any]:
    """A spec (as a YAML-like mapping) whose space is exactly the landscape's columns and values,
    on the landscape's device (``device`` overrides it: it decides which knobs are searched and
    the ``auto`` search's priors), with the recording's warm-up and measured steps where known."""
    spec = {"name": name, "experiment": "experiments.bert", "device": device or landscape.device,
            "space": {c: list(landscape.values(c)) for c in landscape.columns},
            "objective": {"metric": "samples_per_s", "direction": "maximize"},
            "search": {"sampler": "grid"}}
    if landscape.steps is not None:  # the steps the recorded durations were made with
        spec["trial"] = {"warmup_steps": landscape.steps[0], "measure_steps": landscape.steps[1]}
    return spec


@dataclass(frozen=True)
class Replayed:
    """A replayed sweep: its trials in the order their results were known, and how it ended."""

    records: list["ReplayedTrial"]
    stopped_because: str | None
    end_s: float
    """The simulated clock when the sweep ended (it ended itself, or ran out of configurations)."""
    answer: dict[str, Any] | None = None
    """The best configuration the sweep reported (``records.rank``'s first), None if none fitted."""
    unsure: bool = False
    """The search stopped saying it could not tell its best from a rival (``search/remeasure``)."""
    study: Study | None = None
    """The replay's in-memory Optuna study, every trial's record in it."""


def replay_sweep(spec_dict: dict[str, Any], landscape: Landscape, seed: int, skip: bool,
                 sampler: object = None, launcher: Callable[..., Launched] | None = None,
                 neighbours: bool = True, slots: int = 1) -> list[ReplayedTrial]:
    """``replay_run``'s trials (see there)."""
    return replay_run(spec_dict, landscape, seed, skip, sampler, launcher, neighbours, slots).records


def replay_run(spec_dict: dict[str, Any], landscape: Landscape, seed: int, skip: bool,
               sampler: Any = None, launcher: Callable[..., Launched] | None = None,
               neighbours: bool = True, slots: int = 1, noise: float | Noise = 0.0) -> Replayed:
    """Run the orchestrator's sweep loop over ``landscape``. ``sampler`` replaces the one the spec
    names (``strategy.make_sampler``), to try another setting; ``neighbours=False`` turns off the
    queueing of a re-proposed configuration's nearest neighbour; ``slots`` trials run at once
    (``ReplayRunner``); ``noise``: ``ReplayLauncher``'s. The sweep gets the memory limit a real
    run's probe would have reported (``Landscape.memory_limit_gib``)."""
    import optuna

    from orchestrator.search.space import make_plan
    from orchestrator.spec.load import check_spec
    from orchestrator.search.strategy import make_sampler
    from orchestrator.sweep.loop import Sweep
    from orchestrator.sweep.seams import SweepOptions

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    data = copy.deepcopy(spec_dict)
    search = data.setdefault("search", {})
    search["seed"], search["skip_predicted_oom"] = seed, skip
    spec = check_spec(data, REPLAY_PATH, {})
    plan = make_plan(spec, spec.device if spec.device != "auto" else "cpu")
    study = optuna.create_study(directions=[d for _, d in spec.objective.metrics],
                                sampler=sampler if sampler is not None else make_sampler(spec, 0))
    runner = ReplayRunner(launcher or ReplayLauncher(landscape, noise, seed), slots)
    if isinstance(runner.launcher, ReplayLauncher):
        runner.launcher.clock = lambda: runner.clock  # a drifting noise reads the simulated time
    sweep = Sweep(spec, plan, study, NullTracker(), REPLAY_PATH, StopFlag(), runner,
                  SweepOptions(neighbours=neighbours, memory_limit_gib=landscape.memory_limit_gib,
                               native_half=landscape.native_half))
    finished: dict[int, float] = {}
    result = sweep.run(lambda trial, outcome, now: finished.__setitem__(trial.number, now))
    answer = dict(result.best[0].params) if result.best else None
    unsure = result.verdict is not None and result.verdict.unsure
    return Replayed(replayed_trials(study, finished), result.stopped_because, runner.clock, answer, unsure, study)


def replayed_trials(study: Study, finished: dict[int, float] | None = None) -> list[ReplayedTrial]:
    """What the study recorded, trial by trial (repeats are told by the sweep, not run), in the
    order their results were known."""
    out = []
    finished = finished or {}
    for t in study.get_trials(deepcopy=False):
        rec = record.TrialRecord.of(t)
        status = rec.status or Status.UNKNOWN
        repeat_of = rec.repeat_of if rec.repeat_of is not None else rec.deferred_to
        ran = status not in (Status.SKIPPED, Status.DEFERRED) and repeat_of is None
        sps = rec.metrics.get("samples_per_s") if ran and status == Status.OK else None
        out.append(ReplayedTrial(t.number, dict(t.params), status, sps,
                               float(rec.duration_s or 0.0) if ran else 0.0, repeat_of, finished.get(t.number)))
    return sorted(out, key=lambda r: (r.finished_at if r.finished_at is not None else 0.0, r.number))


def lightning_search(landscape: Landscape, batch: str = "batch_size", precision: str | None = "dtype",
                     others: dict[str, Any] | None = None) -> list[ReplayedTrial]:
    """PyTorch Lightning's batch-size finder in power mode, once per precision: start at the
    smallest batch, double while it fits, keep the largest that fitted. Lightning tunes one fixed
    configuration, so every other column is held at ``others`` (default: ``False`` for a boolean
    column, i.e. the feature off, else the column's first value). Lightning doubles; on a list
    sparser than doubling (64, 256, 1024) the next larger listed batch stands for its next step.
    The search stops at the first batch that does not fit (any status but ok) or at the largest."""
    others = dict(others) if others is not None else default_others(landscape, batch, precision)
    batches = set(landscape.values(batch))
    precisions = landscape.values(precision) if precision in landscape.columns else (None,)
    out: list[ReplayedTrial] = []
    for p in precisions:
        b = min(batches)
        while True:
            params: dict[str, Any] = {**others, batch: b, **({precision: p} if p is not None else {})}  # type: ignore[dict-item]  # p is None where precision is
            row = landscape.row(params)
            out.append(ReplayedTrial(len(out), {c: row.params[c] for c in landscape.columns}, row.status,
                                   row.samples_per_s if row.status == Status.OK else None, row.duration_s))
            larger = [x for x in batches if x > b]
            if row.status != Status.OK or not larger:
                break
            b = min(larger)
    return out


def default_others(landscape: Landscape, batch: str, precision: str | None) -> dict[str, Any]:
    out = {}
    for c in landscape.columns:
        if c in (batch, precision):
            continue
        values = landscape.values(c)
        out[c] = False if all(isinstance(v, bool) for v in values) and False in values else values[0]
    return out


def lightning_pick(records: list[ReplayedTrial], precision: str | None = "dtype") -> ReplayedTrial | None:
    """"Then pick the fastest": among the largest fitting batch of each precision, the fastest."""
    largest: dict[Any, ReplayedTrial] = {}
    for r in records:
        if r.status == Status.OK:
            largest[r.params.get(precision) if precision else None] = r  # doubling: the last ok is the largest
    candidates = [r for r in largest.values() if r.samples_per_s is not None]
    return max(candidates, key=lambda r: r.samples_per_s) if candidates else None  # type: ignore[arg-type,return-value]  # candidates have a throughput


@dataclass(frozen=True)
class BandHit:
    trials: int
    """Measured trials (processes run) up to and including the one that reached the band."""
    asked: int
    """Every trial the study holds by then, skipped and repeated ones included."""
    cost_s: float
    """Replayed time until then: the sum of the measured trials' recorded durations."""


def time_to_band(records: list[ReplayedTrial], threshold: float,
                 truth: Callable[[ReplayedTrial], float | None] | None = None) -> BandHit | None:
    """The first measured trial whose throughput is ``>= threshold``; None if none reaches it. A
    skipped or repeated trial never counts as finding it (nothing was measured). ``truth``: the
    throughput to judge by (default what the trial measured; with replay noise, the recorded one)."""
    trials, cost = 0, 0.0
    for i, r in enumerate(records):
        if not r.measured:
            continue
        trials += 1
        cost += r.cost_s
        value = r.samples_per_s if truth is None else (truth(r) if r.status == Status.OK else None)
        if r.status == Status.OK and value is not None and value >= threshold:
            return BandHit(trials, i + 1, cost)
    return None
