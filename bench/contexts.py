"""Where a several-GPU sweep's trials make their CUDA context, and what that costs (issue #41):
read from the figures ``bench/devices.py --json`` kept, so nothing here needs a GPU.

    python bench/contexts.py docs/gpu/devices41/x4_session52/devices.json [more.json ...]

A trial's process either was *prepared* (forked ahead, its context made once its predecessor's
window was over: ``forked`` to ``prepared``) or makes its context inside the trial (``device`` to
``device_ready``), on the slot's time. Per way (one GPU, several), it prints how many trials had
each, both kinds' seconds, and those seconds by how much of other slots' context creation
overlapped them (0: alone; 1: another's the whole time; 2: two others'): where contexts
on different GPUs of one host are made at once, each takes longer. Start-up (the loop's first
half second) is left out: every slot prepares its first process then, together.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from concurrency import overlap  # noqa: E402

BINS = ((-1.0, 0.05, "alone"), (0.05, 0.5, "up to half another's"), (0.5, 1.0, "up to one other's"),
        (1.0, 99.0, "more than one other's"))
"""(above, up to and including, label): how many other contexts were made beside one, time-averaged."""


def contexts(sweep: dict[str, Any]) -> list[tuple[float, float, str, str]]:
    """Each context creation of one sweep: (start, end, slot, "prepared" or "in trial")."""
    out = []
    for t in sweep["timeline"]:
        m = t.get("marks") or {}
        if "prepared" in m and "forked" in m:
            out.append((m["forked"], m["prepared"], t["slot"], "prepared"))
        elif "device_ready" in m and "device" in m:
            out.append((m["device"], m["device_ready"], t["slot"], "in trial"))
    return out


def beside_others(start: float, end: float, slot: str, others: list[tuple[float, float, str, str]]) -> float:
    """How many other slots' context creations ran during [start, end], time-averaged."""
    if end <= start:
        return 0.0
    return sum(overlap((start, end), (a, b)) for a, b, s, _ in others if s != slot) / (end - start)


def summary(paths: list[Path]) -> list[str]:
    """Per way (one GPU; each several-GPU way, by its ``--many``), the lines ``main`` prints."""
    return summary_of([json.loads(path.read_text())["ways"] for path in paths])


def summary_of(runs: list[dict[str, Any]]) -> list[str]:
    """``summary``'s lines for ``bench/devices.py`` results' ``ways``, one mapping per run."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for ways in runs:
        for i, (many, way) in enumerate(ways.items()):
            for sweep in way["sweeps"]:
                if sweep["way"] == "several":
                    groups.setdefault(f"several ({many})", []).append(sweep)
                elif i == 0:  # every way holds the same one-GPU sweeps
                    groups.setdefault("one", []).append(sweep)
    lines = []
    for name, sweeps in sorted(groups.items(), key=lambda kv: kv[0] != "one"):
        kinds = {"prepared": 0, "in trial": 0}
        made: dict[str, list[tuple[float, float]]] = {"prepared": [], "in trial": []}  # (seconds, overlap)
        for sweep in sweeps:
            made_here = contexts(sweep)
            for a, b, slot, kind in made_here:
                kinds[kind] += 1
                if a >= 0.5:
                    made[kind].append((b - a, beside_others(a, b, slot, made_here)))
        total = sum(kinds.values()) or 1
        lines.append(f"{name}, {len(sweeps)} sweeps: {kinds['prepared']} trials prepared "
                     f"({kinds['prepared'] / total:.0%}), {kinds['in trial']} made their context in the trial")
        for kind, got in made.items():
            if not got:
                continue
            secs = [s for s, _ in got]
            lines.append(f"  {kind} after start-up: median {statistics.median(secs):.2f} s, {sum(secs):.1f} s "
                         f"over {len(got)}; by other slots' contexts beside them:")
            for lo, hi, label in BINS:
                here = [s for s, o in got if lo < o <= hi]
                if here:
                    lines.append(f"    {label:<24} {len(here):>4}  median {statistics.median(here):.2f} s")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="+", type=Path, help="bench/devices.py --json files")
    args = p.parse_args()
    print("\n".join(summary(args.json)))


if __name__ == "__main__":
    main()
