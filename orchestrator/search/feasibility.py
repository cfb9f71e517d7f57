"""Will a configuration fit in memory? Proofs first, then a model. Pure functions.

1. **Proofs** (``dominance``): a configuration that needs at least as much memory as one that ran
   out of memory does not fit (probability 0); one that needs at most as much as one that fitted
   fits (1).
2. **The boundary** along the scaling dimension (the ordered parameter memory grows with, batch
   size in practice), per *group* (the configurations equal in every other parameter that moves
   memory): between the largest batch known to fit and the smallest known not to, the boundary is
   equally likely to lie in any gap, so a batch's chance to fit falls step by step across them.
3. **Memory is linear in batch size** with the rest fixed (activations scale with the batch;
   weights, gradients and optimizer state do not): two measured peaks of a group give its line,
   and the line against the memory limit (known from the device, else bracketed by the
   measurements: above every peak that fitted, below the line's value where a batch ran out)
   predicts the rest of the group before any of it runs.
4. **A group with no line borrows its sibling's**: the group that differs from it in one parameter
   with a memory order bounds it, from the line to twice it where it needs more (float32 against
   bfloat16: activations at most double) and from none to the line where it needs less. Without
   that, float32 before its first trial got the boundary prior alone (0.14 at the largest of six
   batches, with bfloat16 far below the limit there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, cast

from orchestrator.search.dominance import DominanceIndex, needs_at_least
from orchestrator.keys import config_key, value_keys_of

SPREAD = 0.06
"""Relative error of a line's prediction (peaks are read off allocators that round up)."""


@dataclass(frozen=True)
class Observed:
    """What a measured configuration tells about memory."""

    fits: bool
    peak_gib: float | None = None


def scaling_dimension(names: Sequence[str], order: dict[str, Any], values: dict[str, tuple]) -> str | None:
    """The ordered parameter memory grows with (``increasing`` in the memory order) that has the
    most values: batch size in the shipped specs; None when there is none."""
    candidates = [n for n in names if order.get(n) == "increasing" and len(values.get(n, ())) > 1
                  and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values[n])]
    return max(candidates, key=lambda n: len(values[n]), default=None)


class FitIndex:
    """What ``fit_probabilities`` derives from the space alone, computed once per planner: the
    configurations' keys, their groups along the scaling dimension and the dominance index."""

    def __init__(self, configs: list[dict[str, Any]], order: dict[str, Any], scaling: str | None,
                 keys: list[str] | None = None, pairs: list[list[tuple[str, str]]] | None = None) -> None:
        """``keys``, ``pairs``: the configurations' ``config_key``s and ``keys.value_keys_of``,
        where the caller has them already."""
        self.keys = keys if keys is not None else [config_key(c) for c in configs]
        self.position = {k: i for i, k in enumerate(self.keys)}
        self.dominance = DominanceIndex(configs, order)
        self.groups: dict[Any, list[int]] = {}
        """Per group (a tuple of its (name, value key) pairs but the scaling one), its configurations."""
        if scaling is not None:
            pairs = pairs if pairs is not None else value_keys_of(configs)
            for i, row in enumerate(pairs):
                group = tuple(sorted(p for p in row if p[0] != scaling and order.get(p[0]) != "neutral"))
                self.groups.setdefault(group, []).append(i)
        self.siblings = _siblings(configs, self.groups, scaling, order) if scaling is not None else {}
        """Per group, the groups that differ from it in one parameter with a memory order, in the
        space's order, each with whether this group needs more memory than it."""


def fit_probabilities(configs: list[dict[str, Any]], observed: dict[str, Observed], order: dict[str, Any],
                      scaling: str | None, cap_gib: float | None = None, index: FitIndex | None = None) -> list[float]:
    """For each configuration, the probability that it fits (see the module). ``index``: the
    space's ``FitIndex`` when the caller keeps one (the planner does)."""
    index = index or FitIndex(configs, order, scaling)
    keys = index.keys
    seen = [index.position[k] for k in observed if k in index.position]
    failed = [i for i in seen if not observed[keys[i]].fits]
    fitted = [i for i in seen if observed[keys[i]].fits]
    arr = index.dominance.np.full(len(configs), math.nan)
    arr[index.dominance.at_most(fitted)] = 1.0
    arr[index.dominance.at_least(failed)] = 0.0  # a proof that it does not fit wins
    known = arr.tolist()
    for i in seen:
        known[i] = 1.0 if observed[keys[i]].fits else 0.0
    p = known
    if scaling is None:
        return [0.5 if math.isnan(x) else x for x in p]
    groups = index.groups
    lines = {g: _line(configs, keys, members, observed, scaling) for g, members in groups.items()}
    cap = _cap(configs, keys, observed, groups, lines, scaling, order, cap_gib)
    for g, members in groups.items():
        _boundary(p, configs, members, scaling)
        line = lines[g]
        if line is None and cap is not None and any(0.0 < p[i] < 1.0 for i in members):
            sibling = next(((h, more) for h, more in index.siblings.get(g, ()) if lines[h] is not None), None)
            if sibling is not None:
                _from_sibling(p, configs, members, lines[sibling[0]], sibling[1], scaling, cap)  # type: ignore[arg-type]  # its line is not None (picked so)
        if line is None or cap is None:
            continue
        for i in members:
            if 0.0 < p[i] < 1.0:
                predicted = line[0] + line[1] * configs[i][scaling]
                scale = SPREAD * predicted + cap[1]
                p[i] = min(0.98, max(0.02, _phi((cap[0] - predicted) / scale)))
    return p


