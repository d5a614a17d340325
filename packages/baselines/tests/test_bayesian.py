from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from amorgp.baselines import bayesian
from amorgp.baselines.bayesian import (
    ADVISettings,
    fit_advi_gp,
    gp_log_density,
    mixture_log_density,
    mixture_moments,
)
from amorgp.baselines.testing import synthetic_dataset as make_data
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood
from amorgp.kernel_grammar import FLOORS, NOISE, DimWiseStructure, ParamKind, base_symbol
from amorgp.lazy_kernels import PaddedBatch


def _grid_posterior(
    X: np.ndarray, y: np.ndarray, lo: float, hi: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the posterior over the unconstrained (softplus) coordinates
    (variance, lengthscale, noise) of an SE GP, by dense numpy quadrature on a grid."""
    g = np.linspace(lo, hi, k)
    Z = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    kinds = [ParamKind.VARIANCE, ParamKind.LENGTHSCALE, ParamKind.NOISE]
    theta = np.stack([FLOORS[kd] + np.logaddexp(0.0, Z[:, i]) for i, kd in enumerate(kinds)], 1)
    s2, ell, noise = theta.T
    r2 = (X[:, None, 0] - X[None, :, 0]) ** 2
    K = s2[:, None, None] * np.exp(-r2[None] / (2 * ell[:, None, None] ** 2))
    lml = dense_gp_log_marginal_likelihood(K, y, noise)
    pv, pl = (base_symbol("SE").params[i].prior for i in (0, 1))
    lp = (
        scipy.stats.gamma(pv.shape, scale=1 / pv.rate).logpdf(s2)
        + scipy.stats.gamma(pl.shape, scale=1 / pl.rate).logpdf(ell)
        + scipy.stats.expon(scale=1 / NOISE.prior.rate).logpdf(noise)
    )
    logjac = -np.logaddexp(0.0, -Z).sum(1)  # log sigmoid
    logw = lml + lp + logjac
    w = np.exp(logw - scipy.special.logsumexp(logw))
    mean = w @ Z
    sd = np.sqrt(w @ (Z - mean) ** 2)
    return mean, sd


def test_tiny_gp_matches_grid_posterior() -> None:
    X, y = make_data(30, 1, seed=21, noise=0.3)
    batch = PaddedBatch.from_datasets([(X, y)], [DimWiseStructure.parse("SE", 1)])
    settings = ADVISettings(family="fullrank", n_grad_samples=5, max_iters=2000, tol_rel_obj=1e-3)
    post = fit_advi_gp(batch, settings, generator=torch.Generator().manual_seed(0))
    assert post.result.status != "failed"
    lo, hi = -7.0, 4.0
    mean, sd = _grid_posterior(X.numpy(), y.numpy(), lo, hi, 30)
    # the grid must hold the posterior: its mass is away from the edges
    assert np.all(mean - 4 * sd > lo)
    assert np.all(mean + 4 * sd < hi)
    q_mean = post.result.mean.numpy()
    q_sd = np.sqrt(np.diag(post.result.covariance.numpy()))
    assert np.all(np.abs(q_mean - mean) <= 0.3 * sd), (q_mean, mean, sd)
    np.testing.assert_allclose(q_sd, sd, rtol=0.3)


@pytest.mark.parametrize("max_chunk_elements", [bayesian.DRAW_CHUNK_ELEMENTS, 1])
def test_log_density_is_the_unconstrained_log_joint(max_chunk_elements: int) -> None:
    X, y = make_data(6, 1, seed=2)
    batch = PaddedBatch.from_datasets([(X, y)], [DimWiseStructure.parse("SE", 1)])
    log_density, kinds, init = gp_log_density(batch, max_chunk_elements=max_chunk_elements)
    assert kinds == [ParamKind.VARIANCE, ParamKind.LENGTHSCALE, ParamKind.NOISE]
    zeta = torch.tensor([[0.1, -1.0, -2.0], [1.0, 0.5, -3.0]], dtype=torch.float64)
    ours = log_density(zeta)  # type: ignore[operator]
    for z, value in zip(zeta.numpy(), ours, strict=True):
        theta = np.array([FLOORS[k] + np.logaddexp(0.0, z[i]) for i, k in enumerate(kinds)])
        s2, ell, noise = theta
        r2 = (X.numpy()[:, None, 0] - X.numpy()[None, :, 0]) ** 2
        A = s2 * np.exp(-r2 / (2 * ell**2)) + noise * np.eye(6)
        lml = scipy.stats.multivariate_normal(np.zeros(6), A).logpdf(y.numpy())
        lp = scipy.stats.gamma(2, scale=1 / 3).logpdf(s2) + scipy.stats.gamma(
            2, scale=1 / 5
        ).logpdf(ell)
        lp += scipy.stats.expon(scale=0.15**2).logpdf(noise)
        ref = lml + lp - np.logaddexp(0.0, -z).sum()
        assert float(value) == pytest.approx(ref, rel=1e-10)
    # the default start is the paper's Type-2 ML start
    start = np.array([FLOORS[k] + np.logaddexp(0.0, float(init[i])) for i, k in enumerate(kinds)])
    np.testing.assert_allclose(start, [1.0, 1.0, 0.04], rtol=1e-12)


def test_draws_in_chunks_match_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunking the draws (memory) changes neither values, gradients nor predictives."""
    X, y = make_data(12, 2, seed=4)
    batch = PaddedBatch.from_datasets([(X, y)], [DimWiseStructure.parse("SE*LIN + PER", 2)])
    values, grads = [], []
    for budget in (bayesian.DRAW_CHUNK_ELEMENTS, 2 * 144 + 1):  # one batch; chunks of 2, 2, 2, 1
        log_density, _, init = gp_log_density(batch, max_chunk_elements=budget)
        g = torch.Generator().manual_seed(1)
        noise = 0.3 * torch.randn(7, init.numel(), generator=g, dtype=torch.float64)
        zeta = (init + noise).requires_grad_(True)
        value = log_density(zeta)  # type: ignore[operator]
        (value * torch.arange(1.0, 8.0, dtype=torch.float64)).sum().backward()
        values.append(value.detach())
        grads.append(zeta.grad)
    torch.testing.assert_close(values[1], values[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-10, atol=1e-12)

    post = fit_advi_gp(
        batch,
        ADVISettings(max_iters=20, adapt_iters=5, n_elbo_samples=5),
        generator=torch.Generator().manual_seed(0),
    )
    Xq = torch.rand(5, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    whole = post.predictive_components(Xq, 9, torch.Generator().manual_seed(3))
    monkeypatch.setattr(bayesian, "DRAW_CHUNK_ELEMENTS", 12 * 17 * 2)  # chunks of 2 draws
    chunked = post.predictive_components(Xq, 9, torch.Generator().manual_seed(3))
    assert whole[0].shape == (9, 5)
    for a, b in zip(chunked, whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_mixture_moments_and_log_density() -> None:
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(4, 3, generator=g, dtype=torch.float64)
    var = 0.1 + torch.rand(4, 3, generator=g, dtype=torch.float64)
    y = torch.randn(3, generator=g, dtype=torch.float64)
    mu, v = mixture_moments(mean, var)
    m_np, v_np = mean.numpy(), var.numpy()
    np.testing.assert_allclose(mu.numpy(), m_np.mean(0))
    np.testing.assert_allclose(v.numpy(), (v_np + m_np**2).mean(0) - m_np.mean(0) ** 2)
    dens = scipy.stats.norm(m_np, np.sqrt(v_np)).pdf(y.numpy()[None]).mean(0)
    np.testing.assert_allclose(mixture_log_density(mean, var, y).numpy(), np.log(dens), rtol=1e-12)


def test_needs_a_single_pair() -> None:
    X, y = make_data(6, 1)
    batch = PaddedBatch.from_datasets([(X, y)] * 2, [DimWiseStructure.parse("SE", 1)] * 2)
    with pytest.raises(ValueError, match="one pair"):
        gp_log_density(batch)
