"""The data behind the report's plots: which knob goes on which axis, and each plot's points.

Every ``*_series``/``*_grid`` function takes result trials (Optuna ``FrozenTrial``s, or
``studyread.StoredTrial``s, with the ``status`` and ``metrics`` user attributes the sweep sets) and
returns plain values, so a test can check a plot's data against the study and ``compare`` can use
the same rules without drawing anything; ``PlotContext`` is what the plots say besides the trials.
Drawing is ``plots``' job.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

from orchestrator import metrics as M
from orchestrator.outcome import NOT_FITTING, Status
from orchestrator.store.record import HasAttrs, TrialRecord, status_of
from orchestrator.store.records import is_feasible

MAX_LINES = 8
PRIORITY = NOT_FITTING + (Status.CRASHED, Status.TIMEOUT, Status.ERROR, Status.DIVERGED)  # a cell's failure, worst first
MEMORY_FAILURES = NOT_FITTING  # what the boundary map marks as not fitting
NOTES: dict[str, str] = {Status.OOM: "OOM", Status.SWAPPED: "swaps", Status.SKIPPED: "skipped"}
MAX_TICKS = 12
"""An axis with more values than this (a ranged knob's samples) gets matplotlib's ticks on the line
plots, and ``BINS`` ranges on the boundary map, not a tick or a column per value."""
BINS = 8
CLIP = 24  # a value in a legend or on a tick, cut beyond this many characters
LEGEND_CHARS = 45  # a legend entry longer than this gives the names once, in the legend's title
T = TypeVar("T", bound=HasAttrs)


class Numbered(Protocol):
    @property
    def number(self) -> int: ...


N = TypeVar("N", bound=Numbered)


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


def metric_of(t: HasAttrs, name: str) -> float | None:
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


def shown(value: object) -> str:
    """A value as a plot labels it: a float to 4 significant digits (``0.06392``), else as it is."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def tick_text(value: float, _: int | None = None) -> str:
    """A tick matplotlib placed, as ``shown``: ``96``, ``0.001``."""
    return shown(int(value)) if float(value).is_integer() else shown(float(value))


def clip(text: str, n: int = CLIP) -> str:
    return text if len(text) <= n else text[:n - 1] + "\u2026"


def label(params: dict[str, Any], knobs: tuple[str, ...]) -> str:
    """``bfloat16, grad_accum_steps=2``: a dtype reads by itself, other knobs as name=value."""
    return ", ".join(str(params.get(k)) if k == "dtype" else f"{k}={params.get(k)}" for k in knobs) or "all"


def legend_labels(trials: list[Any], layout: Layout) -> tuple[dict[str, str], str]:
    """Each line's legend text by its key (``label``), and the legend's title. As ``label``, floats
    to 4 digits; where an entry would be longer than ``LEGEND_CHARS``, the values alone, each cut at
    ``CLIP`` characters, and the knobs' names once, as the title (``""``: no title)."""
    params = {label(t.params, layout.groups): t.params for t in trials}
    full = {key: ", ".join(shown(p.get(k)) if k == "dtype" else f"{k}={shown(p.get(k))}" for k in layout.groups)
            or "all" for key, p in params.items()}
    if max(map(len, full.values()), default=0) <= LEGEND_CHARS:
        return full, ""
    short = {key: ", ".join(clip(shown(p.get(k))) for k in layout.groups) for key, p in params.items()}
    if len(set(short.values())) < len(short):  # values alike in their first characters: numbered
        short = {key: f"{i}: {text}" for i, (key, text) in enumerate(short.items(), 1)}
    return short, ", ".join(layout.groups)


def pick(cell: list[T]) -> T:
    """The trial a point stands for: the fastest ok one, else the worst failure."""
    ok = [t for t in cell if status(t) == Status.OK and metric_of(t, M.SAMPLES_PER_S) is not None]
    if ok:
        return max(ok, key=lambda t: metric_of(t, M.SAMPLES_PER_S) or 0.0)
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


def numeric(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _axis(values: list[Any]) -> tuple[list[Any], list[str], Callable[[Any], int]] | None:
    """One axis of the boundary map: (its columns, their labels, a value's column). A column per
    value (sorted where all are numbers, else in the order tried); over ``MAX_TICKS`` numbers,
    ``BINS`` ranges (log-spaced over a wide positive range), each ``(low, high)``; None where over
    ``MAX_TICKS`` values are not numbers."""
    distinct = list(dict.fromkeys(values))
    if numeric(distinct):
        distinct.sort()
    if len(distinct) <= MAX_TICKS:
        where = {v: i for i, v in enumerate(distinct)}
        return distinct, [clip(shown(v)) for v in distinct], where.__getitem__
    if not numeric(distinct):
        return None
    lo, hi = distinct[0], distinct[-1]
    log = lo > 0 and hi / lo >= 8
    edges = [lo * (hi / lo) ** (i / BINS) if log else lo + (hi - lo) * i / BINS for i in range(BINS + 1)]
    whole = all(isinstance(v, int) for v in distinct)
    if whole:  # integer ranges: 8-12, 13-22, ..., 304-512
        edges = sorted({round(e) for e in edges})
    bins = list(zip(edges, edges[1:]))
    last = len(bins) - 1
    tops = [b - (whole and i < last) for i, (_, b) in enumerate(bins)]  # whole numbers: the bin's last one
    labels = [str(a) if a == b else f"{a}\u2013{b}" if whole else f"{a:.3g}\u2013{b:.3g}" for (a, _), b in zip(bins, tops)]
    return bins, labels, lambda v: min(bisect_right(edges, v) - 1, last)


def oom_grid(trials: list[Any], layout: Layout | None = None, best: int | None = None) -> dict[str, Any] | None:
    """The boundary map: ``xs`` x ``rows``; ``values[r][c]`` the best samples/s (None when
    nothing fitted) and ``notes[r][c]`` "" / "OOM" / "swaps" / "1/2 OOM" / "skipped" / "failed" / "not run"
    (a cell that fits only by swapping is on the wrong side of the boundary, as an OOM is).
    ``x_labels`` and ``rows`` label the columns and rows (``_axis``: a ranged knob's samples in
    ranges); ``best`` is the cell (r, c) of trial number ``best`` (None: none). None where a knob has
    too many values that are not numbers to map."""
    layout = layout or choose_layout(trials)
    placed = [t for t in trials if layout.x in t.params] if layout.x else []
    x_axis = _axis([t.params[layout.x] for t in placed])
    row_axis = _axis([t.params.get(layout.rows) for t in trials]) if layout.rows else ([None], ["all"], lambda _: 0)
    if x_axis is None or row_axis is None:
        return None
    (xs, x_labels, col), (_, rows, row) = x_axis, row_axis
    cells: dict[tuple[int, int], list[Any]] = {}
    for t in placed:
        cells.setdefault((row(t.params.get(layout.rows)), col(t.params[layout.x])), []).append(t)
    values: list[list[Any]] = [[None] * len(xs) for _ in rows]
    notes = [["not run"] * len(xs) for _ in rows]
    for (r, c), cell in cells.items():
        top = pick(cell)
        bad = [t for t in cell if status(t) in MEMORY_FAILURES]
        if status(top) == Status.OK:
            values[r][c] = metric_of(top, M.SAMPLES_PER_S)
            notes[r][c] = f"{len(bad)}/{len(cell)} OOM" if bad else ""
        else:
            notes[r][c] = NOTES.get(status(top), "failed")
    at = next(((r, c) for (r, c), cell in cells.items() if best in {t.number for t in cell}), None)
    return {"x": layout.x, "rows_knob": layout.rows, "xs": xs, "x_labels": x_labels, "rows": rows,
            "values": values, "notes": notes, "best": at}


def history_series(trials: list[Any], direction: str) -> list[tuple[int, float | None, float | None, str, bool]]:
    """[(trial number, its objective value or None, best feasible so far or None, status, measured
    again later)] over every measurement (``measurements``): the best so far is what the study
    knew after each trial, each configuration by its newest measurement, as the report ranks it
    (a tour: with only the newest drawn, two configurations measured first were missing and the
    best so far read 568 where 705.7 had been measured)."""
    from orchestrator.keys import config_key

    ordered = sorted(trials, key=lambda t: t.number)
    last = {config_key(t.params): t.number for t in ordered}
    known: dict[str, float] = {}
    out = []
    for t in ordered:
        value = t.values[0] if t.state.name == "COMPLETE" and t.values else None
        key = config_key(t.params)
        known.pop(key, None)
        if value is not None and is_feasible(t):
            known[key] = value
        best = (max if direction == "maximize" else min)(known.values()) if known else None
        out.append((t.number, value, best, status(t), last[key] != t.number))
    return out


def pareto_points(trials: list[Any], front: tuple[int, ...]) -> list[tuple[int, float, float, bool]]:
    """[(trial number, first objective, second objective, on the front)] for measured trials."""
    return [(t.number, t.values[0], t.values[1], t.number in front) for t in sorted(trials, key=lambda t: t.number)
            if t.state.name == "COMPLETE" and t.values and len(t.values) >= 2]


@dataclass(frozen=True)
class PlotContext:
    """What the plots say besides the trials: subtitle, objective, and memory lines."""

    subtitle: str
    objective: tuple[tuple[str, str], ...]
    budget_gib: float | None = None
    limit: MemoryLimit | None = None
    front: tuple[int, ...] = field(default_factory=tuple)
    best: int | None = None
    """The number of the trial the report calls best (``document.pick_best``): starred, outlined."""

    def best_of(self, trials: list[N]) -> N | None:
        """The report's best among ``trials``, or None."""
        return next((t for t in trials if t.number == self.best), None)


@dataclass(frozen=True)
class MemoryLimit:
    """A memory line on the memory plot: the device's memory (said, not drawn, where it is far
    above every peak) or the limit the spec sets (``set``: always drawn)."""

    gib: float
    label: str
    set: bool = False
