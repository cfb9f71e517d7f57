"""The report's plots, drawn with matplotlib (Agg) from the data ``plotdata`` computes.

matplotlib is imported only inside the drawing functions; the data (``plotdata``) needs none.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import metrics as M
from orchestrator.outcome import Status
from orchestrator.report.plotdata import (MAX_TICKS, MEMORY_FAILURES, NOTES, PlotContext, choose_layout, history_series,
                                          legend_labels, metric_of, metric_series, oom_grid, pareto_points, shown,
                                          throughput_intervals, tick_text)

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.axes import Axes

LINE_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
MARKS = {Status.OOM: ("X", "tab:red", "out of memory"), Status.SWAPPED: ("D", "tab:orange", "fits but swaps"),
         Status.SKIPPED: ("^", "white", "skipped: predicted OOM, not run"),
         "failed": ("s", "0.45", "failed (crash, timeout, error, diverged)")}
AXIS = {"batch_size": "micro-batch size (samples)", "grad_accum_steps": "gradient accumulation steps",
        "seq_len": "sequence length (tokens)", "effective_batch_size": "effective batch size (samples)",
        M.SAMPLES_PER_S: "throughput (samples/s)", M.TOKENS_PER_S: "throughput (tokens/s)",
        M.PEAK_MEMORY_GIB: "peak memory (GiB)", M.STEP_TIME_MS_P50: "step time, median (ms)",
        M.STEP_TIME_MS_P90: "step time, 90th percentile (ms)", M.DURATION_S: "trial duration (s)",
        M.LOSS: "training loss"}
OFF_SCALE = 4.0  # the device's memory, over this many times the highest peak, is said, not drawn
BEST = {"marker": "*", "s": 320, "color": "gold", "edgecolors": "black", "linewidths": 1.2, "zorder": 6}


# -- drawing -------------------------------------------------------------------------------------

def _figure(title: str, ctx: PlotContext):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    ax.set_prop_cycle(color=LINE_COLOURS)
    fig.suptitle(title, fontsize=15, fontweight="bold")
    ax.set_title(ctx.subtitle, fontsize=10, color="0.3")
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError:  # a full disk: no half-written plot left
        path.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return path


def _folded(ax: Axes, ctx: PlotContext, knobs: tuple[str, ...], what: str) -> None:
    if knobs:
        ax.set_title(f"{ax.get_title()}\neach {what}: the fastest over {', '.join(knobs)}", fontsize=10, color="0.3")


def _x_axis(ax: Axes, xs: list[Any], name: str) -> bool:
    """Label the x axis with the values tried (over ``MAX_TICKS``, a ranged knob's samples:
    matplotlib's ticks); base-2 log scale for wide ranges (returns whether)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xlabel(AXIS.get(name, name))
    log = bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= 8
    if log:
        ax.set_xscale("log", base=2)
    if len(xs) <= MAX_TICKS:
        ax.set_xticks(xs, [shown(x) for x in xs])
    elif log:  # 64, 96, 128, 192, ... over a few octaves
        ax.xaxis.set_major_locator(LogLocator(base=2, subs=(1.0, 1.5) if max(xs) / min(xs) <= 64 else (1.0,),
                                              numticks=MAX_TICKS))
    if len(xs) > MAX_TICKS:
        ax.xaxis.set_major_formatter(FuncFormatter(tick_text))
    ax.minorticks_off()
    return log


def _failures(ax: Axes, pts: list[tuple[Any, str]], y: float, edge: str, failed_y: float | None = None) -> set[str]:
    """Failed points as markers on the line ``y`` (the axis floor or the memory limit; the failures
    that are not about memory at ``failed_y``, where given); the marker says what failed, its edge
    which line it belongs to (gid ``failed:KIND``). Returns the kinds drawn."""
    kinds = set()
    for kind, (shape, colour, _) in MARKS.items():
        xs = [x for x, s in pts if (s if s in MEMORY_FAILURES else "failed") == kind]
        if xs:
            at = y if kind != "failed" or failed_y is None else failed_y
            ax.scatter(xs, [at] * len(xs), marker=shape, s=120, color=colour, edgecolors=edge, linewidths=1.8,
                       zorder=5, gid=f"failed:{kind}")
            kinds.add(kind)
    return kinds


def _failure_legend(ax: Axes, kinds: set[str], where: dict[str, str] | None = None) -> None:
    for kind in (k for k in MARKS if k in kinds):
        shape, colour, text = MARKS[kind]
        ax.scatter([], [], marker=shape, s=120, color=colour, edgecolors="black", linewidths=1,
                   label=text + (where or {}).get(kind, ""))


def plot_lines(trials: list[Any], ctx: PlotContext, path: Path, metric: str) -> Path:
    """Throughput (or peak memory) against the x knob, one line per group, the best configuration a
    star; failed configurations are marked on the floor, and on the memory plot those that did not
    fit on the memory limit (above it where off the scale); lines that coincide each show (a marker per line)."""
    layout = choose_layout(trials)
    assert layout.x is not None  # write_plots draws line plots only when there is an x knob
    series = metric_series(trials, metric, layout)
    names, legend_title = legend_labels(trials, layout)
    memory = metric == M.PEAK_MEMORY_GIB
    fig, ax = _figure(f"{'Peak memory' if memory else 'Throughput'} against {AXIS.get(layout.x, layout.x).split(' (')[0]}", ctx)
    _folded(ax, ctx, layout.folded, "point")
    measured = [v for pts in series.values() for _, v, _ in pts if v is not None]
    limits = []  # (GiB, legend text, line style, colour)
    if memory and ctx.budget_gib:
        limits.append((ctx.budget_gib, f"memory budget (constraint): {ctx.budget_gib:g} GiB", "--", "0.3"))
    limit = ctx.limit if memory else None
    off = limit is not None and bool(measured) and limit.gib > OFF_SCALE * max(measured) and not limit.set
    if limit and not off:
        limits.append((limit.gib, limit.label, "-", "tab:red"))
    top = max(measured + [v for v, *_ in limits], default=1.0)
    xs = sorted({x for pts in series.values() for x, _, _ in pts})
    log = _x_axis(ax, xs, layout.x)
    on_limit = (limit.gib if limit and not off else top * 1.05) if memory else 0.0
    kinds: set[str] = set()
    bars = {} if memory else throughput_intervals(trials, layout)
    if any(bars.values()):  # room for the bars, up to twice the fastest point (a wider one runs off the top)
        top = min(2 * top, max([top] + [hi for pts in bars.values() for _, _, hi in pts]))
    for i, (name, pts) in enumerate(series.items()):
        ok = [(x, v) for x, v, _ in pts if v is not None]
        (line,) = ax.plot([x for x, _ in ok], [v for _, v in ok], marker="osD^v"[i % 5], markersize=max(4, 9 - 1.5 * i),
                          linewidth=2, zorder=3 + 0.1 * i, label=names.get(name, name) if ok else "_nolegend_")  # each shows
        values = dict(ok)
        shift = i - (len(series) - 1) / 2  # side by side, so that failures at one x do not hide each other
        drawn = [(x, lo, hi) for x, lo, hi in bars.get(name, ()) if x in values]
        if drawn:  # the 95% interval of each point (throughput_ci95), beside the others' at the same x
            at = [x * 2 ** (0.04 * shift) if log else x + shift * 0.008 * ((xs[-1] - xs[0]) or 1) for x, _, _ in drawn]
            ax.errorbar(at, [values[x] for x, _, _ in drawn],
                        yerr=[[values[x] - lo for x, lo, _ in drawn], [hi - values[x] for x, _, hi in drawn]],
                        fmt="none", ecolor=line.get_color(), elinewidth=1.2, capsize=4, alpha=0.8)
        bad = [(x * 2 ** (0.15 * shift) if log else x + shift * 0.025 * ((xs[-1] - xs[0]) or 1), s)
               for x, v, s in pts if v is None]
        kinds |= _failures(ax, bad, on_limit, line.get_color(), 0.0)
    for value, text, style, colour in limits:
        ax.axhline(value, linestyle=style, color=colour, linewidth=1.5, label=text)
    if limit and off:
        ax.plot([], [], " ", label=f"{limit.label} ({limit.gib / max(measured):.0f}x the highest peak: not drawn)")
    best = ctx.best_of(trials)
    if best is not None and layout.x in best.params and isinstance(v := metric_of(best, metric), (int, float)):
        ax.scatter([best.params[layout.x]], [v], label=f"best: trial {best.number}", gid="best", **BEST)
    where = " (drawn on the limit)" if limit and not off else " (drawn above the measurements)"
    _failure_legend(ax, kinds, {k: where for k in MEMORY_FAILURES} | {"failed": " (drawn at 0)"} if memory else {})
    ax.set_ylabel(AXIS[metric] + (" (bars: 95% interval)" if any(bars.values()) else ""))
    ax.set_ylim(-0.04 * top, top * 1.12)  # failures on the floor stay clear of the x labels
    if not measured:  # the failures' markers alone: no scale to read
        ax.set_yticks([])
    ax.legend(loc="best", fontsize=9, framealpha=0.9, title=textwrap.fill(legend_title, 60) or None, title_fontsize=8)
    return _save(fig, path)


def plot_oom_map(trials: list[Any], ctx: PlotContext, path: Path) -> Path | None:
    """The boundary map (``plotdata.oom_grid``), the best configuration's cell outlined; None (not
    drawn) where a knob has too many values that are not numbers to map."""
    import matplotlib
    import numpy as np
    from matplotlib.patches import Rectangle

    layout = choose_layout(trials)
    best = ctx.best_of(trials)
    grid = oom_grid(trials, layout, best.number if best is not None else None)
    if grid is None:
        return None
    fig, ax = _figure("Out-of-memory boundary: where each configuration fits", ctx)
    _folded(ax, ctx, tuple(k for k in layout.groups + layout.folded if k != layout.rows), "cell")
    data = np.array([[np.nan if v is None else v for v in row] for row in grid["values"]], dtype=float)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.92")
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, aspect="auto")
    finite = data[np.isfinite(data)]
    if finite.size:  # nothing measured: no scale to show
        fig.colorbar(image, ax=ax, label="best throughput (samples/s)")
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0
    size = 11 if data.size <= 36 else 8
    for r in range(len(grid["rows"])):
        for c in range(len(grid["xs"])):
            v, note = grid["values"][r][c], grid["notes"][r][c]
            if v is None:
                ax.text(c, r, note, ha="center", va="center", fontsize=size if note == "not run" else size + 2,
                        fontweight="normal" if note == "not run" else "bold",
                        color={"OOM": "tab:red", "swaps": "tab:orange"}.get(note, "0.3"))
                if note in ("OOM", "swaps", "skipped"):
                    ax.plot([c - 0.5, c + 0.5], [r - 0.5, r + 0.5], [c - 0.5, c + 0.5], [r + 0.5, r - 0.5],
                            color="tab:red", alpha=0.35, linewidth=1)
            else:
                ax.text(c, r, f"{v:,.0f}" + (f"\n({note})" if note else ""), ha="center", va="center",
                        fontsize=size, color="white" if v < mid else "black")
    xlabel = AXIS.get(grid["x"] or "", grid["x"] or "")
    if grid["best"] is not None and best is not None:
        r, c = grid["best"]
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="tab:red", linewidth=4, zorder=6,
                               gid="best"))
        xlabel += f"; outlined in red: the best, trial {best.number}"
    ax.set_xticks(range(len(grid["xs"])), grid["x_labels"])
    ax.set_yticks(range(len(grid["rows"])), grid["rows"])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(grid["rows_knob"] or "")
    ax.grid(False)
    return _save(fig, path)


