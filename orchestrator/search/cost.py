"""What a trial will cost, in seconds, predicted from the trials measured so far, and where the one
look at an unmeasured value may go by it. Pure functions.

A trial's time is a fixed part (start-up, warm-up, exit) plus its steps; a step's time is its
samples over the throughput. So durations are fitted as ``fixed + slope * work``, ``work`` being
a step's samples over the throughput, and a candidate's work is predicted from the model's
throughput. On a GPU the fixed part dominates (1.4-1.7 s a trial on the recorded H100
landscapes, whatever the batch); on a CPU the steps do, and a slow value's steps most:
bfloat16 without its instructions cost 18 s a trial at batch 256, 0.7 s at batch 8.

Every trial runs its warm-up and at least its window's steps, so the slope is held to at least
their number: on 4 x H100 (2026-11-26) the first trials' fixed part (3.5-4.6 s, each slot's first
slower) hid the slope, fitted at 1.1 s per unit of work against the 13 steps the trials ran, and a
float32 trial at 4 micro-batches of 256 passed as an affordable look; it took 26.4 s while the
other slots ran out of work.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from orchestrator.search.mixture import Model

LOOK_COST = 4.0
"""A look goes to the best measured configuration with the unseen value instead (paired), unless
that is predicted to cost more than this many times the cheapest configuration with the value
that likely fits: then to the best of those within this factor. At 2 it moved the H100 headline's
look at 4 micro-batches from batch 256 (6.2 s) to batch 8 (2.3 s), where it told little about
the batch that wins (14 trials, 68 s, against 10 and 60 s paired); at 4 the GPU looks stay paired
and a CPU's slow value (25x) still moves."""


COSTLY: dict[str, tuple[Any, ...]] = {"compile": (True,)}
"""Values known before any trial to add a large fixed cost to each trial: ``torch.compile`` costs
about 30 s of a BERT-base trial on an H100 against 2-7 s without. Until such a value is measured,
only its one look (the evidence rule's: the best measured configuration with it instead) measures
it, and the first trials (``boundary``) bisect a column without it."""


