"""Mixture predictive against Monte Carlo and scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from amorgp.ensembles import GaussianMixture


@pytest.fixture
def mix() -> GaussianMixture:
    w = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    means = torch.tensor([[0.0, 1.0], [2.0, -1.0], [-1.0, 0.5]], dtype=torch.float64)
    var = torch.tensor([[1.0, 0.5], [0.25, 2.0], [4.0, 0.1]], dtype=torch.float64)
    return GaussianMixture(w, means, var)


def _scipy_pdf(mix: GaussianMixture, y: np.ndarray) -> np.ndarray:
    w, m, v = mix.weights.numpy(), mix.means.numpy(), mix.variances.numpy()
    return (w[:, None] * stats.norm.pdf(y[None], m, np.sqrt(v))).sum(0)


def test_moments_against_monte_carlo(mix: GaussianMixture) -> None:
    draws = mix.sample(400_000, torch.Generator().manual_seed(0))
    torch.testing.assert_close(draws.mean(0), mix.mean(), atol=0.01, rtol=0)
    torch.testing.assert_close(draws.var(0), mix.variance(), atol=0.02, rtol=0.01)


def test_log_prob_and_cdf_against_scipy(mix: GaussianMixture) -> None:
    y = np.array([0.3, -0.7])
    np.testing.assert_allclose(
        mix.log_prob(torch.as_tensor(y)).numpy(), np.log(_scipy_pdf(mix, y)), rtol=1e-12
    )
    w, m, v = mix.weights.numpy(), mix.means.numpy(), mix.variances.numpy()
    cdf = (w[:, None] * stats.norm.cdf(y[None], m, np.sqrt(v))).sum(0)
    np.testing.assert_allclose(mix.cdf(torch.as_tensor(y)).numpy(), cdf, rtol=1e-12)


def test_quantiles_invert_the_cdf_and_match_monte_carlo(mix: GaussianMixture) -> None:
    q = torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)
    qs = mix.quantile(q)
    assert qs.shape == (3, 2)
    for i in range(3):
        torch.testing.assert_close(mix.cdf(qs[i]), q[i].expand(2), atol=1e-10, rtol=0)
    draws = mix.sample(200_000, torch.Generator().manual_seed(1))
    torch.testing.assert_close(torch.quantile(draws, q, dim=0), qs, atol=0.03, rtol=0)


def test_log_prob_is_stable_far_in_the_tails(mix: GaussianMixture) -> None:
    lp = mix.log_prob(torch.tensor([1e3, -1e3], dtype=torch.float64))
    assert bool(torch.isfinite(lp).all())
    # far out the widest component dominates: log w_m + log N(y; mu_m, v_m) of the best m
    w, m, v = mix.weights, mix.means, mix.variances
    comp = w.log()[:, None] - 0.5 * (
        np.log(2 * np.pi) + v.log() + (torch.tensor([1e3, -1e3]) - m) ** 2 / v
    )
    torch.testing.assert_close(lp, comp.max(0).values, rtol=1e-9, atol=0)


def test_variance_never_negative_with_equal_members() -> None:
    m = torch.full((4, 5), 1e8, dtype=torch.float64)
    mix = GaussianMixture(
        torch.full((4,), 0.25, dtype=torch.float64),
        m,
        torch.full((4, 5), 1e-6, dtype=torch.float64),
    )
    assert bool((mix.variance() > 0).all())
    torch.testing.assert_close(mix.variance(), torch.full((5,), 1e-6, dtype=torch.float64))


def test_zero_weight_members_are_dropped_and_bad_input_raises() -> None:
    mix = GaussianMixture(
        torch.tensor([0.0, 1.0]),
        torch.tensor([[float("nan")], [1.0]]),
        torch.tensor([[1.0], [2.0]]),
    )
    assert mix.means.shape == (1, 1)
    with pytest.raises(ValueError, match="sum to 1"):
        GaussianMixture(torch.tensor([0.5, 0.6]), torch.zeros(2, 1), torch.ones(2, 1))
    with pytest.raises(ValueError, match="positive variances"):
        GaussianMixture(torch.tensor([1.0]), torch.zeros(1, 1), torch.zeros(1, 1))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        mix.quantile(1.0)