def plot_history(trials: list[Any], ctx: PlotContext, path: Path) -> Path:
    """Each trial's objective and the best so far, the best configuration a star; trials without a
    value are marked where the worst would be: at 0 where higher is better, above the highest
    where lower is."""
    from matplotlib.ticker import MaxNLocator

    metric, direction = ctx.objective[0]
    data = history_series(trials, direction)
    fig, ax = _figure(f"Optimisation history: best {AXIS.get(metric, metric).split(' (')[0]} so far", ctx)
    measured = [(n, v) for n, v, _, s, _ in data if v is not None]
    for again, label, face in ((False, "measured trial", "tab:blue"), (True, "measured again later", "none")):
        points = [(n, v) for n, v, _, _, later in data if v is not None and later == again]
        if points:
            ax.scatter([n for n, _ in points], [v for _, v in points], facecolors=face, edgecolors="tab:blue", s=40,
                       label=label, zorder=4)
    best = [(n, b) for n, _, b, _, _ in data if b is not None]
    if best:
        ax.step([n for n, _ in best], [b for _, b in best], where="post", color="tab:green", linewidth=2.2,
                label=f"best so far ({direction})")
    top = max([v for _, v in measured] or [1.0])
    above = direction == "minimize" and bool(measured)
    kinds = _failures(ax, [(n, s) for n, v, _, s, _ in data if v is None], top * 1.08 if above else 0.0, "black")
    _failure_legend(ax, kinds, dict.fromkeys(MARKS, " (no value: drawn above)") if above else None)
    chosen = ctx.best_of(trials)
    if chosen is not None:
        ax.scatter([chosen.number], [chosen.values[0]], label=f"best: trial {chosen.number}", gid="best", **BEST)
    ax.set_xlabel("trial number")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    numbers = [n for n, *_ in data]
    if numbers and min(numbers) == max(numbers):  # one trial: one tick (MaxNLocator needs two integers in view)
        ax.set_xlim(numbers[0] - 0.5, numbers[0] + 0.5)
        ax.set_xticks([numbers[0]])
    ax.set_ylabel(AXIS.get(metric, metric))
    if measured:
        ax.set_ylim(bottom=-0.04 * top)
    else:  # the failures' markers alone: no scale to read
        ax.set_ylim(-1, 1)
        ax.set_yticks([])
    ax.legend(loc="best", fontsize=9)
    return _save(fig, path)


