"""Predictions of the CG solvers at moderate n against a dense float64 oracle, and the
number of solves a prediction costs (independent of the number of test points)."""

from __future__ import annotations

import pytest
import torch

from amorgp.lazy_kernels import DimWiseKernel, Posterior, keops_usable
from amorgp.lazy_kernels import posterior as posterior_module
from amorgp.lazy_kernels import solvers as solvers_module

NOISE = 0.01


def _problem(n: int, m: int, lengthscale: float = 0.3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    X = 4 * torch.rand(n, 1, generator=g, dtype=torch.float64) - 2
    y = torch.sin(3 * X[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    Xs = 4.4 * torch.rand(m, 1, generator=g, dtype=torch.float64) - 2.2  # some outside
    return X, y, Xs


def _kernel(lengthscale: float = 0.3) -> DimWiseKernel:
    params = {"d0.0.SE.variance": 1.3, "d0.0.SE.lengthscale": lengthscale}
    return DimWiseKernel("SE", params, n_dims=1)


def _oracle(
    X: torch.Tensor, y: torch.Tensor, Xs: torch.Tensor, ls: float
) -> tuple[torch.Tensor, ...]:
    """Dense float64 mean and latent variance by torch.linalg (Cholesky of K + s^2 I)."""
    d2 = (X[:, :1] - X[:, 0][None, :]) ** 2
    K = 1.3 * torch.exp(-0.5 * d2 / ls**2)
    Ks = 1.3 * torch.exp(-0.5 * (X[:, :1] - Xs[:, 0][None, :]) ** 2 / ls**2)  # (n, m)
    L = torch.linalg.cholesky(K + NOISE * torch.eye(X.shape[0], dtype=torch.float64))
    mean = Ks.T @ torch.cholesky_solve(y[:, None], L)[:, 0]
    S = torch.linalg.solve_triangular(L, Ks, upper=False)
    return mean, 1.3 - (S * S).sum(0)


LAZY = [
    pytest.param(
        "keops",
        3000,
        marks=pytest.mark.skipif(not keops_usable("cpu"), reason="KeOps is not usable here"),
    ),
    pytest.param("block", 2000),  # the torch lazy operator: no compiler, slower matvecs
    pytest.param("cg", 3000),
]


@pytest.mark.parametrize(("backend", "n"), LAZY)
def test_lazy_predictions_match_dense_oracle(backend: str, n: int) -> None:
    X, y, Xs = _problem(n, 400)
    post = Posterior.from_kernel(_kernel(), X, y, NOISE, backend=backend, precond_rank=64)
    assert post.backend == backend
    mean, var = post.predict(Xs)
    assert var is not None
    ref_mean, ref_var = _oracle(X, y, Xs, 0.3)
    # the mean: alpha solved to cg_tol = 1e-8
    torch.testing.assert_close(mean, ref_mean, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(post.mean(Xs), ref_mean, rtol=1e-6, atol=1e-7)
    # the variance: relative to the smallest one (~6e-5), CG's tolerance allows ~1e-7
    assert float(ref_var.min()) > 1e-5
    torch.testing.assert_close(var, ref_var, rtol=1e-6, atol=1e-10)


def test_variance_outside_the_preconditioner_range_is_solved_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank-3 preconditioner leaves most of each cross-covariance column outside its
    range: those columns get their remainder from one batched CG solve, still exact."""
    solved: list[int] = []
    real = solvers_module.CGSolver.quad_factors

    def counting(self, Ks):  # type: ignore[no-untyped-def]
        solved.append(Ks.shape[1])
        return real(self, Ks)

    monkeypatch.setattr(solvers_module.CGSolver, "quad_factors", counting)
    X, y, Xs = _problem(400, 100, lengthscale=0.1)
    post = Posterior.from_kernel(
        _kernel(0.1), X, y, NOISE, backend="cg", precond_rank=3, cg_tol=1e-10
    )
    mean, var = post.predict(Xs)
    assert len(solved) == 1
    assert solved[0] > 50
    ref_mean, ref_var = _oracle(X, y, Xs, 0.1)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(var, ref_var, rtol=1e-6, atol=1e-10)


def test_many_test_points_cost_a_bounded_number_of_solves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5000 test points in 10 chunks: one solve for alpha, one batched solve for the
    variance basis, none per chunk or per point; predicting again solves nothing."""
    calls: list[int] = []  # right-hand sides of each CG solve

    def spy(real):  # type: ignore[no-untyped-def]
        def counting(matvec, B, *a, **kw):  # type: ignore[no-untyped-def]
            calls.append(B.shape[1])
            return real(matvec, B, *a, **kw)

        return counting

    monkeypatch.setattr(solvers_module, "pcg", spy(solvers_module.pcg))
    monkeypatch.setattr(posterior_module, "pcg_residual", spy(posterior_module.pcg_residual))
    X, y, Xs = _problem(1500, 5000)
    post = Posterior.from_kernel(_kernel(), X, y, NOISE, backend="cg", precond_rank=64)
    post.chunk_size = 500
    mean, var = post.predict(Xs)
    assert var is not None
    assert mean.shape == var.shape == (5000,)
    rank = post.solver.preconditioner().L.shape[1]  # type: ignore[attr-defined]
    assert calls == [1 + rank]  # alpha and the basis W = A^{-1} Q in one CG run
    post.predict(Xs[:1234])
    post.mean(Xs)
    assert calls == [1 + rank]
    again = Posterior.from_kernel(_kernel(), X, y, NOISE, backend="cg", precond_rank=64)
    again.mean(Xs[:3])  # alpha first, then the basis alone
    again.predict(Xs[:3])
    assert calls == [1 + rank, 1, rank]
    torch.testing.assert_close(again.predict(Xs)[1], var, rtol=1e-9, atol=1e-12)
    ref_mean, ref_var = _oracle(X, y, Xs[:50], 0.3)
    torch.testing.assert_close(mean[:50], ref_mean, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(var[:50], ref_var, rtol=1e-6, atol=1e-10)


def test_basis_is_dropped_when_pickled() -> None:
    import pickle

    X, y, Xs = _problem(300, 20)
    post = Posterior.from_kernel(_kernel(), X, y, NOISE, backend="cg")
    _, var = post.predict(Xs)
    again = pickle.loads(pickle.dumps(post))
    assert again._basis is None
    torch.testing.assert_close(again.predict(Xs)[1], var, rtol=1e-9, atol=1e-12)
