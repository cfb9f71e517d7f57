"""A Gaussian-process model of the objective over a finite set of configurations, in NumPy.

The latent objective of configuration ``x`` (a log throughput, say) is modelled as

    g(x) = h(x) . beta  +  f(x),     beta ~ N(prior_mean, diag(prior_sd^2)),   f ~ GP(0, s_f^2 k)

and a measurement is ``g(x) + noise`` with ``noise ~ N(0, s_n^2 + s_i^2)``: ``s_i`` is the spread
measurement ``i`` reported itself (its window's, or its repeats': ``priors.measured_noise``), ``s_n``
what the measurements show beyond it. The linear part carries what
is known before any trial (``priors.PRIORS``: more batch is faster, checkpointing is slower,
...) with a spread that lets the data overrule it; ``f`` is a stationary GP for what the linear
part misses: a Matern 5/2 kernel over the ordered dimensions (scaled to [0, 1]) times an
exchangeable kernel over each categorical one (1 when equal, ``rho`` otherwise). Integrating
``beta`` out gives one GP with covariance ``H diag(sd^2) H' + s_f^2 K``, so every quantity is in
closed form. ``s_f``, ``s_n``, the lengthscales and ``rho`` are chosen by marginal likelihood
over small grids (coordinate ascent), with floors that keep a model fitted on a few points from
being sure of what it has not seen.

Not Optuna's ``GPSampler``: that imports torch, which the orchestrator's process never does.
Pure functions and a small class; tested by tables in ``tests/search/test_surrogate.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SIGMA_F = (0.08, 0.16, 0.32)
"""How far the objective may stray from the linear part (log units): 8% at least."""
SIGMA_N = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16)
BEYOND_MEASURED = 0.02
"""Where each measurement reports its spread, the most noise the model assumes beyond it: with
few measurements any ``s_n`` explains them, and a wide one would make a clearly slower measured
configuration a likely rival of the best (``remeasure``)."""
LENGTHSCALES = (0.15, 0.3, 0.6)
"""Of the stationary part, in units of each ordered dimension's range (one for all of them)."""
RHOS = (0.3, 0.7)
"""Correlation of the stationary part between two values of a categorical dimension."""
MEMBERS = 8
"""Hyperparameter settings kept, by marginal likelihood: the model is their weighted mixture."""


@dataclass(frozen=True)
class Hyper:
    sigma_f: float
    sigma_n: float
    lengthscales: tuple[float, ...]
    rhos: tuple[float, ...]


@dataclass(frozen=True)
class Space:
    """Every configuration, encoded once: ``H`` (linear features, one row per configuration) with
    the prior of their effects, ``Z`` (ordered coordinates in [0, 1]) and ``C`` (categorical codes)."""

    H: np.ndarray
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    Z: np.ndarray
    C: np.ndarray

    def __len__(self) -> int:
        return self.H.shape[0]


def matern52(d: np.ndarray) -> np.ndarray:
    s = math.sqrt(5.0) * d
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


def kernel(space: Space, a: np.ndarray, b: np.ndarray, hyper: Hyper) -> np.ndarray:
    """The stationary part's correlation between configurations ``a`` and ``b`` (indices)."""
    k = np.ones((len(a), len(b)))
    for j, ell in enumerate(hyper.lengthscales):
        d = np.abs(space.Z[a, j][:, None] - space.Z[b, j][None, :]) / ell
        k *= matern52(d)
    for j, rho in enumerate(hyper.rhos):
        same = space.C[a, j][:, None] == space.C[b, j][None, :]
        k *= np.where(same, 1.0, rho)
    return k


def covariance(space: Space, a: np.ndarray, b: np.ndarray, hyper: Hyper) -> np.ndarray:
    """Prior covariance of the latent objective at ``a`` and ``b``."""
    linear = (space.H[a] * space.prior_sd ** 2) @ space.H[b].T
    return linear + hyper.sigma_f ** 2 * kernel(space, a, b, hyper)