def plot_pareto(trials: list[Any], ctx: PlotContext, path: Path) -> Path:
    (m1, d1), (m2, d2) = ctx.objective[:2]
    data = pareto_points(trials, ctx.front)
    short = {m: AXIS.get(m, m).split(" (")[0] for m in (m1, m2)}
    fig, ax = _figure(f"Pareto front: {short[m1]} ({d1[:3]}) against {short[m2]} ({d2[:3]})", ctx)
    ax.margins(0.08)
    rest = [(a, b) for _, a, b, on in data if not on]
    front = sorted((a, b, n) for n, a, b, on in data if on)
    if rest:
        ax.scatter([a for a, _ in rest], [b for _, b in rest], color="0.6", s=40, label="dominated trial")
    ax.plot([a for a, _, _ in front], [b for _, b, _ in front], "o--", color="tab:red", linewidth=1.5,
            markersize=8, label="Pareto front (trial number beside each)")
    for a, b, n in front:
        ax.annotate(f"#{n}", (a, b), textcoords="offset points", xytext=(6, 6), fontsize=10)
    ax.set_xlabel(AXIS.get(m1, m1))
    ax.set_ylabel(AXIS.get(m2, m2))
    ax.legend(loc="best", fontsize=9)
    return _save(fig, path)


DRAWN = ("throughput.png", "memory.png", "oom_map.png", "history.png", "pareto.png", "devices.png")
"""The files ``write_plots`` may draw, besides ``compare_KNOB.png`` (``remove_stale`` removes no other)."""
THROUGHPUT, MEMORY, OOM_MAP, HISTORY, PARETO, DEVICES = DRAWN


