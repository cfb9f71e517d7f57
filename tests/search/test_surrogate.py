"""The GP surrogate: closed-form posteriors, the hyperparameter mixture, and the normal tail rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.search import surrogate as S


def line_space(n: int = 9, prior_mean: float = 0.0, prior_sd: float = 0.0) -> S.Space:
    """``n`` configurations along one ordered dimension in [0, 1], a constant feature."""
    z = np.linspace(0.0, 1.0, n)[:, None]
    return S.Space(H=np.ones((n, 1)), prior_mean=np.array([prior_mean]), prior_sd=np.array([prior_sd]),
                   Z=z, C=np.zeros((n, 0), dtype=int))


HYPER = S.Hyper(sigma_f=0.2, sigma_n=1e-3, lengthscales=(0.3,), rhos=())


def test_matern_is_one_at_zero_and_falls_with_distance() -> None:
    d = np.array([0.0, 0.5, 1.0, 2.0])
    k = S.matern52(d)
    assert k[0] == pytest.approx(1.0) and all(np.diff(k) < 0)


def test_the_posterior_goes_through_exact_measurements_and_reverts_to_the_prior_far_away() -> None:
    space = line_space(21)
    idx, y = np.array([0, 1]), np.array([0.3, 0.35])
    post = S.posterior(space, S.condition(space, idx, y, S.Hyper(0.2, 1e-3, (0.1,), ())), np.arange(21))
    assert post.mean[:2] == pytest.approx(y, abs=1e-3)
    assert post.sd[0] < 0.01 and post.sd[1] < 0.01
    assert post.mean[-1] == pytest.approx(0.0, abs=1e-3)      # far away: the prior mean
    assert post.sd[-1] == pytest.approx(HYPER.sigma_f, rel=1e-3)  # ... and the prior spread


def test_a_prior_effect_shifts_unmeasured_configurations_until_data_overrules_it() -> None:
    space = line_space(5, prior_mean=1.0, prior_sd=0.1)
    before = S.posterior(space, S.condition(space, np.array([], dtype=int), np.array([]), HYPER), np.arange(5))
    assert before.mean == pytest.approx(np.ones(5))
    after = S.posterior(space, S.condition(space, np.array([0, 2, 4]), np.zeros(3), HYPER), np.arange(5))
    assert all(abs(m) < 0.05 for m in after.mean)


def test_difference_matches_the_joint_posterior() -> None:
    space = line_space(7)
    idx, y = np.array([1, 5]), np.array([0.1, -0.2])
    cond = S.condition(space, idx, y, HYPER)
    joint = S.posterior(space, cond, np.arange(7))
    mean, sd = S.difference(space, cond, 3, np.array([0, 6]))
    for k, j in enumerate((0, 6)):
        assert mean[k] == pytest.approx(joint.mean[j] - joint.mean[3])
        var = joint.cov[j, j] + joint.cov[3, 3] - 2 * joint.cov[j, 3]
        assert sd[k] == pytest.approx(math.sqrt(var), rel=1e-6)


def test_categorical_values_correlate_by_rho() -> None:
    space = S.Space(H=np.ones((2, 1)), prior_mean=np.zeros(1), prior_sd=np.zeros(1),
                    Z=np.zeros((2, 0)), C=np.array([[0], [1]]))
    hyper = S.Hyper(0.2, 1e-3, (), (0.3,))
    assert S.kernel(space, np.array([0]), np.array([1]), hyper)[0, 0] == pytest.approx(0.3)


def test_the_mixture_weights_sum_to_one_and_are_flat_without_data() -> None:
    space = line_space(9)
    members = S.fit(space, np.array([], dtype=int), np.array([]))
    assert len(members) == S.MEMBERS and sum(w for w, _ in members) == pytest.approx(1.0)
    assert len({round(w, 9) for w, _ in members}) == 1
    smooth = S.fit(space, np.arange(9), np.linspace(0.0, 0.4, 9))
    assert sum(w for w, _ in smooth) == pytest.approx(1.0)
    assert smooth[0][0] > 1.0 / S.MEMBERS     # data makes some settings likelier


def test_a_noise_floor_is_respected() -> None:
    space = line_space(9)
    members = S.fit(space, np.arange(9), np.zeros(9), noise_floor=0.04)
    assert all(h.sigma_n >= 0.04 for _, h in members)


@pytest.mark.parametrize("mean, sd, bar, ei, above", [
    (0.0, 1.0, 0.0, 0.3989423, 0.5),
    (1.0, 1.0, 0.0, 1.0833155, 0.8413447),
    (-2.0, 0.5, 0.0, 3.5726e-6, 3.1671e-5),   # z = -4: 0.5 phi(4) - 2 (1 - Phi(4))
])
def test_normal_tail_rules(mean: float, sd: float, bar: float, ei: float, above: float) -> None:
    m, s = np.array([mean]), np.array([sd])
    assert S.expected_improvement(m, s, bar)[0] == pytest.approx(ei, rel=1e-4)
    assert S.prob_above(m, s, bar)[0] == pytest.approx(above, rel=1e-4)
