"""Canonical keys of configurations and of single values: pure, imported by the memory order's
rules (``dominance``), which the spec imports, so it must import nothing of the orchestrator."""

from __future__ import annotations

import functools
import json
from typing import Any


def config_key(params: dict[str, Any]) -> str:
    """A canonical text for a configuration: ints and equal floats compare equal, and so do floats
    that differ only by rounding (Optuna's stepped float ``0.1 + 2 * 0.1`` is the grid's 0.3)."""
    return json.dumps({k: (canonical_float(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                       for k, v in sorted(params.items())}, sort_keys=True)


def value_key(name: str, value: Any) -> str:
    """``config_key({name: value})``, memoized for the hashable values a space is made of (a big
    space's planner asks it for every parameter of every configuration)."""
    try:
        return _value_key(name, type(value), value)
    except TypeError:  # unhashable (a list): not memoized
        return config_key({name: value})


@functools.lru_cache(maxsize=65536)
def _value_key(name: str, kind: type, value: Any) -> str:
    return config_key({name: value})


def canonical_float(x: float) -> float:
    """A float rounded to 12 significant digits: what two configurations compare equal by."""
    return float(f"{x:.12g}")
