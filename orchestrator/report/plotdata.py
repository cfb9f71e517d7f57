"""The data behind the report's plots: which knob goes on which axis, and each plot's points.

Every ``*_series``/``*_grid`` function takes result trials (Optuna ``FrozenTrial``s, or
``studyread.StoredTrial``s, with the ``status`` and ``metrics`` user attributes the sweep sets) and
returns plain values, so a test can check a plot's data against the study and ``compare`` can use
the same rules without drawing anything. Drawing is ``plots``' job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator import metrics as M
from orchestrator.outcome import NOT_FITTING, Status
from orchestrator.store.record import HasAttrs, TrialRecord, status_of
from orchestrator.store.records import is_feasible

MAX_LINES = 8
PRIORITY = NOT_FITTING + (Status.CRASHED, Status.TIMEOUT, Status.ERROR, Status.DIVERGED)  # a cell's failure, worst first
MEMORY_FAILURES = NOT_FITTING  # what the boundary map marks as not fitting
NOTES: dict[str, str] = {Status.OOM: "OOM", Status.SWAPPED: "swaps", Status.SKIPPED: "skipped"}


@dataclass(frozen=True)
class Layout:
    """Which swept knobs go where: ``x`` on the x axis, one line per value of ``groups``, the
    best over ``folded`` at each point, and ``rows`` as the boundary map's second axis."""

    x: str | None
    groups: tuple[str, ...]
    folded: tuple[str, ...]
    rows: str | None


def status(t: HasAttrs) -> str:
    """The trial's status as plain text (``?``: none yet), for the plots' and the report's data."""
    s = status_of(t)
    return s.value if s is not None else "?"


def metric_of(t: HasAttrs, name: str) -> Any:
    return TrialRecord.of(t).metrics.get(name)


def choose_layout(trials: list[Any]) -> Layout:
    names: dict[str, list[Any]] = {}
    for t in trials:
        for k, v in t.params.items():
            if v not in names.setdefault(k, []):
                names[k].append(v)
    swept = [k for k, vs in names.items() if len(vs) > 1]
    numeric = [k for k in swept if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in names[k])]
    x = "batch_size" if "batch_size" in numeric else (numeric[0] if numeric else None)
    others = sorted((k for k in swept if k != x), key=lambda k: k != "dtype")
    groups: list[str] = []
    lines = 1
    for k in others:
        if lines * len(names[k]) <= MAX_LINES:
            groups.append(k)
            lines *= len(names[k])
    rows = others[0] if others else None
    return Layout(x, tuple(groups), tuple(k for k in others if k not in groups), rows)


def label(params: dict[str, Any], knobs: tuple[str, ...]) -> str:
    """``bfloat16, grad_accum_steps=2``: a dtype reads by itself, other knobs as name=value."""
    return ", ".join(str(params.get(k)) if k == "dtype" else f"{k}={params.get(k)}" for k in knobs) or "all"


def pick(cell: list[Any]) -> Any:
    """The trial a point stands for: the fastest ok one, else the worst failure."""
    ok = [t for t in cell if status(t) == Status.OK and metric_of(t, M.SAMPLES_PER_S) is not None]
    if ok:
        return max(ok, key=lambda t: metric_of(t, M.SAMPLES_PER_S))
    return min(cell, key=lambda t: PRIORITY.index(status(t)) if status(t) in PRIORITY else len(PRIORITY))


def points(trials: list[Any], layout: Layout) -> dict[str, list[tuple[Any, Any]]]:
    """Line label -> [(x, the trial that point stands for)], x ascending."""
    cells: dict[str, dict[Any, list[Any]]] = {}
    for t in trials:
        if layout.x is None or layout.x not in t.params:
            continue
        cells.setdefault(label(t.params, layout.groups), {}).setdefault(t.params[layout.x], []).append(t)
    return {name: [(x, pick(cell)) for x, cell in sorted(by_x.items())] for name, by_x in cells.items()}


def metric_series(trials: list[Any], metric: str, layout: Layout | None = None
                  ) -> dict[str, list[tuple[Any, float | None, str]]]:
    """Line label -> [(x, the metric or None, status)]."""
    layout = layout or choose_layout(trials)
    return {name: [(x, metric_of(t, metric) if status(t) == Status.OK else None, status(t))
                   for x, t in pts] for name, pts in points(trials, layout).items()}