def comparison_file(knob: str) -> str:
    return DEVICES if knob == "device" else f"compare_{knob}.png"


TICK_CHARS = 110
"""About how many characters of 8-point tick labels fit across the comparison's axes."""


def tick_labels(rows: list[dict[str, Any]]) -> tuple[list[str], str]:
    """Each group's label, a line per parameter (``batch_size=8``); where those would run into
    each other, the values alone, and the names once for the axis (``: batch_size, grad_accum_steps,
    top to bottom``)."""
    full = ["\n".join(f"{k}={p}" for k, p in r["params"].items()) or "all" for r in rows]
    widest = max((len(line) for label in full for line in label.splitlines()), default=0)
    if widest * len(rows) <= TICK_CHARS:
        return full, ""
    names = list(dict.fromkeys(k for r in rows for k in r["params"]))
    return (["\n".join(str(r["params"].get(k, "-")) for k in names) or "all" for r in rows],
            f": {', '.join(names)}, top to bottom")


def speedup_text(speedup: float) -> str:
    """``40.0x``, ``1.25x``, ``0.0042x``: two significant figures at least (a tour's 0.00x)."""
    return f"{speedup:.1f}x" if speedup >= 10 else f"{speedup:.2f}x" if speedup >= 0.1 else f"{speedup:.2g}x"


