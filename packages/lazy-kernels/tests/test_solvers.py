"""The posterior's solver types against a dense float64 scipy oracle, and the one place a
backend name becomes a type."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.linalg
import torch

from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import (
    CHOLESKY_MAX_N,
    BlockKernelOperator,
    BlockSolver,
    CGSolver,
    CholeskySolver,
    DimWiseKernel,
    KeOpsSolver,
    LazyCGSolver,
    Posterior,
    Solver,
    backend_plan,
    plan_solver,
    solver_type,
)
from amorgp.lazy_kernels.solvers import SOLVERS

STRUCTURE = DimWiseStructure.parse("SE@0 * SE@1")
VARIANCE = (1.3, 0.8)
LENGTHSCALE = (0.35, 0.6)
NOISE = 0.04


def _kernel() -> DimWiseKernel:
    params = torch.tensor([[[VARIANCE[d], LENGTHSCALE[d]]] for d in range(2)], dtype=torch.float64)
    return DimWiseKernel(STRUCTURE, params)


def _se(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The closed form: ``prod_d s_d^2 exp(-(a_d - b_d)^2 / (2 l_d^2))``."""
    out = np.ones((A.shape[0], B.shape[0]))
    for d in range(2):
        r2 = (A[:, d, None] - B[None, :, d]) ** 2
        out *= VARIANCE[d] * np.exp(-r2 / (2 * LENGTHSCALE[d] ** 2))
    return out


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(5 * X[:, 0]) + X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def _oracle(X: torch.Tensor, y: torch.Tensor, Xs: torch.Tensor) -> dict[str, np.ndarray]:
    Xn, Xsn = X.numpy(), Xs.numpy()
    A = _se(Xn, Xn) + NOISE * np.eye(len(Xn))
    c = scipy.linalg.cho_factor(A, lower=True)
    Ks = _se(Xn, Xsn)
    cov = _se(Xsn, Xsn) - Ks.T @ scipy.linalg.cho_solve(c, Ks)
    logdet = 2.0 * np.log(np.diag(c[0])).sum()
    alpha = scipy.linalg.cho_solve(c, y.numpy())
    lml = -0.5 * y.numpy() @ alpha - 0.5 * logdet - 0.5 * len(Xn) * np.log(2 * np.pi)
    return {"A": A, "alpha": alpha, "logdet": logdet, "lml": lml, "mean": Ks.T @ alpha, "cov": cov}


def _posterior(kind: type[Solver], X: torch.Tensor, y: torch.Tensor) -> Posterior:
    opts = {"n_probes": 300, "precond_rank": 20, "cg_tol": 1e-11}
    if issubclass(kind, LazyCGSolver):  # the lazy path builds its own operator
        return Posterior.from_kernel(_kernel(), X, y, NOISE, backend=kind, **opts)  # type: ignore[arg-type]
    return Posterior(_kernel().operator(X), y, NOISE, method=kind, **opts)  # type: ignore[arg-type]


def test_the_kernel_is_the_closed_form() -> None:
    X, _ = _data(20, 0)
    np.testing.assert_allclose(_kernel()(X).numpy(), _se(X.numpy(), X.numpy()), rtol=1e-13)


@pytest.mark.parametrize("kind", [CholeskySolver, CGSolver, BlockSolver])
def test_each_solver_matches_the_dense_oracle(kind: type[Solver]) -> None:
    """solve, log-determinant, alpha, log marginal likelihood, predictive mean, variance
    and covariance of every solver type against scipy's dense float64 Cholesky."""
    X, y = _data(70, 1)
    Xs, _ = _data(11, 2)
    ref = _oracle(X, y, Xs)
    post = _posterior(kind, X, y)
    assert type(post.solver) is kind
    exact = kind is CholeskySolver
    tol = 1e-10 if exact else 1e-7
    B = torch.randn(70, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    np.testing.assert_allclose(
        post.solver.solve(B).numpy(), np.linalg.solve(ref["A"], B.numpy()), rtol=tol, atol=tol
    )
    np.testing.assert_allclose(post.alpha().numpy(), ref["alpha"], rtol=tol, atol=tol)
    logdet = float(post.solver.logdet())
    lml = float(post.log_marginal_likelihood())
    if exact:
        assert logdet == pytest.approx(ref["logdet"], rel=1e-12)
        assert lml == pytest.approx(ref["lml"], rel=1e-12)
    else:  # stochastic Lanczos quadrature, 300 probes
        assert logdet == pytest.approx(ref["logdet"], rel=2e-2, abs=0.5)
        assert lml == pytest.approx(ref["lml"], rel=2e-2, abs=0.5)
    mean, var = post.predict(Xs)
    assert var is not None
    np.testing.assert_allclose(mean.numpy(), ref["mean"], rtol=tol, atol=tol)
    np.testing.assert_allclose(var.numpy(), np.diag(ref["cov"]), rtol=tol, atol=tol)
    np.testing.assert_allclose(post.covariance(Xs).numpy(), ref["cov"], rtol=tol, atol=tol)
    assert post.factorizations == 1
    assert post.factored is exact


def test_cg_matches_cholesky() -> None:
    X, y = _data(90, 4)
    Xs, _ = _data(13, 5)
    chol, cg = _posterior(CholeskySolver, X, y), _posterior(CGSolver, X, y)
    for a, b in zip(chol.predict(Xs), cg.predict(Xs), strict=True):
        assert a is not None
        assert b is not None
        torch.testing.assert_close(b, a, rtol=1e-7, atol=1e-8)
    assert cg.last_cg_iterations > 0
    assert chol.last_cg_iterations == 0


def test_names_map_once_to_solver_types() -> None:
    assert {
        "cholesky": CholeskySolver,
        "cg": CGSolver,
        "keops": KeOpsSolver,
        "block": BlockSolver,
    } == SOLVERS
    for name, kind in SOLVERS.items():
        assert solver_type(name) is kind
        assert kind.backend == name
        assert solver_type(kind) is kind
    assert plan_solver(100).solver is CholeskySolver
    assert plan_solver(CHOLESKY_MAX_N + 1).solver is CGSolver
    assert plan_solver(100_000, keops=False).solver is BlockSolver
    assert plan_solver(100_000, keops=True).solver is KeOpsSolver
    X, y = _data(30, 6)
    op = _kernel().operator(X)
    assert isinstance(Posterior(op, y, NOISE, method="cg").solver, CGSolver)
    assert Posterior(op, y, NOISE).method == "cholesky"
    gp = Posterior.from_kernel(_kernel(), X, y, NOISE, backend="cg")
    assert type(gp.solver) is CGSolver
    assert gp.backend == "cg"
    kind, block = backend_plan(_kernel(), X, "block", memory_budget=2**16)
    assert kind is BlockSolver
    assert isinstance(block, BlockKernelOperator)
    assert backend_plan(op, X, "auto")[0] is CholeskySolver
    assert Posterior.from_kernel(_kernel(), X, y, NOISE).backend == "cholesky"


@pytest.mark.parametrize("bad", ["lu", "CG", 3, Solver, int])
def test_an_unknown_solver_is_a_one_line_option_error(bad: object) -> None:
    with pytest.raises(OptionError, match="unknown solver") as err:
        solver_type(bad)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
    X, y = _data(10, 7)
    with pytest.raises(OptionError, match="unknown method"):
        Posterior(_kernel().operator(X), y, NOISE, method=bad)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="unknown backend"):
        Posterior.from_kernel(_kernel(), X, y, NOISE, backend=bad)  # type: ignore[arg-type]


