"""Predicted out-of-memory: a configuration that needs at least as much memory as one that ran
out of memory will run out too. Pure functions, tested with a table of cases.

An order says how memory grows with a parameter:
- ``increasing``: more is more memory (batch_size, seq_len; grad_accum_steps: the same
  micro-batch, but from the second micro-batch on backward adds each gradient into the one already
  there, through a buffer of the gradient's size. For a model whose weights outweigh its
  activations that is most of the difference: a deep MLP on an H100 capped at 4.75 GiB fitted
  batch 2048 in bfloat16 without accumulation and not even batch 256 with two micro-batches,
  ``bench/landscapes/mlp_h100_cap006.csv``);
- ``decreasing``: more is less memory, e.g. a larger memory cap (memory_fraction);
- ``neutral``: memory does not depend on it (lr; seed);
- a mapping of value -> rank, higher rank = more memory, equal ranks alike
  (dtype: float32 2, float16 1, bfloat16 1).
A parameter without an order must be equal for one configuration to dominate another.
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING, Any, Iterable

from orchestrator.keys import value_key
from orchestrator.spec.model import DEFAULT_ORDER, ORDER_WORDS, Order  # noqa: F401 - the spec's words for memory orders

if TYPE_CHECKING:
    import numpy


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def needs_at_least(candidate: dict[str, Any], reference: dict[str, Any], order: dict[str, Order]) -> bool:
    """Whether ``candidate`` needs at least as much memory as ``reference`` by ``order``."""
    if candidate.keys() != reference.keys():
        return False
    for name, b in candidate.items():
        a = reference[name]
        rule = order.get(name)
        if rule is None:
            if not _same(a, b):
                return False
        elif rule == "neutral":
            continue
        elif rule == "increasing":
            if not b >= a:
                return False
        elif rule == "decreasing":
            if not b <= a:
                return False
        elif isinstance(rule, dict):
            if a not in rule or b not in rule:
                if not _same(a, b):
                    return False
            elif rule[b] < rule[a]:
                return False
        else:
            raise ValueError(f"unknown memory order {rule!r} for {name}")
    return True


def predicted_oom(candidate: dict[str, Any], ooms: Iterable[tuple[int, dict[str, Any]]],
                  order: dict[str, Order]) -> int | None:
    """The number of the first out-of-memory trial that proves ``candidate`` cannot fit, or None."""
    for number, config in ooms:
        if needs_at_least(candidate, config, order):
            return number
    return None


class DominanceIndex:
    """``needs_at_least`` between a fixed list of configurations and any of them, as array
    operations: built once per space, so a decision over 10,000 configurations and 200 results
    costs milliseconds rather than seconds. The same rules as ``needs_at_least`` (tested against
    it): equal key sets; per parameter, neutral ignored, ordered ones compared by rank, values
    outside a mapping (and parameters without a rule) compared for equality."""

    def __init__(self, configs: list[dict[str, Any]], order: dict[str, Order]) -> None:
        import numpy as np

        self.np = np
        names = sorted({n for c in configs for n in c})
        keysets: dict[frozenset, int] = {}
        self.keyset = np.array([keysets.setdefault(frozenset(c), len(keysets)) for c in configs])
        ranks, codes = [], []
        for name in names:
            rule = order.get(name)
            if rule == "neutral":
                continue
            seen: dict[str, int] = {}
            memo: dict[Any, tuple[int, float | None]] = {}  # per distinct value: its code and rank
            code: list[int] = []
            rank: list[float | None] = []
            for c in configs:
                if name not in c:
                    code.append(-1)
                    rank.append(None)
                    continue
                value = c[name]
                try:
                    found = memo.get((type(value), value))
                except TypeError:  # unhashable: not memoized
                    found = None
                if found is None:
                    found = (seen.setdefault(value_key(name, value), len(seen)), _rank(rule, value))
                    try:
                        memo[(type(value), value)] = found
                    except TypeError:
                        pass
                code.append(found[0])
                rank.append(found[1])
            if rule is None or any(r is None for r, c in zip(rank, configs) if name in c) and not isinstance(rule, dict):
                rank = [None] * len(configs)  # compared for equality only
            ranks.append([math.nan if r is None else r for r in rank])
            codes.append(code)
        self.rank = np.array(ranks, dtype=float).T.reshape(len(configs), len(ranks))
        self.code = np.array(codes, dtype=int).T.reshape(len(configs), len(codes))

    def at_least(self, refs: list[int]) -> numpy.ndarray:
        """Which configurations need at least as much memory as one of ``refs`` (indices)."""
        return self._any(refs, self.np.greater_equal)

    def at_most(self, refs: list[int]) -> numpy.ndarray:
        """Which configurations need at most as much memory as one of ``refs``."""
        return self._any(refs, self.np.less_equal)

    def _any(self, refs: list[int], compare: numpy.ufunc) -> numpy.ndarray:
        np = self.np
        out = np.zeros(len(self.keyset), dtype=bool)
        ranked = ~np.isnan(self.rank)
        for r in refs:
            both = ranked & ranked[r]
            same = self.code == self.code[r]
            with np.errstate(invalid="ignore"):
                ok = np.where(both, compare(self.rank, self.rank[r]), same)
            out |= (self.keyset == self.keyset[r]) & ok.all(axis=1)
        return out


def _rank(rule: Order | None, value: object) -> float | None:
    """A value's memory rank under ``rule`` (None: compared for equality only)."""
    if rule == "increasing" or rule == "decreasing":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) if rule == "increasing" else -float(value)
        return None
    if isinstance(rule, dict) and value in rule:
        return float(rule[value])
    return None
