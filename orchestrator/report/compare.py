"""CPU against the device (or any swept parameter), per configuration of the other parameters.

When ``device`` is swept (``space: {device: [mps, cpu]}``), ``orchestrate report`` prints each
device's throughput per configuration of the other parameters with its speedup over the CPU (and
``plots.plot_comparison`` draws it), and ``orchestrate best`` says which device to use at the best
configuration's settings. ``orchestrate report --compare KNOB`` does the same for any other swept
parameter (the precision, say). Pure functions over Optuna's frozen trials; no torch, no plotting.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator import metrics as M
from orchestrator.errors import OrchestratorError
from orchestrator.outcome import Status
from orchestrator.report.plotdata import metric_of, pick, status
from orchestrator.spec.load import SweepSpec


def compare_knob(spec: SweepSpec, asked: str | None) -> str | None:
    """The swept parameter to compare across: ``--compare``, else ``device`` when it is swept."""
    if asked is not None:
        if asked not in spec.space:
            raise OrchestratorError(f"--compare {asked}: not a swept parameter of {spec.path} "
                                    f"(swept: {', '.join(spec.space) or 'none'})")
        return asked
    return "device" if "device" in spec.space else None


def reference_for(spec: SweepSpec, knob: str | None) -> object:
    """What a comparison is relative to: the CPU for devices, else the spec's first value."""
    if knob is None:
        return None
    values = getattr(spec.space.get(knob), "values", None) or ()
    return "cpu" if knob == "device" and "cpu" in values else (values[0] if values else None)


def comparison(trials: list[Any], knob: str = "device", reference: object = None) -> dict[str, Any] | None:
    """Throughput by value of ``knob`` (the device, say) per configuration of the other parameters.

    Trials are grouped by the parameters every trial has, besides ``knob`` (a knob only one device
    reads, such as an MPS watermark, is folded: the cell is its fastest trial, ``plotdata.pick``).
    Each row: ``params`` and, per value, ``{"trial", "status", "samples_per_s", "speedup"}``, where
    the speedup is over ``reference`` (default: ``cpu`` when it is one of the values, else the first
    value seen) and is None unless both ran ``ok``. ``summary`` per other value: the configurations
    where both ran, where it was faster, the median, lowest and highest speedup; ``fastest`` per
    value: its fastest cell. None when fewer than two values of ``knob`` were tried."""
    values = list(dict.fromkeys(t.params[knob] for t in sorted(trials, key=lambda t: t.number) if knob in t.params))
    if len(values) < 2:
        return None
    ref = reference if reference in values else ("cpu" if "cpu" in values else values[0])
    values = [ref] + [v for v in values if v != ref]
    tried = [t for t in trials if knob in t.params]
    shared = set.intersection(*(set(t.params) for t in tried)) - {knob}
    folded = sorted(set().union(*(set(t.params) for t in tried)) - shared - {knob})
    names = [k for k in dict.fromkeys(k for t in tried for k in t.params) if k in shared]
    cells: dict[tuple, dict[Any, list[Any]]] = {}
    for t in sorted(tried, key=lambda t: t.number):
        key = tuple(t.params.get(k) for k in names)
        cells.setdefault(key, {}).setdefault(t.params[knob], []).append(t)
    rows = []
    for key, by_value in cells.items():
        row: dict[str, Any] = {"params": dict(zip(names, key)), "cells": {}}
        for v in values:
            if v not in by_value:
                row["cells"][v] = None
                continue
            best = pick(by_value[v])
            sps = metric_of(best, M.SAMPLES_PER_S) if status(best) == Status.OK else None
            row["cells"][v] = {"trial": best.number, "status": status(best), "samples_per_s": sps, "speedup": None}
        base = row["cells"][ref]
        for v in values[1:]:
            cell = row["cells"][v]
            if cell and cell["samples_per_s"] and base and base["samples_per_s"]:
                cell["speedup"] = cell["samples_per_s"] / base["samples_per_s"]
        rows.append(row)
    summary = {}
    for v in values[1:]:
        ups = sorted(r["cells"][v]["speedup"] for r in rows if r["cells"][v] and r["cells"][v]["speedup"])
        summary[v] = {"compared": len(ups), "faster": sum(u > 1 for u in ups),
                      "median": ratio_median(ups), "lowest": ups[0] if ups else None, "highest": ups[-1] if ups else None}
    fastest = {}
    for v in values:
        ok = [c for r in rows if (c := r["cells"][v]) and c["samples_per_s"] is not None]
        fastest[v] = max(ok, key=lambda c: c["samples_per_s"]) if ok else None
    return {"knob": knob, "reference": ref, "values": values, "params": names, "folded": folded,
            "rows": rows, "summary": summary, "fastest": fastest}


