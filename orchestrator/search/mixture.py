"""The ``auto`` search's surrogate as one model: the weighted members ``surrogate.fit`` returns,
each conditioned on the measurements once, and what the planner asks of them (means, the chance
to beat a reference, 95% bounds, the expected gain, and the joint chance that anything left beats
the best). Pure numpy: no torch, no Optuna.
"""

from __future__ import annotations

import numpy as np

from orchestrator.search import surrogate as S

DRAWS = 2000
"""Joint posterior draws for ``chance_any_above`` (the stop rule)."""


class Model:
    """The surrogate's weighted members (``surrogate.fit``) conditioned on the measurements, as one
    model (each member factored once)."""

    def __init__(self, space: S.Space, members: list[tuple[float, S.Hyper]], idx: np.ndarray, y: np.ndarray,
                 noise: np.ndarray | None = None, counts: np.ndarray | None = None) -> None:
        """``noise``, ``counts``: each value's own spread and measurements (``surrogate.fit``'s)."""
        self.space, self.idx = space, idx
        self.members = [(w, S.condition(space, idx, y, h, noise, counts)) for w, h in members]
        self.cross = S.CrossCache(space, idx)
        self.chances: tuple[tuple[int, ...], np.ndarray] | None = None
        self.incumbent = -1
        """The measured configuration with the highest predicted value."""
        self.offset = 0.0
        """The mean of the measured log objective, which ``mean`` is centred on."""

    def mean(self, at: np.ndarray) -> np.ndarray:
        return sum(w * S.posterior_mean(self.space, c, at, self.cross) for w, c in self.members)  # type: ignore[return-value]  # members is never empty: an array

    def chance_above(self, ref: int, at: np.ndarray, threshold: float) -> np.ndarray:
        """P(g(at) - g(ref) > threshold), one by one, under the mixture."""
        out = np.zeros(len(at))
        for w, c in self.members:
            mean, sd = S.difference(self.space, c, ref, at, self.cross)
            out += w * S.prob_above(mean, sd, threshold)
        return out

    def upper(self, ref: int, at: np.ndarray, z: float = 1.645) -> np.ndarray:
        """The one-sided 95% bound of g(at) - g(ref), one by one, from the mixture's mean and spread."""
        first, second = np.zeros(len(at)), np.zeros(len(at))
        for w, c in self.members:
            mean, sd = S.difference(self.space, c, ref, at, self.cross)
            first += w * mean
            second += w * (sd * sd + mean * mean)
        return first + z * np.sqrt(np.clip(second - first * first, 0.0, None))

    def gap(self, ref: int, at: np.ndarray) -> np.ndarray:
        """The mixture's mean of g(at) - g(ref), one by one."""
        out = np.zeros(len(at))
        for w, c in self.members:
            mean, _ = S.difference(self.space, c, ref, at, self.cross)
            out += w * mean
        return out

    def expected_gain(self, ref: int, at: np.ndarray) -> np.ndarray:
        out = np.zeros(len(at))
        for w, c in self.members:
            mean, sd = S.difference(self.space, c, ref, at, self.cross)
            out += w * S.expected_improvement(mean, sd, 0.0)
        return out

    def chance_any_above(self, ref: int, at: np.ndarray, p_fit: np.ndarray, threshold: float) -> float:
        """P(some configuration of ``at`` fits and beats ``ref`` by more than ``threshold``),
        sampled from each member's joint posterior (fits drawn independently, which only errs
        towards going on)."""
        rng = np.random.default_rng(len(self.idx))  # the same study state gives the same verdict
        normal = rng.standard_normal((len(at) + 1, DRAWS))  # shared by the members (common numbers)
        misfit = np.where(rng.random((len(at), DRAWS)) < p_fit[:, None], 0.0, -np.inf)
        total = 0.0
        for w, c in self.members:
            post = S.posterior(self.space, c, np.concatenate([[ref], at]), self.cross)
            L = np.linalg.cholesky(post.cov + 1e-9 * np.eye(len(at) + 1))
            draws = post.mean[:, None] + L @ normal
            gain = (draws[1:] - draws[0] + misfit).max(axis=0)
            total += w * float((gain > threshold).mean())
        return total