def costly_pairs(value_keys: list[list[tuple[str, str]]], configs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The (parameter, value key) pairs of the space whose value is in ``COSTLY``, but for one that
    every configuration holds: no choice, so no look to save it for (a tour: ``compile: [true]``
    swept alone left no configuration without it, and the auto search ran nothing, exit 0)."""
    out: set[tuple[str, str]] = set()
    for config, pairs in zip(configs, value_keys):
        out.update(pair for pair in pairs if config.get(pair[0], object()) in COSTLY.get(pair[0], ()))
    return out - set(value_keys[0]).intersection(*value_keys[1:]) if value_keys else out


COSTLY_S = 25.0
"""What a costly value adds to a trial until one is measured (compile on an H100: about 30 s
against 2-7 s; the measured ones replace it)."""


def extra_s(line: tuple[float, float], measured: dict[int, float], work: Any) -> float:
    """Seconds a costly value adds to a trial: the median of what its measured trials took beyond
    the fitted line (``fit``, on the other trials), else ``COSTLY_S``."""
    if not measured:
        return COSTLY_S
    at = list(measured)
    beyond = np.array([measured[i] for i in at]) - (line[0] + line[1] * work(at))
    return max(0.0, float(np.median(beyond)))


LOW_Z = 1.645
"""A candidate's cost is predicted at the low end of its throughput (the one-sided 95% bound): an
unmeasured value's prior is wide, and under-predicting a slow one's cost is what costs time."""


def fit(work: np.ndarray, durations: np.ndarray, least: float = 0.0) -> tuple[float, float] | None:
    """(fixed seconds, seconds per unit of work) by least squares, the slope at least ``least``,
    through the trials' mean: with one trial, or trials of the same work, the line of slope
    ``least`` through them (a Llama's look at float32 went to a compiled 35 s trial where an eager
    one, priced from the one eager trial, took 1.2 s). None without a trial, or where more work did
    not take longer and no ``least`` is known (no cost to tell candidates apart)."""
    if len(work) == 0:
        return None
    slope = float(np.cov(work, durations, bias=True)[0, 1] / np.var(work)) if np.ptp(work) > 0 else 0.0
    if slope <= 0 and least <= 0:
        return None
    slope = max(slope, least)
    return max(0.0, float(durations.mean() - slope * work.mean())), slope


def affordable(group: list[int], predicted: np.ndarray, likely: np.ndarray, beside: int = 0) -> list[int]:
    """The members of ``group`` predicted to cost at most ``LOOK_COST`` times the cheapest one that
    likely fits (``likely``, per member); all of it when none likely fits. With ``beside`` trials in
    flight the factor is ``LOOK_COST / sqrt(1 + beside)``: a long look holds the stop while the
    other slots have little left to do."""
    if not likely.any():
        return group
    cheapest = float(predicted[likely].min())
    factor = LOOK_COST / math.sqrt(1 + beside)
    return [i for i, c in zip(group, predicted) if c <= factor * cheapest]


def first_looks(choices: list[int], pairs: list[list[tuple[str, str]]], unmeasured: Callable[[tuple[str, str]], bool],
                predict: Callable[[list[int]], np.ndarray], likely: np.ndarray, beside: int = 0) -> list[int]:
    """Of ``choices`` (configuration indices), those whose first measurement of a value is
    ``affordable``: a configuration with a value no trial measured (``unmeasured(pair)``) is kept
    only where it is affordable among the choices with that value (``predict(at)``: their seconds;
    ``likely``: per configuration, whether it likely fits). A look made by the search's choice of
    the best candidate costs what the evidence rule's would: on 4 x H100 it chose float32 at 4
    micro-batches of 256 (26.4 s) while its look at batch 256 alone took 7 s. All of them where
    none is kept."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i in choices:
        for pair in pairs[i]:
            if unmeasured(pair):
                groups.setdefault(pair, []).append(i)
    dropped: set[int] = set()
    for group in groups.values():
        dropped.update(set(group) - set(affordable(group, predict(group), likely[group], beside)))
    return [i for i in choices if i not in dropped] or choices


def step_samples(config: dict[str, Any], scaling: str) -> float:
    """A step's samples: the effective batch where the space sets it (``effective_batch_size``:
    the micro-batches are derived from it), else the batch times its micro-batches."""
    if "effective_batch_size" in config:
        return float(config["effective_batch_size"])
    return float(config.get(scaling, 1)) * float(config.get("grad_accum_steps", 1))


def predictor(model: Model, configs: list[dict[str, Any]], scaling: str, durations: dict[int, float],
              costly: np.ndarray | None, steps: int = 0) -> Any:
    """A trial's predicted seconds for configurations ``at`` (indices), or None: ``fit`` on the
    measured trials' ``durations`` without a costly value (``costly``, per configuration; None: no
    such value in the space), a candidate's throughput at the low end of its interval
    (``mixture.Model``), plus what its costly value adds (``extra_s``). ``steps``: the steps every
    trial runs (warm-up and window): the slope is at least that (see the module's doc), and one
    plain trial gives a line."""
    def work(i: list[int], pessimistic: bool = False) -> np.ndarray:  # a step's samples over the throughput
        step = np.array([step_samples(configs[j], scaling) for j in i])
        at = np.array(i)
        if not pessimistic:
            return step / np.exp(model.mean(at) + model.offset)
        ref = np.array([model.incumbent])
        low = model.mean(ref) + model.offset + model.upper(model.incumbent, at, z=-LOW_Z)
        return step / np.exp(low)
    plain = [i for i in durations if costly is None or not costly[i]]
    line = fit(work(plain), np.array([durations[i] for i in plain]), steps) if plain else None
    if line is None:
        return None
    extra = extra_s(line, {i: d for i, d in durations.items() if costly is not None and costly[i]}, work)
    return lambda at: line[0] + line[1] * work(at, pessimistic=True) + (0.0 if costly is None else extra * costly[at])
