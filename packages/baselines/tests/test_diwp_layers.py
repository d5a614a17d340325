"""The DIWP layers against independent oracles: direct joint inverse Wishart draws, the
dense exact GP, and closed-form Gaussian densities."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.baselines.diwp import (
    PointNoise,
    bartlett_log_prob,
    bartlett_rsample,
    conditional_dof,
    draw_point_noise,
    output_conditional,
    output_log_ratio,
    sample_conditional,
    sample_inducing_gram,
    sample_output,
)
from amorgp.baselines.gram_kernels import GramBlocks, gram_kernel
from amorgp.diff_linalg import InverseWishart
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood

F64 = torch.float64


def _kernel(n: int, seed: int = 0, lengthscale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    F = torch.randn(n, 3, generator=g, dtype=F64)
    return gram_kernel("SE").matrix(F @ F.T, lengthscale) + 0.05 * torch.eye(n, dtype=F64)


def _conditional_draws(
    K: torch.Tensor, Pi: int, delta: float, n: int, dof: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G_ti, g_tt)`` by the inducing marginal and the per-point conditional with ``dof``."""
    d = torch.tensor(delta, dtype=F64)
    G_ii = InverseWishart(d * K[:Pi, :Pi], delta + Pi + 1.0).sample((n,), generator=gen)
    Pt = K.shape[0] - Pi
    blocks = GramBlocks(
        K[:Pi, :Pi].expand(n, Pi, Pi),
        K[Pi:, :Pi].expand(n, Pt, Pi),
        K.diagonal()[Pi:].expand(n, Pt),
    )
    L = torch.linalg.cholesky(K[:Pi, :Pi]).expand(n, Pi, Pi)
    gamma = torch._standard_gamma(torch.full((n, Pt), 0.5 * dof, dtype=F64), generator=gen)
    noise = PointNoise(gamma, torch.randn(n, Pi, Pt, generator=gen, dtype=F64))
    G = sample_conditional(blocks, L, G_ii, d, noise)
    return G.ti, G.tt


def test_conditional_dof_matches_direct_joint_inverse_wishart_draws() -> None:
    """The decision on the conditional's dof: per point, delta + P_i + 2.

    Monte Carlo: moments and quantiles of ``(G_ti, g_tt)`` drawn jointly from
    ``W^-1(delta K, delta + P + 1)`` match those of the inducing marginal followed by the
    per-point conditional with ``delta + P_i + 2``; the batch-size reading
    ``delta + P_i + P_t + 1`` does not (its ``g_tt`` is too small).
    """
    Pi, Pt, delta, n = 3, 3, 8.0, 40_000
    K = _kernel(Pi + Pt, lengthscale=0.8)
    gen = torch.Generator().manual_seed(0)
    joint = InverseWishart(delta * K, delta + Pi + Pt + 1.0).sample((n,), generator=gen)
    ti_ref, tt_ref = joint[:, Pi:, :Pi], joint.diagonal(dim1=-2, dim2=-1)[:, Pi:]
    dof = float(conditional_dof(torch.tensor(delta), Pi))
    assert dof == delta + Pi + 2
    ti, tt = _conditional_draws(K, Pi, delta, n, dof, gen)
    # E[g_tt] = k_tt (the prior mean), and the laws agree
    torch.testing.assert_close(tt.mean(0), K.diagonal()[Pi:], rtol=0.02, atol=0)
    torch.testing.assert_close(tt.mean(0), tt_ref.mean(0), rtol=0.03, atol=0)
    torch.testing.assert_close(ti.mean(0), ti_ref.mean(0), rtol=0, atol=0.02)
    torch.testing.assert_close(ti.std(0), ti_ref.std(0), rtol=0.06, atol=0)
    q = torch.tensor([0.1, 0.5, 0.9], dtype=F64)
    torch.testing.assert_close(tt.quantile(q, 0), tt_ref.quantile(q, 0), rtol=0.03, atol=0)
    # the other reading of the dof fails the same comparison
    _, tt_bad = _conditional_draws(K, Pi, delta, n, delta + Pi + Pt + 1.0, gen)
    ratio = tt_bad.quantile(q, 0) / tt_ref.quantile(q, 0)
    assert bool((ratio < 0.9).all()), ratio  # three times the tolerance above
    assert bool((tt_bad.mean(0) / K.diagonal()[Pi:] < 0.9).all())


