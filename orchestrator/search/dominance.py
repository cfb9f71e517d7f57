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

from typing import Any, Iterable, Union

Order = Union[str, dict]
ORDER_WORDS = ("increasing", "decreasing", "neutral")

DEFAULT_ORDER: dict[str, Order] = {
    "batch_size": "increasing",
    "seq_len": "increasing",
    "effective_batch_size": "increasing",  # more accumulation at the same micro-batch: see grad_accum_steps
    "grad_accum_steps": "increasing",  # from 2 on, one more gradient-sized buffer (see the module)
    "dtype": {"float32": 2, "float16": 1, "bfloat16": 1},
    "activation_checkpointing": {False: 1, True: 0},
    "memory_fraction": "decreasing",
    "cpu_memory_limit_gib": "decreasing",
    "lr": "neutral",
    "seed": "neutral",
}


def _same(a: Any, b: Any) -> bool:
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
