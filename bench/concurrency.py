"""What ran beside each timed window of a several-GPU sweep (issue #41 item 3): ``bench/devices.py``
reads a finished sweep's trial folders and the command's timeline with these functions, and puts
each configuration's throughput ratio (several GPUs against one) beside what overlapped its window.

For one trial's window (``window_start`` to ``window_end``, its result's marks) it counts, in
seconds, what the trials of the *other* slots were doing at the same time, from their own marks and
the command's events (``ORCHESTRATE_TIMELINE``):

- ``prepare``: a process prepared for a trial, initialising its device (``forked`` to ``prepared``);
- ``set-up``: a trial setting up (its configuration received, or its fork, to ``warmup_done``:
  on CUDA the context where it was not prepared, the model built on its GPU, the warm-up steps);
- ``exit``: a trial's process ending (``result_written`` to the command's ``exited`` event: on CUDA
  the context's teardown);
- ``windows``: other windows (the time-average of how many ran beside it);

and the orchestrator's own CPU use around it (cores: CPU seconds over wall seconds between the
command's events that bracket the window: its proposals, tells and MLflow writes). Nothing here
needs a GPU: it reads files.
"""

from __future__ import annotations

import glob
import json
import statistics
from pathlib import Path
from typing import Any


def trials(work: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each trial process of the sweep in ``work`` (its results, repeats included): its number,
    its marks, and its exit (the command's ``exited`` event)."""
    exits: dict[int, list[float]] = {}
    for e in events:
        if e.get("event") == "exited" and e.get("trial") is not None:
            exits.setdefault(e["trial"], []).append(e["t"])
    out = []
    for path in sorted(glob.glob(str(work / "mlruns" / ".trials" / "*" / "trial-*" / "**" / "result.json"), recursive=True)):
        result = json.loads(Path(path).read_text())
        folder = next(p for p in Path(path).parents if p.name.startswith("trial-"))
        number = int(folder.name.split("-")[1])
        tl = result.get("timeline", {})
        written = tl.get("result_written")
        exited = min((t for t in exits.get(number, []) if written is None or t >= written), default=None)
        out.append({"trial": number, "status": result.get("status"), "tl": tl, "exited": exited,
                    "slot": None, "samples_per_s": (result.get("metrics") or {}).get("samples_per_s")})
    return out


def spans(trial: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """The trial's phases as (start, end) wall-clock spans, where its marks have them."""
    tl, out = trial["tl"], {}
    if "prepared" in tl and "forked" in tl:
        out["prepare"] = (tl["forked"], tl["prepared"])
    begun = tl.get("config_received", tl.get("forked"))
    end = tl.get("warmup_done") or tl.get("result_written")
    if begun is not None and end is not None:
        out["set-up"] = (begun, end)
    if "window_start" in tl and "window_end" in tl:
        out["window"] = (tl["window_start"], tl["window_end"])
    if tl.get("result_written") is not None and trial.get("exited") is not None:
        out["exit"] = (tl["result_written"], trial["exited"])
    return out


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def orchestrator_cores(events: list[dict[str, Any]], start: float, end: float) -> float | None:
    """The orchestrator's CPU use (cores) between the last event before ``start`` and the first
    after ``end`` (its events carry its CPU seconds)."""
    timed = [(e["t"], e["cpu"]) for e in events if e.get("cpu") is not None]
    before = [x for x in timed if x[0] <= start]
    after = [x for x in timed if x[0] >= end]
    if not before or not after or after[0][0] <= before[-1][0]:
        return None
    (t0, c0), (t1, c1) = before[-1], after[0]
    return (c1 - c0) / (t1 - t0)


def beside(work: Path, events: list[dict[str, Any]], slot_of: dict[int, str]) -> dict[int, dict[str, Any]]:
    """Per trial number (its first process's window): seconds of its window that overlapped the
    other slots' ``prepare``, ``set-up`` and ``exit``, the mean number of other windows beside it,
    and the orchestrator's cores meanwhile; ``slot_of``: each trial's slot (the study's)."""
    procs = trials(work, events)
    for p in procs:
        p["slot"] = slot_of.get(p["trial"])
    out: dict[int, dict[str, Any]] = {}
    for p in procs:
        mine = spans(p)
        if "window" not in mine or p["trial"] in out:
            continue
        window = mine["window"]
        length = window[1] - window[0]
        got = {"window_s": length, "prepare": 0.0, "set-up": 0.0, "exit": 0.0, "windows": 0.0, "slot": p["slot"]}
        for q in procs:
            if q is p or q["slot"] == p["slot"]:
                continue
            for name, span in spans(q).items():
                key = "windows" if name == "window" else name
                got[key] += overlap(window, span)
        got["windows"] = got["windows"] / length if length > 0 else 0.0
        got["orchestrator_cores"] = orchestrator_cores(events, *window)
        out[p["trial"]] = got
    return out


def report(rows: list[dict[str, Any]], threshold: float = 0.97) -> list[str]:
    """Lines for ``bench/devices.py``: ``rows`` are configurations measured both ways, each with
    its ``ratio`` (several / one), ``label`` and ``beside`` (``beside``'s figures for its trial in
    the several-GPU sweep, or None)."""
    have = [r for r in rows if r.get("beside")]
    if not have:
        return ["what ran beside the windows: no trial marks to read"]
    lines = ["what ran beside each window on the other slots, the slowest configurations first (seconds of "
             "the other slots' phases over the window's: 200% = two slots at it the whole window; windows: "
             "how many others ran on average; orch.: the orchestrator's cores):",
             f"  {'configuration':<52} {'ratio':>6} {'slot':>7} {'prepare':>8} {'set-up':>7} {'exit':>6} "
             f"{'windows':>8} {'orch.':>6}"]
    for r in sorted(have, key=lambda r: r["ratio"]):
        b = r["beside"]
        share = {k: b[k] / b["window_s"] if b["window_s"] else 0.0 for k in ("prepare", "set-up", "exit")}
        cores = b.get("orchestrator_cores")
        lines.append(f"  {r['label'][:52]:<52} {r['ratio']:>6.3f} {str(b['slot']):>7} {share['prepare']:>8.0%} "
                     f"{share['set-up']:>7.0%} {share['exit']:>6.0%} {b['windows']:>8.2f} "
                     f"{'-' if cores is None else format(cores, '.2f'):>6}")
    busy = [r for r in have if (r["beside"]["set-up"] + r["beside"]["exit"] + r["beside"]["prepare"])
            >= 0.2 * r["beside"]["window_s"]]
    quiet = [r for r in have if r not in busy]
    for name, group in (("beside another slot's set-up, exit or preparation (>= 20% of the window)", busy),
                        ("beside none of them (< 20%)", quiet)):
        if group:
            ratios = [r["ratio"] for r in group]
            lines.append(f"  {name}: {len(group)} windows, ratio median {statistics.median(ratios):.3f}, "
                         f"min {min(ratios):.3f}, {sum(x < threshold for x in ratios)} below {threshold}")
    by_slot: dict[str, list[float]] = {}
    for r in have:
        by_slot.setdefault(str(r["beside"]["slot"]), []).append(r["ratio"])
    lines.append("  by slot: " + "; ".join(f"{s} median {statistics.median(v):.3f} (min {min(v):.3f}, {len(v)})"
                                           for s, v in sorted(by_slot.items())))
    return lines


def start_and_end(events: list[dict[str, Any]], slot_of: dict[int, str]) -> list[str]:
    """When each slot's first trial started (after the loop began), and what the command did after
    its last result (issue #41 item 2)."""
    t = {e["event"]: e["t"] for e in events if e.get("trial") is None}
    starts = [(e["t"], e["trial"]) for e in events if e.get("event") == "start" and e.get("trial") is not None]
    told = [e["t"] for e in events if e.get("event") == "told"]
    first: dict[str, float] = {}
    for at, trial in sorted(starts):
        if (slot := slot_of.get(trial, "?")) != "?":  # "?": no slot recorded (a study from before stopped trials kept theirs)
            first.setdefault(slot, at)
    lines = []
    if "loop_start" in t and first:
        rel = {s: at - t["loop_start"] for s, at in first.items()}
        lines.append("first trial per slot, s after the loop began: " + ", ".join(
            f"{s} {v:.2f}" for s, v in sorted(rel.items())) + f" (spread {max(rel.values()) - min(rel.values()):.2f} s)")
    if told and "exit" in t:
        marks = [(label, t[name] - max(told)) for name, label in AFTER_LAST if name in t]
        lines.append("after the last result, s: " + ", ".join(f"{label} {at:.2f}" for label, at in marks))
    if "process_start" in t and "loop_start" in t:  # where the seconds before the first trial went
        lines.append("before the loop, s after the command's process began: " + ", ".join(
            f"{name} {t[name] - t['process_start']:.2f}" for name in BEFORE_LOOP if name in t))
    return lines


AFTER_LAST = (("trials_stopped", "trials in flight stopped"), ("loop_end", "loop ended"),
              ("stores_closed", "stores closed"), ("summary_printed", "summary printed"), ("exit", "command's end"))
"""The command's own marks after its last result, with their labels."""
BEFORE_LOOP = ("imports_done", "probe_answered", "smoke_answered", "stores_opened", "loop_start")
"""The command's own marks before its first trial (``orchestrator.timeline``), in their order."""