def test_inducing_layer_log_ratio_is_prior_minus_posterior_density() -> None:
    K = _kernel(4, seed=1)
    delta, gamma = torch.tensor(5.0, dtype=F64), torch.tensor(2.0, dtype=F64)
    V = 0.3 * torch.randn(4, 4, generator=torch.Generator().manual_seed(2), dtype=F64)
    G, lr = sample_inducing_gram(K, delta, gamma, V, torch.Generator().manual_seed(3), (6,))
    from scipy.stats import invwishart

    for s in range(6):
        ref = invwishart(df=10.0, scale=(5 * K).numpy()).logpdf(G[s].numpy()) - invwishart(
            df=12.0, scale=(5 * K + V @ V.T).numpy()
        ).logpdf(G[s].numpy())
        assert float(lr[s]) == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("batched", [False, True])
def test_bartlett_sample_and_densities_equal_the_inverse_wishart_and_their_gradients(
    batched: bool,
) -> None:
    """``bartlett_rsample`` draws what ``InverseWishart.rsample`` draws from the same
    generator; ``bartlett_log_prob`` (no factorisation of ``G``) equals ``log_prob`` for
    the prior and the posterior, and the log ratio's gradients in ``K``, ``V``, ``delta``
    and ``gamma`` equal those through ``rsample`` and ``log_prob``."""
    K = torch.stack([_kernel(5, seed=s) for s in range(3)]) if batched else _kernel(5, seed=4)
    V0 = 0.4 * torch.randn(5, 5, generator=torch.Generator().manual_seed(5), dtype=F64)
    leaves = [K, torch.tensor(4.0, dtype=F64), torch.tensor(1.5, dtype=F64), V0]
    shape = () if batched else (4,)

    def run(reference: bool) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        K, delta, gamma, V = (x.clone().requires_grad_(True) for x in leaves)
        prior = InverseWishart(delta * K, delta + 6.0)
        q = InverseWishart(delta * K + V @ V.mT, delta + gamma + 6.0)
        gen = torch.Generator().manual_seed(7)
        if reference:
            G = q.rsample(shape, generator=gen)
            lr = prior.log_prob(G) - q.log_prob(G)
        else:
            G, A = bartlett_rsample(q, shape, gen)
            lr = bartlett_log_prob(prior, q, A) - bartlett_log_prob(q, q, A)
            torch.testing.assert_close(bartlett_log_prob(q, q, A), q.log_prob(G))
        grads = torch.autograd.grad(
            (lr * torch.linspace(0.5, 1.5, lr.numel())).sum(), (K, V, delta, gamma)
        )
        return G.detach(), lr.detach(), grads

    G_ref, lr_ref, g_ref = run(True)
    G, lr, g = run(False)
    torch.testing.assert_close(G, G_ref)
    torch.testing.assert_close(lr, lr_ref)
    for a, b in zip(g, g_ref, strict=True):
        torch.testing.assert_close(a, b)