def _noise_variance(hyper: Hyper, n: int, noise: np.ndarray | None, counts: np.ndarray | None = None) -> np.ndarray:
    """Each value's noise variance: ``s_n^2`` plus its own reported spread squared, for a value that
    is the median of ``counts`` measurements ``s_n^2 / counts`` (its reported spread already counts
    them): noise that more measurements average out, not a roughness of the landscape."""
    own = np.zeros(n) if noise is None else np.asarray(noise, dtype=float) ** 2
    per = np.ones(n) if counts is None else np.asarray(counts, dtype=float)
    return hyper.sigma_n ** 2 / per + own


def _log_likelihood(space: Space, idx: np.ndarray, y: np.ndarray, hyper: Hyper,
                    noise: np.ndarray | None = None, counts: np.ndarray | None = None) -> float:
    K = covariance(space, idx, idx, hyper) + np.diag(_noise_variance(hyper, len(idx), noise, counts))
    r = y - space.H[idx] @ space.prior_mean
    try:
        L = np.linalg.cholesky(K)
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(L, r)
    return float(-0.5 * alpha @ alpha - np.log(np.diag(L)).sum() - 0.5 * len(idx) * math.log(2 * math.pi))


def fit(space: Space, idx: np.ndarray, y: np.ndarray, noise_floor: float = 0.0,
        noise: np.ndarray | None = None, counts: np.ndarray | None = None,
        beyond_measured: float = BEYOND_MEASURED) -> list[tuple[float, Hyper]]:
    """The hyperparameter settings of the grids above weighted by their marginal likelihood (a
    flat prior over the grid), the ``MEMBERS`` heaviest: with few measurements the weights are
    flat and the mixture is wide, so the model does not claim what it has not seen. ``noise``:
    each measurement's own spread (log units), added to ``s_n``, which then stays at most
    ``BEYOND_MEASURED`` (a configuration measured several times reports the spread between its
    measurements itself); ``counts``: how many measurements each value is the median of;
    ``noise_floor``: the least ``s_n``; ``beyond_measured``: the most, where ``noise`` is given."""
    n_ord, n_cat = space.Z.shape[1], space.C.shape[1]
    ceiling = max(noise_floor, beyond_measured) if noise is not None else math.inf
    beyond = tuple(s for s in SIGMA_N if noise_floor <= s <= ceiling) or (noise_floor,)
    grid = [Hyper(f, n, (ell,) * n_ord, (rho,) * n_cat) for f in SIGMA_F for n in beyond
            for ell in (LENGTHSCALES if n_ord else LENGTHSCALES[:1]) for rho in (RHOS if n_cat else RHOS[:1])]
    scores = (np.array([_log_likelihood(space, idx, y, h, noise, counts) for h in grid]) if len(idx)
              else np.zeros(len(grid)))
    order = np.argsort(-scores)[:MEMBERS]
    w = np.exp(scores[order] - scores[order[0]])
    w /= w.sum()
    return [(float(wi), grid[i]) for wi, i in zip(w, order)]


@dataclass(frozen=True)
class Posterior:
    """The latent objective at ``at`` (indices) given the measurements: mean and covariance."""

    at: np.ndarray
    mean: np.ndarray
    cov: np.ndarray

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(self.cov), 1e-12, None))


@dataclass(frozen=True)
class Conditioned:
    """One hyperparameter setting conditioned on the measurements, factored once: every posterior
    quantity after it is matrix products (``posterior``, ``difference``)."""

    hyper: Hyper
    idx: np.ndarray
    Linv: np.ndarray
    """The inverse of the measurements' covariance's Cholesky factor."""
    alpha: np.ndarray
    """``K^-1 (y - prior mean)``."""


def condition(space: Space, idx: np.ndarray, y: np.ndarray, hyper: Hyper,
              noise: np.ndarray | None = None, counts: np.ndarray | None = None) -> Conditioned:
    """``noise``, ``counts``: each value's own spread and measurements (``fit``'s)."""
    K = covariance(space, idx, idx, hyper) + np.diag(_noise_variance(hyper, len(idx), noise, counts) + 1e-10)
    Linv = np.linalg.inv(np.linalg.cholesky(K)) if len(idx) else np.zeros((0, 0))
    alpha = Linv.T @ (Linv @ (y - space.H[idx] @ space.prior_mean)) if len(idx) else np.zeros(0)
    return Conditioned(hyper, idx, Linv, alpha)