def throughput_series(trials: list[Any], layout: Layout | None = None) -> dict[str, list[tuple[Any, float | None, str]]]:
    return metric_series(trials, M.SAMPLES_PER_S, layout)


def interval(t: HasAttrs) -> tuple[float, float] | None:
    """The 95% interval of a trial's throughput (``throughput_ci95``, a half-width on the log
    scale: ``value * exp(-ci)`` to ``value * exp(ci)``); None where it recorded none."""
    value, ci = metric_of(t, M.SAMPLES_PER_S), metric_of(t, M.THROUGHPUT_CI95)
    if status(t) != Status.OK or not isinstance(value, (int, float)) or not isinstance(ci, (int, float)):
        return None
    return value * math.exp(-ci), value * math.exp(ci)


def throughput_intervals(trials: list[Any], layout: Layout | None = None) -> dict[str, list[tuple[Any, float, float]]]:
    """Line label -> [(x, low, high)]: the error bar of each point of ``throughput_series`` that has one."""
    layout = layout or choose_layout(trials)
    out: dict[str, list[tuple[Any, float, float]]] = {}
    for name, pts in points(trials, layout).items():
        out[name] = [(x, *bar) for x, t in pts if (bar := interval(t)) is not None]
    return out


def memory_series(trials: list[Any], layout: Layout | None = None) -> dict[str, list[tuple[Any, float | None, str]]]:
    return metric_series(trials, M.PEAK_MEMORY_GIB, layout)


def oom_grid(trials: list[Any], layout: Layout | None = None) -> dict[str, Any]:
    """The boundary map: ``xs`` x ``rows``; ``values[r][c]`` the best samples/s (None when
    nothing fitted) and ``notes[r][c]`` "" / "OOM" / "swaps" / "1/2 OOM" / "skipped" / "failed" / "not run"
    (a cell that fits only by swapping is on the wrong side of the boundary, as an OOM is)."""
    layout = layout or choose_layout(trials)
    xs = sorted({t.params[layout.x] for t in trials if layout.x in t.params}) if layout.x else []
    rows = list(dict.fromkeys(str(t.params.get(layout.rows)) for t in trials)) if layout.rows else ["all"]
    values = [[None] * len(xs) for _ in rows]
    notes = [["not run"] * len(xs) for _ in rows]
    for r, row in enumerate(rows):
        for c, x in enumerate(xs):
            cell = [t for t in trials if t.params.get(layout.x) == x
                    and (layout.rows is None or str(t.params.get(layout.rows)) == row)]
            if not cell:
                continue
            best = pick(cell)
            bad = [t for t in cell if status(t) in MEMORY_FAILURES]
            if status(best) == Status.OK:
                values[r][c] = metric_of(best, M.SAMPLES_PER_S)
                notes[r][c] = f"{len(bad)}/{len(cell)} OOM" if bad else ""
            else:
                notes[r][c] = NOTES.get(status(best), "failed")
    return {"x": layout.x, "rows_knob": layout.rows, "xs": xs, "rows": rows, "values": values, "notes": notes}


def history_series(trials: list[Any], direction: str) -> list[tuple[int, float | None, float | None, str]]:
    """[(trial number, its objective value or None, best feasible so far or None, status)]."""
    out, best = [], None
    for t in sorted(trials, key=lambda t: t.number):
        value = t.values[0] if t.state.name == "COMPLETE" and t.values else None
        if value is not None and is_feasible(t):
            better = best is None or (value > best if direction == "maximize" else value < best)
            best = value if better else best
        out.append((t.number, value, best, status(t)))
    return out


def pareto_points(trials: list[Any], front: tuple[int, ...]) -> list[tuple[int, float, float, bool]]:
    """[(trial number, first objective, second objective, on the front)] for measured trials."""
    return [(t.number, t.values[0], t.values[1], t.number in front) for t in sorted(trials, key=lambda t: t.number)
            if t.state.name == "COMPLETE" and t.values and len(t.values) >= 2]