def test_output_term_with_inducing_points_at_the_data_is_the_exact_log_marginal_likelihood() -> (
    None
):
    """Z = X, v = y, Lambda = I / sigma^2: E[log P(y | f_t)] + log P(f_i) - log Q(f_i) is
    the exact GP log marginal likelihood for every sample of f_i."""
    n, noise = 7, 0.3
    K = _kernel(n, seed=4)
    y = torch.randn(n, generator=torch.Generator().manual_seed(5), dtype=F64)
    lam = torch.full((n,), 1.0 / noise, dtype=F64)
    S = 5
    Ks = K.expand(S, n, n)
    L = torch.linalg.cholesky(Ks)
    f, lr = sample_output(Ks, L, y, lam, torch.Generator().manual_seed(6))
    mean, var = output_conditional(GramBlocks(Ks, Ks, K.diagonal().expand(S, n)), L, f)
    ell = -0.5 * (math.log(2 * math.pi * noise) + ((y - mean) ** 2 + var) / noise).sum(-1)
    exact = dense_gp_log_marginal_likelihood(K.numpy(), y.numpy(), noise)
    np.testing.assert_allclose((ell + lr).numpy(), exact, rtol=1e-9)
    assert float(f.std(0).min()) > 1e-3  # the samples do differ


def test_output_layer_samples_the_pseudo_posterior_and_its_log_ratio() -> None:
    n = 4
    K = _kernel(n, seed=7)
    v = torch.tensor([0.5, -1.0, 0.2, 1.5], dtype=F64)
    lam = torch.tensor([2.0, 0.5, 1.0, 4.0], dtype=F64)
    S = 60_000
    Ks = K.expand(S, n, n)
    f, lr = sample_output(Ks, torch.linalg.cholesky(Ks), v, lam, torch.Generator().manual_seed(8))
    Sigma = torch.linalg.inv(torch.linalg.inv(K) + torch.diag(lam))
    mu = Sigma @ (lam * v)
    torch.testing.assert_close(f.mean(0), mu, rtol=0, atol=0.02)
    torch.testing.assert_close(torch.cov(f.T), Sigma, rtol=0, atol=0.02)
    ref = multivariate_normal(np.zeros(n), K.numpy()).logpdf(f[:3].numpy()) - multivariate_normal(
        mu.numpy(), Sigma.numpy()
    ).logpdf(f[:3].numpy())
    np.testing.assert_allclose(lr[:3].numpy(), ref, rtol=1e-9)
    np.testing.assert_allclose(output_log_ratio(K.expand(3, n, n), f[:3], v, lam), lr[:3])


def test_conditional_of_a_point_at_an_inducing_input_reproduces_the_inducing_block() -> None:
    K = _kernel(4, seed=9)
    delta = torch.tensor(6.0, dtype=F64)
    G_ii, _ = sample_inducing_gram(
        K,
        delta,
        torch.tensor(1.0, dtype=F64),
        0.1 * torch.eye(4, dtype=F64),
        torch.Generator().manual_seed(1),
        (2,),
    )
    blocks = GramBlocks(
        K.expand(2, 4, 4), K[[2, 0]].expand(2, 2, 4), K.diagonal()[[2, 0]].expand(2, 2)
    )
    noise = draw_point_noise(delta, 2, 4, 2, torch.Generator().manual_seed(2))
    G = sample_conditional(blocks, torch.linalg.cholesky(K).expand(2, 4, 4), G_ii, delta, noise)
    torch.testing.assert_close(G.ti, G_ii[:, [2, 0]], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        G.tt, G_ii.diagonal(dim1=-2, dim2=-1)[:, [2, 0]], rtol=1e-5, atol=1e-6
    )


def test_analytic_kl_is_the_expectation_of_the_single_sample_log_ratio() -> None:
    K = _kernel(3, seed=11)
    delta, gamma = torch.tensor(4.0, dtype=F64), torch.tensor(1.5, dtype=F64)
    V = 0.5 * torch.randn(3, 3, generator=torch.Generator().manual_seed(12), dtype=F64)
    gen = torch.Generator().manual_seed(13)
    _, lr = sample_inducing_gram(K, delta, gamma, V, gen, (40_000,))
    _, neg_kl = sample_inducing_gram(K, delta, gamma, V, gen, (2,), analytic_kl=True)
    assert neg_kl.shape == (2,)
    se = float(lr.std()) / math.sqrt(lr.numel())
    assert float(lr.mean()) == pytest.approx(float(neg_kl[0]), abs=4 * se)
    assert float(neg_kl[0]) < 0
