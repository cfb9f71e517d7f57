"""Canonical keys of configurations and of single values: pure, imported by the memory order's
rules (``dominance``), which the spec imports, so it must import nothing of the orchestrator."""

from __future__ import annotations

import functools
import json
from typing import Any


def config_key(params: dict[str, Any]) -> str:
    """A canonical text for a configuration: ints and equal floats compare equal, and so do floats
    that differ only by rounding (Optuna's stepped float ``0.1 + 2 * 0.1`` is the grid's 0.3).
    ``json.dumps`` of the canonical values, keys sorted; made of memoized ``"name": value``
    pieces, which a space of 100,000 configurations asks for hundreds of thousands of times."""
    try:
        return "{" + ", ".join(_piece(k, type(v), v) for k, v in sorted(params.items())) + "}"  # type: ignore[arg-type]  # a type is hashable; typeshed's lru_cache says Hashable, which type[Any] is not to mypy
    except TypeError:  # an unhashable value (a list): written out whole
        return _dumped(params)


def _dumped(params: dict[str, Any]) -> str:
    return json.dumps({k: (canonical_float(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                       for k, v in sorted(params.items())}, sort_keys=True)


@functools.lru_cache(maxsize=262144)
def _piece(name: str, kind: type, value: object) -> str:
    """``"name": value`` as ``_dumped`` writes it (``kind``: so that 1, 1.0 and True stay apart)."""
    return _dumped({name: value})[1:-1]


def value_key(name: str, value: object) -> str:
    """``config_key({name: value})``, memoized for the hashable values a space is made of (a big
    space's planner asks it for every parameter of every configuration)."""
    try:
        return _value_key(name, type(value), value)  # type: ignore[arg-type]  # as in config_key: a type is hashable
    except TypeError:  # unhashable (a list): not memoized
        return config_key({name: value})


@functools.lru_cache(maxsize=65536)
def _value_key(name: str, kind: type, value: object) -> str:
    return config_key({name: value})


def canonical_float(x: float) -> float:
    """A float rounded to 12 significant digits: what two configurations compare equal by."""
    return float(f"{x:.12g}")


def value_keys_of(configs: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    """Per configuration, its ``(name, value_key(name, value))`` pairs, each pair made once per
    distinct value and shared (100,000 configurations: 600,000 pairs from a few hundred)."""
    memo: dict[tuple[str, type, Any], tuple[str, str]] = {}
    out = []
    for config in configs:
        row = []
        for name, value in config.items():
            try:
                pair = memo.get((name, type(value), value))
            except TypeError:  # unhashable
                pair = (name, value_key(name, value))
            if pair is None:
                pair = memo[(name, type(value), value)] = (name, value_key(name, value))
            row.append(pair)
        out.append(row)
    return out