def test_a_given_operator_takes_no_lazy_backend() -> None:
    X, y = _data(10, 8)
    with pytest.raises(OptionError, match="unknown method 'block'"):
        Posterior(_kernel().operator(X), y, NOISE, method="block")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="backend picks the solver"):
        Posterior.from_kernel(_kernel().operator(X), X, y, NOISE, backend=BlockSolver)


def test_from_cholesky_adopts_a_factor_and_pickles_without_it() -> None:
    """A factor computed elsewhere (scipy) is adopted, not recomputed; pickling drops it
    (rebuilt on first use) but keeps the likelihood."""
    X, y = _data(50, 9)
    Xs, _ = _data(7, 10)
    ref = _oracle(X, y, Xs)
    L = torch.as_tensor(np.linalg.cholesky(ref["A"]))
    alpha = torch.as_tensor(ref["alpha"])
    post = Posterior.from_cholesky(
        _kernel().operator(X), y, NOISE, L, alpha, log_marginal_likelihood=ref["lml"]
    )
    assert post.factored
    assert post.factorizations == 1
    assert float(post.log_marginal_likelihood()) == ref["lml"]
    mean, var = post.predict(Xs)
    assert var is not None
    np.testing.assert_allclose(mean.numpy(), ref["mean"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), np.diag(ref["cov"]), rtol=1e-10, atol=1e-12)
    assert post.factorizations == 1  # no second factorisation
    back = pickle.loads(pickle.dumps(post))
    assert not back.factored
    assert back.factorizations == 0
    assert float(back.log_marginal_likelihood()) == ref["lml"]
    mean2, var2 = back.predict(Xs)
    torch.testing.assert_close(mean2, mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(var2, var, rtol=1e-10, atol=1e-12)
    assert back.factorizations == 1


def test_a_plan_is_made_once_and_read_as_is() -> None:
    """A given plan is used as it is (its budgets too): no second choice; a forced backend
    is planned without the memory rule; names outside the registry are refused."""
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import DimWiseKernel, Posterior, SolverPlan

    X = torch.linspace(0.0, 1.0, 30, dtype=torch.float64)[:, None]
    y = torch.sin(6.0 * X[:, 0])
    kernel = DimWiseKernel(DimWiseStructure.coerce("SE", 1), torch.tensor([[[1.0, 0.3]]]))
    plan = SolverPlan(CGSolver, memory_budget=2**20, chunk_bytes=2**16)
    post = Posterior.from_kernel(kernel, X, y, 0.01, backend=plan)
    assert post.backend == "cg"
    assert plan_solver(30, backend="block").solver is BlockSolver  # forced, not the rule
    assert plan_solver(30).dense
    assert not plan_solver(30).lazy
    assert plan_solver(10**6, keops=False).lazy
    dense = Posterior.from_kernel(kernel, X, y, 0.01, backend="cholesky")
    mean, var = post.predict(X[:5])
    ref_mean, ref_var = dense.predict(X[:5])
    torch.testing.assert_close(mean, ref_mean, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(var, ref_var, rtol=1e-5, atol=1e-8)
    with pytest.raises(OptionError, match="unknown backend 'fast'; use auto, cholesky"):
        plan_solver(30, backend="fast")