def plot_comparison(comp: dict[str, Any], ctx: PlotContext, path: Path) -> Path:
    """Grouped bars: per configuration of the other parameters, each value's samples/s, with its
    speedup over the reference above the bar; a configuration that failed on a value gets the
    failure's marker and name where its bar would be."""
    import numpy as np

    values, rows, ref, knob = comp["values"], comp["rows"], comp["reference"], comp["knob"]
    what = "device" if knob == "device" else knob
    named = ("CPU" if ref == "cpu" else ref) if knob == "device" else f"{knob} {ref}"
    fig, ax = _figure(f"{named} against {', '.join(map(str, values[1:]))}: throughput per configuration", ctx)
    crowded = len(rows) * len(values) > 8  # a note above each bar would run into its neighbour's
    many = len(rows) * (len(values) - 1) > 16  # so would the speedups, side by side
    if comp["folded"]:
        _folded(ax, ctx, tuple(comp["folded"]), "bar")
    width = 0.8 / len(values)
    found = [c["samples_per_s"] for r in rows for c in r["cells"].values() if c and c["samples_per_s"]]
    top, low = max(found, default=1.0), min(found, default=1.0)
    log = top / low > 30
    if log:
        ax.set_yscale("log")
    floor = low / 2 if log else 0.0
    kinds: set[str] = set()
    for i, v in enumerate(values):
        xs = np.arange(len(rows)) + (i - (len(values) - 1) / 2) * width
        heights = [(r["cells"][v] or {}).get("samples_per_s") or 0 for r in rows]
        bars = ax.bar(xs, heights, width * 0.92, label=f"{what} {v}" + (" (reference)" if v == ref else ""),
                      color=LINE_COLOURS[i % len(LINE_COLOURS)])
        for x, bar, r in zip(xs, bars, rows):
            cell = r["cells"][v]
            if cell is None:
                continue
            if cell["samples_per_s"] is None:
                kind = cell["status"] if cell["status"] in MEMORY_FAILURES else "failed"
                shape, colour, _ = MARKS[kind]
                y = floor * 1.4 if log else top * 0.03
                ax.scatter([x], [y], marker=shape, s=110, color=colour, edgecolors="black", zorder=5)
                ax.annotate(NOTES.get(cell["status"], cell["status"]), (x, y), textcoords="offset points",
                            xytext=(0, 9), ha="center", fontsize=8, rotation=90 if crowded else 0,
                            va="bottom")
                kinds.add(kind)
            elif v != ref and cell["speedup"] is not None:  # upright where a row's notes would touch
                ax.annotate(speedup_text(cell["speedup"]), (x, bar.get_height()), textcoords="offset points",
                            xytext=(0, 3), ha="center", va="bottom", fontsize=8 if many else 9, fontweight="bold",
                            rotation=90 if many else 0)
    labels, names = tick_labels(rows)
    ax.set_xticks(range(len(rows)), labels, fontsize=8 if len(rows) > 6 else 9)
    ax.set_xlabel(f"configuration of the other parameters{names} (speedup over {what} {ref} above each bar)")
    ax.set_ylabel(AXIS[M.SAMPLES_PER_S] + (", log scale" if log else ""))
    if log:  # room above the tallest bar for its speedup, upright where there are many
        ax.set_ylim(floor, top * (10 if many else 3))
    else:
        ax.set_ylim(0, top * (1.3 if many else 1.15))
    _failure_legend(ax, kinds)
    ax.legend(loc="upper left", fontsize=9, framealpha=0.9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.grid(False, axis="x")
    return _save(fig, path)


def remove_stale(folder: Path, drawn: list[Path]) -> None:
    """The plots in ``folder`` that an earlier report drew and this one did not (another
    ``--compare``, a map of too many values to draw): removed, not left to be taken for this
    study's. Only the files ``write_plots`` draws."""
    for path in folder.glob("*.png"):
        if (path.name in DRAWN or path.name.startswith("compare_")) and path not in drawn:
            path.unlink()


def write_plots(trials: list[Any], ctx: PlotContext, out: Path, comp: dict[str, Any] | None = None,
                history: list[Any] | None = None) -> list[Path]:
    """Every plot that fits the study, as PNG files in ``out``; returns their paths. ``comp``
    (``compare.comparison``) adds its bar chart; ``history``: every measurement in trial order
    (``records.measurements``), where ``trials`` holds each configuration's newest."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if comp is not None:
        paths.append(plot_comparison(comp, ctx, out / comparison_file(comp["knob"])))
    if choose_layout(trials).x is not None:
        paths.append(plot_lines(trials, ctx, out / THROUGHPUT, M.SAMPLES_PER_S))
        paths.append(plot_lines(trials, ctx, out / MEMORY, M.PEAK_MEMORY_GIB))
        if (drawn := plot_oom_map(trials, ctx, out / OOM_MAP)) is not None:
            paths.append(drawn)
    if trials:
        paths.append(plot_history(trials if history is None else history, ctx, out / HISTORY))
    if len(ctx.objective) >= 2 and trials:
        paths.append(plot_pareto(trials, ctx, out / PARETO))
    return paths