def ratio_median(ratios: list[float]) -> float | None:
    """The median of ratios, the two middle ones' geometric mean where their count is even: the
    same figure whichever way up they are (1/x's is 1/x's median; the arithmetic mean of 0.99 and
    3.07 said "2.0x slower" where these pairs' own figures, inverted, said 1.5x)."""
    if not ratios:
        return None
    xs, mid = sorted(ratios), len(ratios) // 2
    return xs[mid] if len(xs) % 2 else math.sqrt(xs[mid - 1] * xs[mid])


def comparison_lines(comp: dict[str, Any]) -> list[str]:
    """The comparison as text: per configuration of the other parameters, each value's samples/s
    and its speedup over the reference; then a line per value and the fastest of each."""
    knob, ref, names, values = comp["knob"], comp["reference"], comp["params"], comp["values"]
    title = "Device comparison" if knob == "device" else f"Comparison by {knob}"
    lines = [f"{title}: samples/s per configuration of the other parameters, and the speedup over {knob} {ref}"
             + (f"; each cell the fastest over {', '.join(comp['folded'])}" if comp["folded"] else "")]

    def cell_text(v: object, cell: dict[str, Any] | None) -> str:
        if cell is None:
            return "-"
        if cell["samples_per_s"] is None:
            return f"{cell['status']} (#{cell['trial']})"
        return f"{cell['samples_per_s']:,.1f}" + (f" {cell['speedup']:6.2f}x" if v != ref and cell["speedup"] else "")

    table = [[str(r["params"].get(k)) for k in names] + [cell_text(v, r["cells"][v]) for v in values]
             for r in comp["rows"]]
    head = list(names) + [f"{knob} {v}" for v in values]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(head)]
    lines.append("  " + "  ".join(h.rjust(w) for h, w in zip(head, widths)))
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table]
    for v, s in comp["summary"].items():
        if s["compared"]:
            lines.append(f"  {v} against {ref}: faster in {s['faster']} of {s['compared']} configuration(s) where both "
                         f"ran; median {s['median']:.2f}x (from {s['lowest']:.2f}x to {s['highest']:.2f}x)")
        else:
            lines.append(f"  {v} against {ref}: no configuration ran ok on both")
    best = max((c for c in comp["fastest"].values() if c), key=lambda c: c["samples_per_s"], default=None)
    if best is not None:
        v = next(v for v, c in comp["fastest"].items() if c is best)
        lines.append(f"  Fastest: {knob} {v}, trial {best['trial']} at {best['samples_per_s']:,.1f} samples/s"
                     + "".join(f"; best on {u}: {c['samples_per_s']:,.1f} (trial {c['trial']})"
                               for u, c in comp["fastest"].items() if c and c is not best))
    return lines


def device_advice(comp: dict[str, Any], best: Any) -> str | None:
    """``use device cuda: 10.00x cpu (12,000.0 samples/s, trial 5) at the same other settings``: the
    best trial's device against every other device at the best trial's other settings."""
    knob = comp["knob"]
    mine = best.params.get(knob)
    key = {k: best.params.get(k) for k in comp["params"]}
    row = next((r for r in comp["rows"] if r["params"] == key), None)
    sps = metric_of(best, M.SAMPLES_PER_S)
    if row is None or mine is None or not sps:
        return None
    parts = []
    for v in comp["values"]:
        cell = row["cells"].get(v)
        if v == mine:
            continue
        if cell is None:
            parts.append(f"{v} not measured at these settings")
        elif cell["samples_per_s"] is None:
            parts.append(f"{v} {cell['status']} (trial {cell['trial']})")
        else:
            parts.append(f"{sps / cell['samples_per_s']:.2f}x {v} ({cell['samples_per_s']:,.1f} samples/s, "
                         f"trial {cell['trial']})")
    return f"use {knob} {mine}: " + "; ".join(parts) + " at the same other settings" if parts else None
