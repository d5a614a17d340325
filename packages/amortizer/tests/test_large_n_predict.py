"""Predictions of a result on a CG backend: against a dense float64 oracle in original
units, the mean alone without a solve, and many test points for a bounded number of
solves (no loop per point)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from amorgp.amortizer.api import Amortizer
from amorgp.lazy_kernels import DimWiseKernel
from amorgp.lazy_kernels import posterior as posterior_module
from amorgp.lazy_kernels import solvers as solvers_module


def _data(n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = np.random.default_rng(3)
    X = g.uniform(0, 10, (n, 1))
    y = 2.0 + np.sin(X[:, 0]) + 0.1 * g.standard_normal(n)
    return X, y, g.uniform(-0.5, 10.5, (m, 1))


@pytest.fixture(scope="module")
def lazy_fit(tiny_checkpoint: Path):  # type: ignore[no-untyped-def]
    amz = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", backend="cg")
    X, y, Xs = _data(1200, 3000)
    return amz.infer(X, y, "SE", refine=0), X, y, Xs


def test_cg_result_predicts_like_dense_oracle(lazy_fit) -> None:  # type: ignore[no-untyped-def]
    r, X, y, Xs = lazy_fit
    assert r.posterior.backend == "cg"
    mean, var = r.predict(Xs, include_noise=False)
    # oracle: the same hyperparameters, dense float64 Cholesky by torch.linalg
    norm = r.normalizer
    Xn, Xsn, yn = norm.transform_x(X), norm.transform_x(Xs), norm.transform_y(y)
    k = DimWiseKernel(r.kernel, r.params.to(torch.float64))
    A = k(Xn) + r.noise * torch.eye(len(y), dtype=torch.float64)
    L = torch.linalg.cholesky(A)
    Ks = k(Xn, Xsn)
    S = torch.linalg.solve_triangular(L, Ks, upper=False)
    ref_mean = (Ks.T @ torch.cholesky_solve(yn[:, None], L)[:, 0]) * norm.y_std + norm.y_mean
    ref_var = (k.diag(Xsn) - (S * S).sum(0)) * norm.y_std**2
    np.testing.assert_allclose(mean, ref_mean.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(var, ref_var.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(r.predict_mean(Xs), mean, rtol=1e-10, atol=1e-10)
    assert isinstance(r.predict_mean(torch.as_tensor(Xs)), torch.Tensor)


def test_many_points_cost_a_bounded_number_of_solves(
    lazy_fit,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, _, _, Xs = lazy_fit
    calls: list[int] = []

    def spy(real):  # type: ignore[no-untyped-def]
        def counting(matvec, B, *a, **kw):  # type: ignore[no-untyped-def]
            calls.append(B.shape[1])
            return real(matvec, B, *a, **kw)

        return counting

    monkeypatch.setattr(solvers_module, "pcg", spy(solvers_module.pcg))
    monkeypatch.setattr(posterior_module, "pcg_residual", spy(posterior_module.pcg_residual))
    r.posterior.chunk_size = 700  # 5 chunks of test points
    many = np.concatenate([Xs, Xs + 0.01])
    r.predict(many)
    r.predict_mean(many)
    r.predict(many[:10])
    assert len(calls) <= 2  # at most alpha and the variance basis, whatever the points
