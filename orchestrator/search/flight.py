"""Trials in flight: how the ``auto`` search proposes while others run (several device slots,
``sweep.loop``, or several orchestrators on one study), and when their results can no longer
change its verdict. Pure: the planner calls these with what the study holds.

- **Believed** (``believe``): each configuration in flight that likely fits counts as measured at
  the model's predicted value (the kriging believer): the spread there and at its neighbours
  collapses, so the next proposal goes where the ones in flight will not tell.
- **One look at a value at a time** (``pending``): a searched value that no measured
  configuration has (batch size aside), carried by a configuration in flight, is being looked at;
  no other configuration with it is proposed until that result is in: it says whether the value
  is worth more (without this, four slots gave a value the model knew nothing of four trials at
  once, where one told that it was 7x slower).
- **Memory in flight** (``hostage``): a configuration that needs at least as much memory as one
  in flight that may not fit is worth starting now only if that one fits (if it runs out of
  memory, so does this one, and its slot was spent on nothing): its score is multiplied by the
  chance that the one in flight fits (two slots gave float16 and bfloat16 at batch 128 their
  out-of-memory trials together, 6.7 s each on the H200).
- **A long look beside others** (``cost.affordable``): a look at an unseen value placed beside
  trials in flight may cost at most ``LOOK_COST / sqrt(1 + in flight)`` times the cheapest with
  that value: a long one holds the stop while the other slots have little left to do.
- **Beside a look** (``beside``): a slot that has nothing else worth measuring while a look runs
  (every configuration without the value looked at measured, and no rival to measure again) takes
  the likeliest winner with that value instead of waiting for the look's result: on the small
  BERT with ``compile``, three slots sat idle for 16 s of a 20-s compiled look, then ran the
  compiled trials it called for (``docs/benchmarks.md``). A costly value with no look in flight
  is still looked at first, alone.
- **No slot waits idle on a verdict** (``remeasure.Measurements.spare``): where the verdict is done
  if the trials in flight come in as predicted but they could still change it, a free slot
  measures the best again once, as a rival made by those results would ask next.
- **Ending together** (``ends``, the planner's): once the verdict is done, it is taken again from the
  measurements alone (nothing believed), counting the configurations in flight as candidates; when
  even they are unlikely to beat the best by more than the band and none is a look, the verdict ends
  them too (``Verdict.ends_running``): the sweep stops them instead of waiting for results that
  cannot change its answer. An *unsure* verdict (the leaders could not be settled by measuring
  again) ends what is being measured again, and judges only the new configurations in flight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from orchestrator.search.mixture import Model

if TYPE_CHECKING:
    from orchestrator.search.dominance import DominanceIndex


def running(index: dict[str, int], in_flight: set[str], p_fit: np.ndarray, likely: float = 0.5) -> np.ndarray:
    """The configurations in flight (indices) that fit with at least ``likely`` chance."""
    return np.array([index[k] for k in in_flight if k in index and p_fit[index[k]] > likely], dtype=int)


def believe(model: Model, members: list[Any], yc: np.ndarray, noise: np.ndarray | None, counts: np.ndarray,
            at: np.ndarray) -> Model:
    """``model`` (conditioned on the measurements ``yc``) with the configurations ``at`` counted as
    measured at its predicted values, each as noisy as the median measurement; the incumbent and
    offset are the measured model's."""
    if not len(at):
        return model
    believed = None if noise is None else np.concatenate([noise, np.full(len(at), float(np.median(noise)))])
    out = Model(model.space, members, np.concatenate([model.idx, at]), np.concatenate([yc, model.mean(at)]),
                believed, np.concatenate([counts, np.ones(len(at))]))
    out.incumbent, out.offset = model.incumbent, model.offset
    return out


def pending(flying: list[int], value_keys: list[list[tuple[str, str]]],
            measured: set[tuple[str, str]], looked: Callable[[str], bool]) -> set[tuple[str, str]]:
    """The (parameter, value) pairs being looked at: carried by a configuration in flight
    (``flying``), measured by no configuration with a result, of a parameter whose values the stop
    needs measured (``looked(name)``)."""
    return {pair for i in flying for pair in value_keys[i] if pair not in measured and looked(pair[0])}


def without(open_: list[int], value_keys: list[list[tuple[str, str]]], looking: set[tuple[str, str]]) -> list[int]:
    """``open_`` less the configurations that carry a value being looked at."""
    if not looking:
        return open_
    return [i for i in open_ if not any(pair in looking for pair in value_keys[i])]


def hostage(dominance: DominanceIndex, flying: list[int], p_fit: np.ndarray) -> np.ndarray:
    """Per configuration, the chance that every configuration in flight it needs at least as much
    memory as (``dominance.at_least``) fits: 1 where none is in flight or each surely fits."""
    out = np.ones(len(p_fit))
    for f in flying:
        if 0.0 < p_fit[f] < 1.0:
            out[dominance.at_least([f])] *= p_fit[f]
    return out


def beside(open_: list[int], value_keys: list[list[tuple[str, str]]], looking: set[tuple[str, str]],
           unlooked: set[tuple[str, str]]) -> list[int]:
    """``open_``'s configurations that carry a value being looked at (``looking``) and no costly
    value that nothing has looked at yet (``unlooked``)."""
    return [i for i in open_ if any(pair in looking for pair in value_keys[i])
            and not any(pair in unlooked for pair in value_keys[i])]
