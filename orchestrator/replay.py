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
import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from orchestrator.errors import OrchestratorError
from orchestrator.launch import Launched, StopFlag
from orchestrator.outcome import Outcome
from orchestrator.space import config_key

RESULT_COLUMNS = ("status", "samples_per_s", "peak_memory_gib", "duration_s")
RECORDED_STATUSES = ("ok", "oom", "timeout", "crashed", "error", "diverged")
REPLAY_PATH = Path("<replay>")


class LandscapeError(OrchestratorError, ValueError):
    """A landscape table that cannot be read, or a configuration it does not hold."""


@dataclass(frozen=True)
class Row:
    """One recorded trial."""

    params: dict[str, Any]
    status: str
    samples_per_s: float | None
    peak_memory_gib: float | None
    duration_s: float
    """Wall time of the recorded trial's process: what replaying it costs."""


@dataclass(frozen=True)
class Landscape:
    path: Path
    columns: tuple[str, ...]
    """The swept parameters, in the table's order."""
    rows: dict[str, Row]
    """``config_key`` of the parameters -> the recorded result, in the table's order."""

    def values(self, column: str) -> tuple[Any, ...]:
        """A column's distinct values in order of first appearance (for a table written from a
        grid study, the order of the spec's list)."""
        seen: dict[str, Any] = {}
        for row in self.rows.values():
            seen.setdefault(config_key({column: row.params[column]}), row.params[column])
        return tuple(seen.values())

    def row(self, params: dict[str, Any]) -> Row:
        missing = [c for c in self.columns if c not in params]
        if missing:
            raise LandscapeError(f"{self.path}: the configuration {params} lacks the landscape's "
                                 f"column(s) {', '.join(missing)}")
        wanted = {c: params[c] for c in self.columns}
        row = self.rows.get(config_key(wanted))
        if row is None:
            raise LandscapeError(f"{self.path}: no recorded result for {wanted}; the landscape holds "
                                 f"{len(self.rows)} configurations of {', '.join(self.columns)}")
        return row

    def best_feasible(self) -> float:
        """The highest recorded ``samples_per_s`` of a trial that fitted in memory."""
        values = [r.samples_per_s for r in self.rows.values() if r.status == "ok" and r.samples_per_s is not None]
        if not values:
            raise LandscapeError(f"{self.path}: no configuration has status ok")
        return max(values)

    def total_duration_s(self) -> float:
        return sum(r.duration_s for r in self.rows.values())


def _parse_column(name: str, texts: list[str]) -> list[Any]:
    """A parameter column with its type: booleans, integers, floats, else strings."""
    if all(t.lower() in ("true", "false") for t in texts):
        return [t.lower() == "true" for t in texts]
    for kind in (int, float):
        try:
            return [kind(t) for t in texts]
        except ValueError:
            continue
    return texts


def _number(text: str, where: str) -> float | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise LandscapeError(f"{where}: must be a number or empty, got {text!r}") from None