def posterior(space: Space, cond: Conditioned, at: np.ndarray, cache: CrossCache | None = None) -> Posterior:
    """The joint posterior at ``at``."""
    prior = space.H[at] @ space.prior_mean
    cov = covariance(space, at, at, cond.hyper)
    if len(cond.idx) == 0:
        return Posterior(at, prior, cov)
    cross = _cross(space, cond, at, cache)
    v = cond.Linv @ cross.T
    return Posterior(at, prior + cross @ cond.alpha, cov - v.T @ v)


class CrossCache:
    """The stationary kernel between every configuration and the measured ones, once per
    (lengthscales, rhos) setting: the mixture's members share it (eight members use at most six
    settings), and every candidate of a decision reads its rows."""

    def __init__(self, space: Space, idx: np.ndarray) -> None:
        self.space, self.idx = space, idx
        self._kernels: dict[tuple, np.ndarray] = {}

    def covariance(self, at: np.ndarray, hyper: Hyper) -> np.ndarray:
        """``covariance(space, at, idx, hyper)``, from the cached kernel."""
        key = (hyper.lengthscales, hyper.rhos)
        if key not in self._kernels:
            self._kernels[key] = kernel(self.space, np.arange(len(self.space)), self.idx, hyper)
        linear = (self.space.H[at] * self.space.prior_sd ** 2) @ self.space.H[self.idx].T
        return linear + hyper.sigma_f ** 2 * self._kernels[key][at]


def _cross(space: Space, cond: Conditioned, at: np.ndarray, cache: CrossCache | None) -> np.ndarray:
    if cache is not None and cache.idx is cond.idx:
        return cache.covariance(at, cond.hyper)
    return covariance(space, at, cond.idx, cond.hyper)


def posterior_mean(space: Space, cond: Conditioned, at: np.ndarray, cache: CrossCache | None = None) -> np.ndarray:
    """The posterior mean at ``at`` alone (no covariance: cheap for thousands of configurations)."""
    prior = space.H[at] @ space.prior_mean
    if len(cond.idx) == 0:
        return prior
    return prior + _cross(space, cond, at, cache) @ cond.alpha


def difference(space: Space, cond: Conditioned, ref: int, at: np.ndarray,
               cache: CrossCache | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Mean and spread of ``g(at) - g(ref)`` for each of ``at`` (one by one: no joint matrix)."""
    both = np.concatenate([[ref], at])
    hyper = cond.hyper
    mean = space.H[both] @ space.prior_mean
    k_ref = covariance(space, both, np.array([ref]), hyper)[:, 0]
    var = np.sum((space.H[both] * space.prior_sd ** 2) * space.H[both], axis=1) + hyper.sigma_f ** 2
    if len(cond.idx):
        cross = _cross(space, cond, both, cache)
        v = cond.Linv @ cross.T
        mean = mean + cross @ cond.alpha
        var = var - np.sum(v * v, axis=0)
        k_ref = k_ref - v.T @ v[:, 0]
    d_var = var[1:] + var[0] - 2 * k_ref[1:]
    return mean[1:] - mean[0], np.sqrt(np.clip(d_var, 1e-12, None))


def expected_improvement(mean: np.ndarray, sd: np.ndarray, incumbent: float) -> np.ndarray:
    """E[max(g - incumbent, 0)] for independent normals."""
    z = (mean - incumbent) / sd
    return sd * _pdf(z) + (mean - incumbent) * _cdf(z)


def prob_above(mean: np.ndarray, sd: np.ndarray, threshold: float) -> np.ndarray:
    return 1.0 - _cdf((threshold - mean) / sd)


def _pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _cdf(z: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * (1.0 + np.vectorize(erf)(np.asarray(z, dtype=float) / math.sqrt(2.0)))
