from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.baselines.gp import log_marginal_likelihood
from amorgp.baselines.svgp import (
    SVGPFit,
    SVGPSettings,
    fit_svgp_batch,
    inducing_init,
    svgp_elbo,
    svgp_predictive,
)
from amorgp.baselines.testing import dense_kernel, dense_log_marginal_likelihood, dense_predictive
from amorgp.baselines.testing import synthetic_dataset as make_data
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import PaddedBatch


def _ragged() -> tuple[PaddedBatch, torch.Tensor, torch.Tensor]:
    datasets = [make_data(10, 2, seed=1), make_data(6, 1, seed=2)]
    structs = [DimWiseStructure.parse("SE + PER", 2), DimWiseStructure.parse("SE*LIN", 1)]
    batch = PaddedBatch.from_datasets(datasets, structs)
    params = torch.ones(batch.param_shape, dtype=torch.float64)
    params[..., 1] = 0.3  # lengthscales
    params[0, :, 1, 2] = 0.8  # PER period
    noise = torch.tensor([0.1, 0.05], dtype=torch.float64)
    return batch, params, noise


def _optimal_whitened_q(
    batch: PaddedBatch, params: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal q(v) for Z = X by dense numpy algebra (exact posterior of f, whitened)."""
    B, N = batch.point_mask.shape
    m = torch.zeros(B, N, dtype=torch.float64)
    S = torch.eye(N, dtype=torch.float64).repeat(B, 1, 1)
    for b in range(B):
        n = int(batch.point_mask[b].sum())
        d = int(batch.dim_mask[b].sum())
        s = batch.structures()[b]
        X, y = batch.X[b, :n, :d].numpy(), batch.y[b, :n].numpy()
        hyper = {
            (p.dim, p.addend, p.param): float(params[b, p.dim, p.addend, p.slot])
            for p in s.param_names()
        }
        K = dense_kernel(X, X, s, hyper)
        A = K + float(noise[b]) * np.eye(n)
        mu = K @ np.linalg.solve(A, y)
        Sigma = K - K @ np.linalg.solve(A, K)
        L = np.linalg.cholesky(K)
        Li = np.linalg.inv(L)
        m[b, :n] = torch.as_tensor(Li @ mu)
        W = Li @ Sigma @ Li.T
        S[b, :n, :n] = torch.as_tensor(np.linalg.cholesky(0.5 * (W + W.T)))
    return m, S


def test_elbo_equals_exact_evidence_with_z_at_x_and_optimal_q() -> None:
    batch, params, noise = _ragged()
    m, S = _optimal_whitened_q(batch, params, noise)
    elbo = svgp_elbo(batch, params, noise, batch.X, batch.point_mask, m, S)
    exact = log_marginal_likelihood(batch, params, noise)
    torch.testing.assert_close(elbo, exact, rtol=1e-7, atol=1e-7)


def test_elbo_is_a_lower_bound_for_any_q() -> None:
    batch, params, noise = _ragged()
    g = torch.Generator().manual_seed(0)
    exact = log_marginal_likelihood(batch, params, noise)
    for _ in range(5):
        m = torch.randn(batch.point_mask.shape, generator=g, dtype=torch.float64)
        S = 0.5 * torch.randn(
            *batch.point_mask.shape, batch.point_mask.shape[1], generator=g, dtype=torch.float64
        )
        assert bool(
            (svgp_elbo(batch, params, noise, batch.X, batch.point_mask, m, S) < exact).all()
        )


def test_predictive_equals_exact_posterior_with_optimal_q() -> None:
    batch, params, noise = _ragged()
    m, S = _optimal_whitened_q(batch, params, noise)
    B = batch.batch_size
    nan = torch.zeros(B)
    fit = SVGPFit(
        params, noise, batch.X, batch.point_mask, m, S, nan, nan, nan.bool(), nan.bool(), 0.0
    )
    X_new = torch.rand(B, 5, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mean, var = svgp_predictive(fit, batch, X_new)
    for b in range(B):
        n = int(batch.point_mask[b].sum())
        d = int(batch.dim_mask[b].sum())
        s = batch.structures()[b]
        hyper = {
            (p.dim, p.addend, p.param): float(params[b, p.dim, p.addend, p.slot])
            for p in s.param_names()
        }
        m_ref, v_ref = dense_predictive(
            batch.X[b, :n, :d].numpy(),
            batch.y[b, :n].numpy(),
            X_new[b, :, :d].numpy(),
            s,
            hyper,
            float(noise[b]),
        )
        np.testing.assert_allclose(mean[b].numpy(), m_ref, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(var[b].numpy(), v_ref, rtol=1e-6, atol=1e-7)


def test_inducing_init_counts_and_kmeans_fixed_point() -> None:
    batch, _, _ = _ragged()
    Z, mask = inducing_init(batch, 0.5, torch.Generator().manual_seed(0), "kmeans", kmeans_iters=50)
    assert mask.sum(1).tolist() == [5, 3]
    for b in range(batch.batch_size):
        n, d, k = int(batch.point_mask[b].sum()), int(batch.dim_mask[b].sum()), int(mask[b].sum())
        X, C = batch.X[b, :n, :d].numpy(), Z[b, :k, :d].numpy()
        assign = ((X[:, None] - C[None]) ** 2).sum(-1).argmin(1)
        for j in range(k):
            if (assign == j).any():  # Lloyd fixed point: every centre is its cluster's mean
                np.testing.assert_allclose(C[j], X[assign == j].mean(0), atol=1e-12)
    Zr, _ = inducing_init(batch, 0.5, torch.Generator().manual_seed(0), "random")
    for b in range(batch.batch_size):  # a random subset of the data points
        n = int(batch.point_mask[b].sum())
        for z in Zr[b, : int(mask[b].sum())]:
            assert bool(((batch.X[b, :n] - z).abs().sum(1) < 1e-15).any())


def test_fit_improves_the_bound_and_stays_below_the_evidence() -> None:
    X, y = make_data(20, 1, seed=3)
    batch = PaddedBatch.from_datasets(
        [(X, y)] * 2, [DimWiseStructure.parse(k, 1) for k in ("SE", "SE + LIN")]
    )
    fit = fit_svgp_batch(
        batch, SVGPSettings(max_iters=150), generator=torch.Generator().manual_seed(0)
    )
    assert not bool(fit.failed.any())
    start = fit_svgp_batch(
        batch, SVGPSettings(max_iters=1), generator=torch.Generator().manual_seed(0)
    )
    assert bool((fit.elbo > start.elbo).all())
    exact = log_marginal_likelihood(batch, fit.params, fit.noise)
    assert bool((fit.elbo <= exact + 1e-8).all())
    s = batch.structures()[0]
    hyper = {
        (p.dim, p.addend, p.param): float(fit.params[0, p.dim, p.addend, p.slot])
        for p in s.param_names()
    }
    assert float(exact[0]) == pytest.approx(
        dense_log_marginal_likelihood(X.numpy(), y.numpy(), s, hyper, float(fit.noise[0])), rel=1e-9
    )


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="inducing_fraction"):
        SVGPSettings(inducing_fraction=0.0)
    with pytest.raises(ValueError, match="init"):
        SVGPSettings(init="grid")  # type: ignore[arg-type]
