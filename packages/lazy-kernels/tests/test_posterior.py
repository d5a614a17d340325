"""Posterior against a dense float64 numpy/scipy oracle; one factorisation serves every query."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood
from amorgp.kernel_grammar import DimWiseStructure, base_symbol
from amorgp.lazy_kernels import DimWiseKernel, ExpressionKernel, Posterior
from amorgp.lazy_kernels import solvers as solvers_module
from amorgp.lazy_kernels.testing import check_same_predictions

STRUCTURE = DimWiseStructure.parse("(SE + PER)@0 * LIN@1")
PARAMS = [[[1.2, 0.3, 0.0], [0.4, 0.6, 0.7]], [[0.8, 0.5, 1.0], [1.0, 1.0, 1.0]]]


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def _kernel(requires_grad: bool = False) -> DimWiseKernel:
    params = torch.tensor(PARAMS, dtype=torch.float64, requires_grad=requires_grad)
    return DimWiseKernel(STRUCTURE, params)


def _np_kernel(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Numpy oracle of STRUCTURE with PARAMS from the registry's reference formulas."""
    out = np.ones((A.shape[0], B.shape[0]))
    for d, addends in enumerate(STRUCTURE.dims):
        acc = np.zeros_like(out)
        for a, name in enumerate(addends):
            sym = base_symbol(name)
            p = dict(zip(sym.param_names, PARAMS[d][a]))
            acc += sym.reference(A[:, d], B[:, d], p)
        out *= acc
    return out


def _oracle(X: torch.Tensor, y: torch.Tensor, Xs: torch.Tensor, noise: float) -> dict:
    Xn, yn, Xsn = X.numpy(), y.numpy(), Xs.numpy()
    A = _np_kernel(Xn, Xn) + noise * np.eye(len(yn))
    c = scipy.linalg.cho_factor(A, lower=True)
    alpha = scipy.linalg.cho_solve(c, yn)
    Ks = _np_kernel(Xn, Xsn)
    cov = _np_kernel(Xsn, Xsn) - Ks.T @ scipy.linalg.cho_solve(c, Ks)
    lml = dense_gp_log_marginal_likelihood(A, yn, 0.0)  # A holds the noise already
    return {"lml": lml, "mean": Ks.T @ alpha, "cov": cov, "var": np.diag(cov)}