SIBLING_RATIO = 2.0
"""A group that needs more than its sibling needs at most this many times the sibling's peak."""


def _siblings(configs: list[dict[str, Any]], groups: dict[str, list[int]], scaling: str,
              order: dict[str, Any]) -> dict[str, list[tuple[str, bool]]]:
    """``FitIndex.siblings``: groups bucketed by everything but one ordered parameter."""
    reps = {g: {k: v for k, v in configs[m[0]].items() if k != scaling and order.get(k) != "neutral"}
            for g, m in groups.items()}
    rank = {g: n for n, g in enumerate(groups)}
    buckets: dict[tuple[str, str], list[str]] = {}
    for g, rep in reps.items():
        for name in rep:
            if order.get(name) is not None:
                buckets.setdefault((name, config_key({k: v for k, v in rep.items() if k != name})), []).append(g)
    out: dict[str, list[tuple[str, bool]]] = {g: [] for g in groups}
    for members in buckets.values():
        for g in members:
            for h in members:
                if h == g or reps[g].keys() != reps[h].keys():
                    continue
                more = needs_at_least({**reps[g], scaling: 1}, {**reps[h], scaling: 1}, order)
                less = needs_at_least({**reps[h], scaling: 1}, {**reps[g], scaling: 1}, order)
                if more != less:
                    out[g].append((h, more))
    for g in out:
        out[g].sort(key=lambda pair: rank[pair[0]])
    return out


def _from_sibling(p: list[float], configs: list[dict[str, Any]], members: list[int], line: tuple[float, float],
                  more: bool, scaling: str, cap: tuple[float, float]) -> None:
    """A group with no line of its own, next to one with a line (``FitIndex.siblings``): its peaks
    lie between that line and ``SIBLING_RATIO`` times it (needing more), or between none and it
    (needing less)."""
    for i in members:
        if 0.0 < p[i] < 1.0:
            peak = line[0] + line[1] * configs[i][scaling]
            lo, hi = (peak, SIBLING_RATIO * peak) if more else (0.0, peak)
            p[i] = min(0.98, max(0.02, (cap[0] - lo) / (hi - lo)))


def _boundary(p: list[float], configs: list[dict[str, Any]], members: list[int], scaling: str) -> None:
    """Unknowns of one group: the boundary equally likely in each gap between what fits and what
    does not (gaps on the scaling value, not on positions of the list)."""
    by_value: dict[float, list[int]] = {}
    for i in members:
        by_value.setdefault(float(configs[i][scaling]), []).append(i)
    values = sorted(by_value)
    known_fit = max((v for v in values if any(p[i] == 1.0 for i in by_value[v])), default=-math.inf)
    known_oom = min((v for v in values if any(p[i] == 0.0 for i in by_value[v])), default=math.inf)
    open_values = [v for v in values if known_fit < v < known_oom]
    k = len(open_values)
    for rank, v in enumerate(open_values, start=1):
        for i in by_value[v]:
            if math.isnan(p[i]):
                p[i] = (k + 1 - rank) / (k + 1)
    for i in members:  # beyond a known boundary without a proof (another parameter differs)
        if math.isnan(p[i]):
            p[i] = 1.0 if float(configs[i][scaling]) <= known_fit else 0.5


def _line(configs: list[dict[str, Any]], keys: list[str], members: list[int], observed: dict[str, Observed],
          scaling: str) -> tuple[float, float] | None:
    """Least-squares peak = a + s * batch over a group's measured peaks (two batches at least)."""
    points = [(float(configs[i][scaling]), cast(float, observed[keys[i]].peak_gib)) for i in members
              if keys[i] in observed and observed[keys[i]].fits and observed[keys[i]].peak_gib]
    if len({b for b, _ in points}) < 2:
        return None
    n = len(points)
    mb = sum(b for b, _ in points) / n
    mm = sum(m for _, m in points) / n
    sxx = sum((b - mb) ** 2 for b, _ in points)
    slope = sum((b - mb) * (m - mm) for b, m in points) / sxx
    if slope <= 0:
        return None  # memory not growing with the batch here: no line to extrapolate
    return mm - slope * mb, slope


def _cap(configs: list[dict[str, Any]], keys: list[str], observed: dict[str, Observed],
         groups: dict[str, list[int]], lines: dict[str, tuple[float, float] | None], scaling: str,
         order: dict[str, Any], cap_gib: float | None) -> tuple[float, float] | None:
    """The memory limit as (estimate, uncertainty) in GiB: the device's where known; else between
    the largest peak that fitted and the smallest predicted peak of a batch that ran out."""
    if cap_gib is not None:
        return cap_gib, 0.02 * cap_gib
    low = max((o.peak_gib for o in observed.values() if o.fits and o.peak_gib), default=None)
    high = None
    for g, members in groups.items():
        line = lines[g]
        if line is None:
            continue
        for i in members:
            if keys[i] in observed and not observed[keys[i]].fits:
                predicted = line[0] + line[1] * configs[i][scaling]
                high = predicted if high is None else min(high, predicted)
    if low is None or high is None or high <= low:
        return None
    return (low + high) / 2, (high - low) / 2


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
