"""Text a person reads: the per-trial line, the plan, and the end-of-sweep summary."""

from __future__ import annotations

from collections import Counter
from typing import Any

from orchestrator import metrics as M
from orchestrator.clip import short_detail
from orchestrator.harness import spread
from orchestrator.outcome import Status
from orchestrator.spec.load import Choice, Range, SweepSpec
from orchestrator.store.record import TrialRecord, status_of


DETAIL_WIDTH = 120
"""A failure's detail on a trial's line: its first line, cut at a word beyond this."""


def fmt_params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def fmt_num(value: object, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def objective_note(spec: SweepSpec) -> str | None:
    """A swept ``seq_len`` under ``samples_per_s``: a shorter sequence is more samples a second
    whatever else it does, so the shortest wins (an experiment tour); tokens compare the lengths."""
    dim = spec.space.get("seq_len")
    if dim is None or spec.objective.metrics[0][0] != M.SAMPLES_PER_S or (isinstance(dim, Choice) and len(dim.values) < 2):
        return None
    return ("seq_len is swept and the objective is samples_per_s, by which the shortest sequence wins whatever "
            "else it does; to rank the lengths by the tokens they train, set objective: {metric: tokens_per_s}")


def throughput_text(spec: SweepSpec, metrics: dict[str, Any]) -> str:
    """``822.0 samples/s``; where the objective is another throughput (``tokens_per_s``), that one
    first: the best is the best by it (an experiment tour: a best by tokens/s said only samples/s)."""
    first = spec.objective.metrics[0][0]
    said = f"{fmt_num(metrics.get(M.SAMPLES_PER_S))} samples/s"
    if first == M.SAMPLES_PER_S or not isinstance(metrics.get(first), (int, float)):
        return said
    return f"{fmt_num(metrics[first])} {first.removesuffix('_per_s') + '/s' if first.endswith('_per_s') else first} ({said})"


def fmt_seconds(seconds: float) -> str:
    """A duration as a person reads it: ``8.4 s``, ``44 s``, ``312 s (5.2 min)`` (minutes from two on)."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" + (f" ({seconds / 60:.1f} min)" if seconds >= 120 else "")


def params_width(searched: dict[str, Choice | Range]) -> int:
    """The width of a trial line's parameters (``fmt_params``) for a space's longest
    configuration: each choice's longest ``name=value``, a range's bounds (a sampled float: 12
    characters); between 10 and 100, so that the figures after them line up in the sweep's lines."""
    widths = [max(len(f"{name}={v}") for v in dim.values) if isinstance(dim, Choice) else
              len(name) + 1 + max(len(str(dim.low)), len(str(dim.high)), 0 if dim.integer else 12)
              for name, dim in searched.items()]
    return min(100, max(10, sum(widths) + len(widths) - 1))


def trial_line(number: int, params: dict[str, Any], status: str, metrics: dict[str, float],
               duration_s: float | None, detail: str | None = None, repeats: int = 1,
               neighbour_of: int | None = None, slot: str | None = None, retry_of: int | None = None,
               remeasure_of: int | None = None, width: int = 60) -> str:
    line = (f"#{number:<3d} {fmt_params(params):<{width}s} {status:<8s} "
            f"{fmt_num(metrics.get(M.SAMPLES_PER_S)):>10s} samples/s "
            f"{fmt_num(metrics.get(M.PEAK_MEMORY_GIB), ' GiB', 2):>10s} "
            f"{fmt_num(duration_s, ' s'):>8s}")
    if status != Status.OK and detail:
        line += f"  ({short_detail(detail, DETAIL_WIDTH)})"
    notes = []
    if status == Status.OK and metrics.get(M.SAMPLES_PER_S + "_spread") is not None:
        notes.append(f"median of {repeats}, spread {metrics[M.SAMPLES_PER_S + '_spread']:.0%}")
    if status == Status.OK and metrics.get(M.THROUGHPUT_CI95) is not None:
        notes.append(f"{spread.shown(metrics[M.THROUGHPUT_CI95])} at 95%")
    if remeasure_of is not None:
        notes.append(f"#{remeasure_of}'s configuration measured again, alternating with its rival")
    if status == Status.OK and metrics.get(M.COMPILE_S) is not None:  # within the trial's start-up, not its window
        notes.append(f"compiled in {metrics[M.COMPILE_S]:.1f} s")
    if neighbour_of is not None:
        notes.append(f"nearest unmeasured configuration to #{neighbour_of}, which the sampler proposed again")
    if retry_of is not None:
        notes.append(f"runs #{retry_of} again")
    if slot is not None:
        notes.append(f"on {slot}")
    if notes and (status == Status.OK or not detail):
        line += f"  ({'; '.join(notes)})"
    return line


def describe_dim(dim: object) -> str:
    if isinstance(dim, Choice):
        return "[" + ", ".join(map(str, dim.values)) + "]"
    assert isinstance(dim, Range)
    extra = f", step {dim.step}" if dim.step is not None else ""
    extra += ", log" if dim.log else ""
    return f"{dim.low}..{dim.high}{extra}"


def of_target(done: int, target: int | str) -> str:
    """``3 of 6``; a study that holds more than ``search.n_trials`` asks for now (lowered after it
    ran: a tour read "6 of 3 trials done") is ``6 (search.n_trials: 3)``."""
    return f"{done} (search.n_trials: {target})" if isinstance(target, int) and done > target else f"{done} of {target}"


def status_counts(trials: list[Any]) -> str:
    counts = Counter(status_of(t) or "?" for t in trials)
    order = [Status.OK, Status.OOM, Status.SWAPPED, Status.SKIPPED, Status.TIMEOUT, Status.CRASHED, Status.ERROR,
             Status.DIVERGED, Status.INTERRUPTED]
    return ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s)) or "none yet"


def best_table(spec: SweepSpec, best: list[Any], limit: int = 5, missed: str | None = None) -> list[str]:
    """The ranked table; none yet, or (``missed``: ``records.constraints_missed``) why none is feasible."""
    if not best:
        return [f"None: {missed}." if missed else "No configuration has a feasible measured result yet."]
    names = [m for m, _ in spec.objective.metrics]
    memory = M.PEAK_MEMORY_GIB not in names  # its own column, unless it is an objective's (a Pareto front's)
    shown = best[:limit]
    width = max([len("parameters")] + [len(fmt_params(t.params)) for t in shown])  # the figures in one column
    rows = [f"  {'rank':>4s} {'trial':>5s}  {'parameters':<{width}s} " + " ".join(f"{n:>16s}" for n in names)
            + f" {'+-95%':>7s}" + (f" {'peak GiB':>9s}" if memory else "")]
    for i, t in enumerate(shown, 1):
        metrics = TrialRecord.of(t).metrics
        vals = " ".join(f"{fmt_num(v, digits=1 if n == M.SAMPLES_PER_S else 2):>16s}" for n, v in zip(names, t.values))
        ci = metrics.get(M.THROUGHPUT_CI95)
        rows.append(f"  {i:>4d} {t.number:>5d}  {fmt_params(t.params):<{width}s} {vals} "
                    f"{spread.shown(ci, table=True) if isinstance(ci, (int, float)) else '-':>7s}"
                    + (f" {fmt_num(metrics.get(M.PEAK_MEMORY_GIB), digits=2):>9s}" if memory else ""))
    return rows