@pytest.mark.parametrize("method", ["cholesky", "cg"])
def test_values_match_dense_oracle(method: str) -> None:
    X, y = _data(60, 0)
    Xs, _ = _data(9, 1)
    ref = _oracle(X, y, Xs, 0.05)
    post = Posterior(_kernel().operator(X), y, 0.05, method=method, n_probes=200)  # type: ignore[arg-type]
    rtol = 1e-10 if method == "cholesky" else 1e-6
    np.testing.assert_allclose(post.mean(Xs).numpy(), ref["mean"], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(post.variance(Xs).numpy(), ref["var"], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(post.covariance(Xs).numpy(), ref["cov"], rtol=rtol, atol=rtol)
    lml = float(post.log_marginal_likelihood())
    if method == "cholesky":
        assert lml == pytest.approx(ref["lml"], rel=1e-11)
    else:  # stochastic log-determinant (SLQ)
        assert lml == pytest.approx(ref["lml"], rel=2e-3)
    assert post.factorizations == 1


def test_expression_kernel_operator_matches_dimwise() -> None:
    """The same kernel as a general expression (one parameter set per atom)."""
    X, y = _data(40, 2)
    Xs, _ = _data(6, 3)
    expr = ExpressionKernel(
        "(SE@0 + PER@0) * LIN@1",
        [
            {"variance": 1.2, "lengthscale": 0.3},
            {"variance": 0.4, "lengthscale": 0.6, "period": 0.7},
            {"variance": 0.8, "offset": 0.5},
        ],
    )
    ref = _oracle(X, y, Xs, 0.1)
    post = Posterior(expr.operator(X), y, 0.1)
    mean, var = post.predict(Xs)
    assert var is not None
    np.testing.assert_allclose(mean.numpy(), ref["mean"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), ref["var"], rtol=1e-9, atol=1e-12)
    assert float(post.log_marginal_likelihood()) == pytest.approx(ref["lml"], rel=1e-11)


@pytest.mark.parametrize("method", ["cholesky", "cg"])
def test_chunked_equals_unchunked(method: str) -> None:
    X, y = _data(50, 4)
    Xs, _ = _data(23, 5)
    whole = Posterior(_kernel().operator(X), y, 0.05, method=method, chunk_size=10**6)  # type: ignore[arg-type]
    chunked = Posterior(_kernel().operator(X), y, 0.05, method=method, chunk_size=4)  # type: ignore[arg-type]
    check_same_predictions(
        whole, chunked, Xs, rtol=1e-12, atol=1e-13, var_rtol=1e-9, var_atol=1e-12, covariance=True
    )
    assert chunked.factorizations == 1


def test_chunk_size_follows_memory_budget() -> None:
    X, y = _data(100, 6)
    op = _kernel().operator(X)
    post = Posterior(op, y, 0.1, memory_budget=100 * (op.bytes_per_entry + 16) * 7)
    assert post.chunk_size == 7


def test_one_factorisation_across_lml_and_predictions(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = solvers_module.robust_cholesky

    def counting(A, **kw):  # type: ignore[no-untyped-def]
        calls.append(A.shape[-1])
        return real(A, **kw)

    monkeypatch.setattr(solvers_module, "robust_cholesky", counting)
    X, y = _data(80, 7)
    Xs, _ = _data(30, 8)
    k = _kernel(requires_grad=True)
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    post = Posterior.from_kernel(
        k, X, y, noise, backend="cholesky", chunk_budget=1.0
    )  # one test point a chunk
    lml = post.log_marginal_likelihood()
    for _ in range(3):
        post.predict(Xs)
    post.sample(Xs[:5], 3, torch.Generator().manual_seed(0))
    post.covariance(Xs[:4])
    post.log_marginal_likelihood()
    assert post.chunk_size == 1
    assert calls == [80]
    assert post.factorizations == 1
    # gradients of the cached-factor LML equal those of the dense formula
    grads = torch.autograd.grad(lml, [k.params, noise])
    ref = dense_gp_log_marginal_likelihood(k(X), y, noise)
    for a, b in zip(grads, torch.autograd.grad(ref, [k.params, noise])):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_gradient_after_predictions_needs_no_new_factor() -> None:
    """A factor built by a prediction (no autograd) also serves a differentiable LML."""
    X, y = _data(40, 9)
    k = _kernel(requires_grad=True)
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    gp = Posterior.from_kernel(k, X, y, noise, backend="cholesky")
    with torch.no_grad():
        gp.predict(X[:3])
    lml = gp.log_marginal_likelihood()
    ref = dense_gp_log_marginal_likelihood(k(X), y, noise)
    for a, b in zip(
        torch.autograd.grad(lml, [k.params, noise]), torch.autograd.grad(ref, [k.params, noise])
    ):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    assert gp.factorizations == 1


def test_cg_builds_one_preconditioner(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = solvers_module.pivoted_cholesky

    def counting(*a, **kw):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(solvers_module, "pivoted_cholesky", counting)
    X, y = _data(120, 10)
    gp = Posterior.from_kernel(_kernel(), X, y, 0.05, backend="cg", chunk_budget=1.0)
    gp.log_marginal_likelihood()
    gp.predict(X[:7])
    gp.predict(X[:3], return_var=False)
    gp.log_marginal_likelihood()
    assert len(calls) == 1
    assert gp.factorizations == 1


def test_samples_match_predictive_moments() -> None:
    X, y = _data(30, 12)
    Xs, _ = _data(4, 13)
    post = Posterior(_kernel().operator(X), y, 0.05)
    n = 40_000
    s = post.sample(Xs, n, torch.Generator().manual_seed(0))
    assert s.shape == (n, 4)
    mean, cov = post.mean(Xs), post.covariance(Xs)
    sd = cov.diagonal().sqrt()
    # Monte Carlo: standard error of the mean sd / sqrt(n); of the covariance ~ sd_i sd_j / sqrt(n)
    assert bool(((s.mean(0) - mean).abs() <= 5 * sd / math.sqrt(n) + 1e-12).all())
    emp = torch.cov(s.T)
    tol = 6 * (sd[:, None] * sd[None, :] + cov.abs()) / math.sqrt(n) + 1e-12
    assert bool(((emp - cov).abs() <= tol).all())
    again = post.sample(Xs, 5, torch.Generator().manual_seed(1))
    torch.testing.assert_close(again, post.sample(Xs, 5, torch.Generator().manual_seed(1)))


def test_variance_never_negative(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the training inputs with almost no noise the exact variance is ~1e-6; CG solves
    cut off after 10 iterations may overshoot ``K_*^T A^{-1} K_*`` there, so a raw
    difference may be negative: the posterior clamps it to 0 (and the Cholesky path stays
    >= 0 as well)."""
    g = torch.Generator().manual_seed(14)
    X = torch.rand(200, 1, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0])
    k = DimWiseKernel("SE", {"d0.0.SE.variance": 1.0, "d0.0.SE.lengthscale": 0.2}, n_dims=1)
    loose = Posterior(
        k.operator(X), y, 1e-6, method="cg", cg_tol=1e-12, max_cg_iter=10, precond_rank=3
    )
    var = loose.variance(X[:50])
    assert bool((var >= 0).all())
    with monkeypatch.context() as m:  # a quadratic form above k_** is clamped to 0
        m.setattr(Posterior, "_cg_quad", lambda self, Ks, kss: kss + 1e-9)
        assert bool((loose.variance(X[:50]) == 0).all())
    exact = Posterior(k.operator(X), y, 1e-6).variance(X[:50])
    assert bool((exact > 0).all())
    cov = Posterior(k.operator(X), y, 1e-6).covariance(X[:10])
    torch.testing.assert_close(cov, cov.T, rtol=0, atol=0)
    samples = Posterior(k.operator(X), y, 1e-6).sample(X[:10], 4, torch.Generator())
    assert bool(torch.isfinite(samples).all())  # nearly singular covariance


def test_rejects_bad_input() -> None:
    X, y = _data(10, 15)
    op = _kernel().operator(X)
    with pytest.raises(ValueError, match="symmetric"):
        Posterior(_kernel().operator(X, X[:3]), y, 0.1)
    with pytest.raises(ValueError, match="y must have shape"):
        Posterior(op, y[:4], 0.1)
    with pytest.raises(ValueError, match="noise"):
        Posterior(op, y, -1.0)
    with pytest.raises(ValueError, match="method"):
        Posterior(op, y, 0.1, method="lu")  # type: ignore[arg-type]
    post = Posterior(op, y, 0.1)
    with pytest.raises(ValueError, match="X_test must have shape"):
        post.mean(X[:, :1])
    bad = X[:2].clone()
    bad[0, 1] = float("inf")
    with pytest.raises(ValueError, match="NaN or infinite"):
        post.variance(bad)
    with pytest.raises(ValueError, match="positive integer"):
        post.sample(X[:2], 0, torch.Generator())
