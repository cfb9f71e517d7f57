"""A recorded landscape: the real result of every configuration of a space, one CSV row each.

``bench/export_landscape.py`` writes it from a finished grid study: the swept parameters as
columns, then ``status``, ``samples_per_s``, ``peak_memory_gib`` and ``duration_s`` (the wall time
of the trial's process, what a replayed trial costs). Beside the tables, ``landscapes.json`` says
what a real run would have known about each one's machine: its device (the search's priors
depend on it) and the memory a trial could use there, where the device reports it.
``orchestrator.replay.strategies`` runs the real sweep loop over a landscape. Pure reading; no Optuna.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.outcome import Status
from orchestrator.keys import config_key

INDEX = "landscapes.json"

RESULT_COLUMNS = ("status", "samples_per_s", "peak_memory_gib", "duration_s")
RECORDED_STATUSES = (Status.OK, Status.OOM, Status.TIMEOUT, Status.CRASHED, Status.ERROR, Status.DIVERGED)


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
    device: str = "cpu"
    """The device it was recorded on (``landscapes.json``)."""
    memory_limit_gib: float | None = None
    """What a trial could use there, as a real run's probe would have reported it, if known."""
    contradicts: str | None = None
    """The search's prior this landscape was recorded to contradict (``landscapes.json``), if any:
    the benchmark holds such landscapes to their own targets."""
    native_half: frozenset[str] | None = None
    """A CPU landscape: the half precisions its trials had instructions for (``landscapes.json``'s
    ``native_half``, read off the CPU's flags and ``cpu_isa``), as a real run tells the planner;
    None where not recorded."""
    steps: tuple[int, int] | None = None
    """The recording's warm-up and measured steps a trial (``landscapes.json``'s ``warmup_steps``
    and ``measure_steps``): a replay's spec runs the same, so that its planner prices a trial's
    work as the recorded durations were made (``search/cost``); None where not recorded."""

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
        values = [r.samples_per_s for r in self.rows.values() if r.status == Status.OK and r.samples_per_s is not None]
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
    about = _index(path).get(path.name, {})
    native = about.get("native_half")
    steps = (int(about["warmup_steps"]), int(about["measure_steps"])) if "measure_steps" in about else None
    return Landscape(path, columns, rows, about.get("device", "cpu"), about.get("memory_limit_gib"),
                     about.get("contradicts"), None if native is None else frozenset(native), steps)


def _index(path: Path) -> dict[str, Any]:
    """``landscapes.json`` beside the table: {file name: {"device": ..., "memory_limit_gib": ...,
    "contradicts": ..., "warmup_steps": ..., "measure_steps": ...}}."""
    index = path.parent / INDEX
    try:
        data = json.loads(index.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise LandscapeError(f"{index}: not valid JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


