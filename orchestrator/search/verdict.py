"""The ``auto`` search's verdict (whether a sweep is done, and why, with what was never measured)
and its decision (the next configuration, and how it was chosen): what the planner returns and the
sweep reads. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from orchestrator.keys import value_key


@dataclass
class Verdict:
    """Whether the search is done, and why."""

    done: bool
    chance: float
    """Probability that some configuration left beats the best measured by more than the band."""
    left: int
    """Configurations without a result that are not running."""
    too_large: int
    """Of those, how many are proven or predicted (p < 0.05) not to fit."""
    reason: str = ""
    lead: float = 1.0
    """The likeliest unmeasured configuration's chance to fit and beat the best by more than the band."""
    unsure: bool = False
    """Done without being sure: a measured rival may still beat the best by more than the band
    (``remeasure``); ``reason`` says which, and what would tell them apart."""
    ends_running: bool = False
    """Done, and the trials in flight cannot change it either (``flight``): the sweep stops them."""
    exhausted: bool = False
    """Done because nothing left could fit or run in this run: ``--stop budget`` would run no more."""


@dataclass
class Decision:
    config: dict[str, Any] | None
    verdict: Verdict
    why: str = ""
    """How the configuration was chosen (``boundary``, ``coverage``, ``improvement`` or ``remeasure``:
    measured again, alternating with the best), for the record."""


def reason(chance: float, left: int, too_large: int, band: float, nothing_left: bool = False, failed: int = 0) -> str:
    """The stop line's reason; ``failed``: configurations whose trial failed (an error, a crash),
    which end the search as a result does, said so ("has a result" where every trial had failed)."""
    if nothing_left:
        ran = f"has a result or failed ({failed} failed)" if failed else "has a result"
        return (f"every configuration that could fit {ran} ({too_large} left are proven not to fit)"
                if left else f"every configuration {ran}")
    return (f"no configuration left is likely to beat the best by more than {band:.0%} (chance {chance:.1%}); "
            f"{left} not measured, {too_large} of them predicted not to fit")


def unmeasured_note(model: Any, configs: list[dict[str, Any]], value_keys: list[list[tuple[str, str]]],
                    searched: set[str], measured: set[tuple[str, str]], p_fit: np.ndarray) -> str:
    """For the stop line: each searched value never measured (not in ``measured``), and what the
    model (``mixture.Model``, None before any result) says of it."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, pairs in enumerate(value_keys):
        for pair in pairs:
            if pair[0] in searched and pair not in measured:
                groups.setdefault(pair, []).append(i)
    notes = []
    for (name, _), members in groups.items():
        value = configs[members[0]][name]
        fits = [i for i in members if p_fit[i] > 0.0]
        if not fits:
            notes.append(f"{name}={value} (does not fit)")
        elif max(p_fit[i] for i in fits) < 0.05:  # as the verdict counts it: too_large
            notes.append(f"{name}={value} (predicted not to fit)")
        elif model is not None:
            upper = float(np.exp(model.upper(model.incumbent, np.array(fits)).max()))
            notes.append(f"{name}={value} (predicted <= {upper:.2f}x of the best at 95%)")
    return "; not measured: " + ", ".join(notes) if notes else ""


def measured_values(idx: list[int], configs: list[dict[str, Any]], value_keys: list[list[tuple[str, str]]],
                    ordered: set[str], values: dict[str, Any]) -> set[tuple[str, str]]:
    """(parameter, value key) pairs of the configurations measured (``idx``: fitted ones), with
    every value of a numeric parameter (``ordered``) that lies between two measured ones."""
    measured = {pair for i in idx for pair in value_keys[i]}
    for name in ordered:
        seen = [configs[i][name] for i in idx if name in configs[i]]
        if seen:
            low, high = min(seen), max(seen)
            measured.update((name, value_key(name, v)) for v in values[name] if low < v < high)
    return measured


def unseen(open_: list[int], value_keys: list[list[tuple[str, str]]], measured: set[tuple[str, str]],
           flying: set[tuple[str, str]], looked_for: Callable[[str], bool]) -> dict[tuple[str, str], list[int]]:
    """Values of a searched parameter (``looked_for``; batch size aside: its trend is measured by the
    boundary search) that no configuration that fits has been measured with (``measured``), and
    that some configuration left (``open_``) may still fit with: (name, value) -> the open
    configurations that would measure it (empty while one in flight carries it: ``flying``)."""
    out: dict[tuple[str, str], list[int]] = {}
    for i in open_:
        for key in value_keys[i]:
            if not looked_for(key[0]) or key in measured:
                continue
            out.setdefault(key, [])
            if key not in flying:
                out[key].append(i)
    return out
