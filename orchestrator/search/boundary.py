"""The ``auto`` search's first trials: the memory boundary of the most promising group, by bisection
on the batch (``planner``'s opening, before the model chooses).

The group is the batch column the priors rank first (within ``LEAD_TIE`` of the best once batch
size is set aside; of those, the one that needs the least memory by the memory order, then the
spec's first; a configuration with a value known to cost much, ``cost.COSTLY``, only where every
one has one). Its boundary is bisected from the middle of the list until the largest batch that
fits and the smallest that does not are neighbours; on a CPU, once the first batch has a result,
the batch below it comes next. Pure: the planner calls ``Boundary.probe`` with what the study holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.search import surrogate as S

LEAD_TIE = 0.05
"""Prior effects (log throughput) closer than this to the best do not decide the first column."""


class Boundary:
    def __init__(self, configs: list[dict[str, Any]], keys: list[str], scaling: str | None, space: S.Space,
                 scaling_feature: int, order: dict[str, Any], values: dict[str, tuple], down_first: bool,
                 costly: list[bool] | None = None) -> None:
        """``scaling``: the batch dimension (None: no bisection); ``space``, ``scaling_feature``: the
        priors (``priors.encode``); ``down_first``: on a CPU, the batch below the first next;
        ``costly``: per configuration, whether it has a value known to cost much (``cost.COSTLY``):
        the column bisected is one without, where there is one."""
        self.costly = costly
        self.configs, self.keys, self.scaling, self.space = configs, keys, scaling, space
        self.scaling_feature, self.order, self.values, self.down_first = scaling_feature, order, values, down_first
        self._lead: list[int] | None = None

    def probe(self, p_fit: np.ndarray, results: dict[str, Any], in_flight: set[str]) -> int | None:
        """Bisect the batch column of the group the priors rank first, while its boundary is open.
        On a CPU, once its first batch has a result, the batch below it first: there a larger batch
        is barely faster (the prior: +0.05 a doubling, either sign within its spread) and a trial
        costs about its batch's samples (the step down half the first, the step up twice it).
        With trials in flight in the column (several slots), each counts as fitting or not as it
        likely does (at even odds, as not: the batch below is likelier to fit and gives the memory
        line its second point), and the bisection goes on from there: the next slot measures the
        point the bisection would measure next, were the results in flight what the memory model
        expects."""
        if self.scaling is None:
            return None
        column = self.column()
        flying = [i for i in column if self.keys[i] in in_flight]
        done = [i for i in column if self.keys[i] in results]
        if self.down_first and len(done) == 1 and p_fit[done[0]] == 1.0 and not flying:
            below = [i for i in column if self.configs[i][self.scaling] < self.configs[done[0]][self.scaling]]
            if below:
                return below[-1]
        fits = [i for i in column if p_fit[i] == 1.0 or i in flying and p_fit[i] > 0.5]  # in flight: as likely
        fails = [i for i in column if p_fit[i] == 0.0 or i in flying and p_fit[i] <= 0.5]
        low = max((self.configs[i][self.scaling] for i in fits), default=-math.inf)
        high = min((self.configs[i][self.scaling] for i in fails), default=math.inf)
        gap = [i for i in column if low < self.configs[i][self.scaling] < high and self.keys[i] not in results]
        if not gap:
            return None
        return gap[len(gap) // 2]

    def column(self) -> list[int]:
        """The batch column to bisect (computed once)."""
        if self._lead is None:
            self._lead = self._lead_column()
        return self._lead

    def _lead_column(self) -> list[int]:
        """The batch column to bisect first: of the configurations the priors rank first (within
        ``LEAD_TIE`` of the best, once batch size is set aside), the one that needs the least
        memory by the memory order (a small gain such as accumulation's is not worth the memory
        it may cost), then the spec's first."""
        prior = self.space.H @ self.space.prior_mean - self.space.H[:, self.scaling_feature] * \
            self.space.prior_mean[self.scaling_feature]
        if self.costly is not None and not all(self.costly):  # a costly value gets its one look later
            prior = np.where(np.array(self.costly), -np.inf, prior)
        near = np.flatnonzero(prior >= prior.max() - LEAD_TIE).tolist()  # one max, not one per configuration
        lead = min(near, key=lambda i: (self._memory_rank(self.configs[i]), i))
        rest = {k: v for k, v in self.configs[lead].items() if k != self.scaling}
        column = [i for i, c in enumerate(self.configs) if {k: v for k, v in c.items() if k != self.scaling} == rest]
        return sorted(column, key=lambda i: self.configs[i][self.scaling])  # type: ignore[index]  # a batch knob is set where this runs

    def _memory_rank(self, config: dict[str, Any]) -> float:
        """How much memory ``config`` needs, in the memory order's units, batch size set aside: the
        position of an ordered value (negated for ``decreasing``), a mapped rank, else 0."""
        total = 0.0
        for name, value in config.items():
            rule = self.order.get(name)
            if name == self.scaling or rule is None or rule == "neutral":
                continue
            if isinstance(rule, dict):
                total += float(rule.get(value, 0))
            else:
                ranked = sorted(self.values[name])
                total += ranked.index(value) * (1 if rule == "increasing" else -1)
        return total