def load_landscape(csv_path: str | Path) -> Landscape:
    """Read a landscape CSV (``bench/export_landscape.py``'s format)."""
    path = Path(csv_path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        table = list(reader)
    missing = [c for c in RESULT_COLUMNS if c not in header]
    if missing:
        raise LandscapeError(f"{path}: missing column(s) {', '.join(missing)}; a landscape has the "
                             f"swept parameters, then {', '.join(RESULT_COLUMNS)}")
    columns = tuple(c for c in header if c not in RESULT_COLUMNS)
    if not columns or not table:
        raise LandscapeError(f"{path}: needs at least one parameter column and one row")
    typed = {c: _parse_column(c, [r[c] for r in table]) for c in columns}
    rows: dict[str, Row] = {}
    for i, raw in enumerate(table):
        line = f"{path}:{i + 2}"
        params = {c: typed[c][i] for c in columns}
        if raw["status"] not in RECORDED_STATUSES:
            raise LandscapeError(f"{line}: status must be one of {', '.join(RECORDED_STATUSES)}, "
                                 f"got {raw['status']!r}")
        duration = _number(raw["duration_s"], f"{line}: duration_s")
        if duration is None or duration < 0:
            raise LandscapeError(f"{line}: duration_s must be a number >= 0, got {raw['duration_s']!r}")
        key = config_key(params)
        if key in rows:
            raise LandscapeError(f"{line}: configuration {params} appears twice")
        rows[key] = Row(params, raw["status"], _number(raw["samples_per_s"], f"{line}: samples_per_s"),
                        _number(raw["peak_memory_gib"], f"{line}: peak_memory_gib"), duration)
    return Landscape(path, columns, rows)


class ReplayLauncher:
    """``launch.launch_trial``'s signature; answers from the landscape and creates nothing on disk."""

    def __init__(self, landscape: Landscape) -> None:
        self.landscape = landscape
        self.calls: list[dict[str, Any]] = []

    def __call__(self, config: dict[str, Any], trial_dir: Path, env: dict[str, str], timeout_s: float,
                 stop: StopFlag | None = None) -> Launched:
        row = self.landscape.row(config["params"])
        self.calls.append({c: row.params[c] for c in self.landscape.columns})
        metrics = {k: v for k, v in (("samples_per_s", row.samples_per_s),
                                      ("peak_memory_gib", row.peak_memory_gib)) if v is not None}
        detail = None if row.status == "ok" else f"replayed from {self.landscape.path.name}: {row.status}"
        return Launched(Outcome(row.status, detail, {"status": row.status, "metrics": metrics}),
                        0 if row.status == "ok" else 1, row.duration_s, None, trial_dir / "trial.log")


class NullTracker:
    """The tracker methods the sweep loop calls, recording nothing (no MLflow)."""

    def start_trial(self, number: int, params: dict[str, Any], tags: dict[str, str]) -> str:
        return f"replay-{number}"

    def finish_trial(self, run_ref: str, status: str, metrics: dict[str, float], tags: dict[str, str],
                     files: list[tuple[Path, str | None]]) -> None:
        return None

    @staticmethod
    def run_id(ref: str) -> str:
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
        from orchestrator.slots import Slot

        self.launcher = launcher
        self.slots = [Slot(f"replay:{i}") for i in range(slots)]
        self.running: dict[int, _ReplayRun] = {}
        self.clock = 0.0

    def idle(self, i: int) -> bool:
        run = self.running.get(i)
        return run is None or run.exited

    def start(self, i: int, config: dict[str, Any], trial_dir: Path, env: dict[str, str], timeout_s: float,
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
class TrialRecord:
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
        return self.status != "skipped" and self.repeat_of is None


def landscape_spec(landscape: Landscape, name: str = "replay", device: str = "cpu") -> dict[str, Any]:
    """A spec (as a YAML-like mapping) whose space is exactly the landscape's columns and values.
    ``device`` only decides which knobs are searched (``space.make_plan``); every knob in the
    recorded landscapes applies on every device."""
    return {"name": name, "experiment": "experiments.bert", "device": device,
            "space": {c: list(landscape.values(c)) for c in landscape.columns},
            "objective": {"metric": "samples_per_s", "direction": "maximize"},
            "search": {"sampler": "grid"}}


def replay_sweep(spec_dict: dict[str, Any], landscape: Landscape, seed: int, skip: bool,
                 sampler: Any = None, launcher: Callable[..., Launched] | None = None,
                 neighbours: bool = True, slots: int = 1) -> list[TrialRecord]:
    """Run the orchestrator's sweep loop over ``landscape``; the trials in the order they were made.
    ``sampler`` replaces the one the spec names (``study.make_sampler``), to try another setting;
    ``neighbours=False`` turns off the queueing of a re-proposed configuration's nearest neighbour;
    ``slots`` trials run at once (``ReplayRunner``)."""
    import optuna

    from orchestrator.space import make_plan
    from orchestrator.spec import check_spec
    from orchestrator.study import make_sampler
    from orchestrator.sweep import Sweep

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    data = copy.deepcopy(spec_dict)
    search = data.setdefault("search", {})
    search["seed"], search["skip_predicted_oom"] = seed, skip
    spec = check_spec(data, REPLAY_PATH, {})
    plan = make_plan(spec, spec.device if spec.device != "auto" else "cpu")
    study = optuna.create_study(directions=[d for _, d in spec.objective.metrics],
                                sampler=sampler if sampler is not None else make_sampler(spec, 0))
    runner = ReplayRunner(launcher or ReplayLauncher(landscape), slots)
    sweep = Sweep(spec, plan, study, NullTracker(), REPLAY_PATH, StopFlag(), runner,  # type: ignore[arg-type]
                  neighbours=neighbours)
    finished: dict[int, float] = {}
    sweep.run(lambda trial, outcome, now: finished.__setitem__(trial.number, now))
    return trial_records(study, finished)


def trial_records(study: Any, finished: dict[int, float] | None = None) -> list[TrialRecord]:
    """What the study recorded, trial by trial (repeats are told by the sweep, not run), in the
    order their results were known."""
    out = []
    finished = finished or {}
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        status = attrs.get("status", "unknown")
        repeat_of = attrs.get("repeat_of", attrs.get("deferred_to"))
        ran = status not in ("skipped", "deferred") and repeat_of is None
        sps = attrs.get("metrics", {}).get("samples_per_s") if ran and status == "ok" else None
        out.append(TrialRecord(t.number, dict(t.params), status, sps,
                               float(attrs.get("duration_s", 0.0)) if ran else 0.0, repeat_of,
                               finished.get(t.number)))
    return sorted(out, key=lambda r: (r.finished_at if r.finished_at is not None else 0.0, r.number))


def lightning_search(landscape: Landscape, batch: str = "batch_size", precision: str | None = "dtype",
                     others: dict[str, Any] | None = None) -> list[TrialRecord]:
    """PyTorch Lightning's batch-size finder in power mode, once per precision: start at the
    smallest batch, double while it fits, keep the largest that fitted. Lightning tunes one fixed
    configuration, so every other column is held at ``others`` (default: ``False`` for a boolean
    column, i.e. the feature off, else the column's first value). The search stops at the first
    batch that does not fit (any status but ok) or when the doubled batch is not in the table."""
    others = dict(others) if others is not None else default_others(landscape, batch, precision)
    batches = set(landscape.values(batch))
    precisions = landscape.values(precision) if precision in landscape.columns else (None,)
    out: list[TrialRecord] = []
    for p in precisions:
        b = min(batches)
        while True:
            params = {**others, batch: b, **({precision: p} if p is not None else {})}
            row = landscape.row(params)
            out.append(TrialRecord(len(out), {c: row.params[c] for c in landscape.columns}, row.status,
                                   row.samples_per_s if row.status == "ok" else None, row.duration_s))
            if row.status != "ok" or b * 2 not in batches:
                break
            b *= 2
    return out


def default_others(landscape: Landscape, batch: str, precision: str | None) -> dict[str, Any]:
    out = {}
    for c in landscape.columns:
        if c in (batch, precision):
            continue
        values = landscape.values(c)
        out[c] = False if all(isinstance(v, bool) for v in values) and False in values else values[0]
    return out


def lightning_pick(records: list[TrialRecord], precision: str | None = "dtype") -> TrialRecord | None:
    """"Then pick the fastest": among the largest fitting batch of each precision, the fastest."""
    largest: dict[Any, TrialRecord] = {}
    for r in records:
        if r.status == "ok":
            largest[r.params.get(precision) if precision else None] = r  # doubling: the last ok is the largest
    candidates = [r for r in largest.values() if r.samples_per_s is not None]
    return max(candidates, key=lambda r: r.samples_per_s) if candidates else None  # type: ignore[arg-type,return-value]


@dataclass(frozen=True)
class BandHit:
    trials: int
    """Measured trials (processes run) up to and including the one that reached the band."""
    asked: int
    """Every trial the study holds by then, skipped and repeated ones included."""
    cost_s: float
    """Replayed time until then: the sum of the measured trials' recorded durations."""


def time_to_band(records: list[TrialRecord], threshold: float) -> BandHit | None:
    """The first measured trial with ``samples_per_s >= threshold``; None if none reaches it. A
    skipped or repeated trial never counts as finding it (nothing was measured)."""
    trials, cost = 0, 0.0
    for i, r in enumerate(records):
        if not r.measured:
            continue
        trials += 1
        cost += r.cost_s
        if r.status == "ok" and r.samples_per_s is not None and r.samples_per_s >= threshold:
            return BandHit(trials, i + 1, cost)
    return None
