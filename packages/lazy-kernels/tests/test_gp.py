"""Posterior.from_kernel, PCG, pivoted Cholesky and SLQ against dense torch.linalg oracles."""

from __future__ import annotations

import pytest
import torch

from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood, dense_gp_predictive
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import (
    CHOLESKY_MAX_N,
    EVALUATOR_MATRICES_BLOCKWISE,
    EVALUATOR_MATRICES_NO_GRAPH,
    EVALUATOR_MATRICES_NO_GRAPH_DEVICE,
    EVALUATOR_MATRICES_PER_TERM,
    DimWiseKernel,
    PivotedCholeskyPreconditioner,
    Posterior,
    choose_backend,
    pcg,
    pivoted_cholesky,
    slq_logdet,
)
from amorgp.lazy_kernels.keops import keops_available
from amorgp.lazy_kernels.testing import check_same_predictions


def _data(n: int, seed: int, d: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) * X[:, -1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def _kernel() -> tuple[DimWiseKernel, torch.Tensor]:
    params = torch.tensor(
        [[[1.2, 0.3, 0.0], [0.4, 0.6, 0.7]], [[0.8, 0.5, 1.0], [1.0, 1.0, 1.0]]],
        dtype=torch.float64,
        requires_grad=True,
    )
    # (SE + PER)@0 * LIN@1; unused slots are ignored
    return DimWiseKernel(DimWiseStructure.parse("(SE + PER)@0 * LIN@1"), params), params


def _spd(n: int, seed: int) -> torch.Tensor:
    X, _ = _data(n, seed, d=1)
    return torch.exp(-((X - X.T) ** 2) / (2 * 0.2**2))


def test_pivoted_cholesky_full_rank_reproduces_matrix() -> None:
    K = _spd(30, 0) + 1e-3 * torch.eye(30, dtype=torch.float64)
    L = pivoted_cholesky(torch.diagonal(K), lambda i: K[:, i], rank=30, tol=0.0)
    torch.testing.assert_close(L @ L.T, K, rtol=1e-10, atol=1e-10)


def test_preconditioner_solve_and_logdet() -> None:
    K = _spd(40, 1)
    L = pivoted_cholesky(torch.diagonal(K), lambda i: K[:, i], rank=5)
    noise = torch.tensor(0.1, dtype=torch.float64)
    P = PivotedCholeskyPreconditioner(L, noise)
    dense = L @ L.T + noise * torch.eye(40, dtype=torch.float64)
    V = torch.randn(40, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(P.solve(V), torch.linalg.solve(dense, V), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(P.logdet(), torch.linalg.slogdet(dense)[1], rtol=1e-10, atol=1e-10)


def test_preconditioner_with_residual_diagonal_against_dense() -> None:
    K = _spd(40, 5)
    L = pivoted_cholesky(torch.diagonal(K), lambda i: K[:, i], rank=6)
    residual = torch.diagonal(K) - (L * L).sum(1)
    noise = torch.tensor(0.01, dtype=torch.float64)
    P = PivotedCholeskyPreconditioner(L, noise, residual)
    dense = L @ L.T + torch.diag(residual.clamp_min(0) + noise)
    V = torch.randn(40, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(P.solve(V), torch.linalg.solve(dense, V), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(P.logdet(), torch.linalg.slogdet(dense)[1], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(torch.diagonal(dense), P.diagonal + (L * L).sum(1))
    Z = P.sample(40_000, torch.Generator().manual_seed(2))
    torch.testing.assert_close(Z @ Z.T / Z.shape[1], dense, rtol=0, atol=0.05 * float(dense.max()))


def test_residual_diagonal_brings_the_preconditioned_matrix_near_identity() -> None:
    # slowly decaying spectrum (d = 8, short lengthscales) and small noise: sigma^2 alone
    # leaves the unexplained directions scaled by lambda / sigma^2; the residual diagonal
    # shrinks the spread of log eig(P^-1 A), which sets the SLQ variance and CG's pace
    g = torch.Generator().manual_seed(1)
    s = DimWiseStructure.coerce("SE*LIN + PER", 8)
    params = 0.5 + torch.rand(8, s.max_addends, 4, generator=g, dtype=torch.float64)
    X = torch.rand(300, 8, generator=g, dtype=torch.float64)
    K = DimWiseKernel(s, params)(X)
    noise = torch.tensor(0.05, dtype=torch.float64)
    A = K + noise * torch.eye(300, dtype=torch.float64)
    L = pivoted_cholesky(torch.diagonal(K), lambda i: K[:, i], rank=64)

    def spread(P: PivotedCholeskyPreconditioner) -> float:
        C = torch.linalg.cholesky(L @ L.T + torch.diag(P.diagonal))
        M = torch.linalg.solve_triangular(C, A, upper=False)
        M = torch.linalg.solve_triangular(C, M.T, upper=False)
        return float(torch.linalg.eigvalsh((M + M.T) / 2).log().norm())

    plain = spread(PivotedCholeskyPreconditioner(L, noise))
    corrected = spread(PivotedCholeskyPreconditioner(L, noise, torch.diagonal(K) - (L * L).sum(1)))
    assert corrected < 0.25 * plain


def test_pcg_solves_and_slq_estimates_logdet() -> None:
    n = 60
    A = _spd(n, 2) + 0.05 * torch.eye(n, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    P = PivotedCholeskyPreconditioner(
        pivoted_cholesky(
            torch.diagonal(A) - 0.05, lambda i: A[:, i] - 0.05 * (torch.arange(n) == i), rank=4
        ),
        torch.tensor(0.05, dtype=torch.float64),
    )
    Z = P.sample(400, g)
    X, alphas, betas, _ = pcg(lambda V: A @ V, Z, P.solve, tol=1e-12, max_iter=200)
    torch.testing.assert_close(X, torch.linalg.solve(A, Z), rtol=1e-7, atol=1e-8)
    weights = (Z * P.solve(Z)).sum(0)
    est = P.logdet() + slq_logdet(alphas, betas, weights)
    exact = torch.linalg.slogdet(A)[1]
    assert abs(float(est - exact)) < 0.02 * abs(float(exact))


def test_cholesky_backend_matches_dense_oracle() -> None:
    X, y = _data(50, 4)
    k, params = _kernel()
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    gp = Posterior.from_kernel(k, X, y, noise, backend="cholesky")
    lml = gp.log_marginal_likelihood()
    g1 = torch.autograd.grad(lml, [params, noise])
    ref = dense_gp_log_marginal_likelihood(k(X), y, noise)
    g2 = torch.autograd.grad(ref, [params, noise])
    torch.testing.assert_close(lml, ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-8)
    Xt, _ = _data(7, 5)
    mean, var = gp.predict(Xt)
    with torch.no_grad():
        ref_mean, ref_var = dense_gp_predictive(
            k(X), k(X, Xt), k.diag(Xt), y, noise, include_noise=False
        )
    torch.testing.assert_close(mean, ref_mean, rtol=1e-9, atol=1e-10)
    assert var is not None
    torch.testing.assert_close(var, ref_var.clamp_min(0), rtol=1e-7, atol=1e-10)


def test_cg_backend_agrees_with_cholesky() -> None:
    X, y = _data(300, 6)
    k, params = _kernel()
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    chol = Posterior.from_kernel(k, X, y, noise, backend="cholesky")
    cg = Posterior.from_kernel(
        k,
        X,
        y,
        noise,
        backend="cg",
        n_probes=64,
        precond_rank=32,
        generator=torch.Generator().manual_seed(0),
    )
    l1, l2 = chol.log_marginal_likelihood(), cg.log_marginal_likelihood()
    assert abs(float((l1 - l2).detach())) < 2e-3 * abs(float(l1.detach()))
    g1 = torch.autograd.grad(l1, [params, noise])
    g2 = torch.autograd.grad(l2, [params, noise])
    for a, b in zip(g1, g2):  # stochastic trace term: loose agreement
        assert float((a - b).norm()) < 0.15 * float(a.norm()) + 1e-6
    Xt, _ = _data(20, 7)
    _, v2 = check_same_predictions(chol, cg, Xt, rtol=1e-6, atol=1e-7, var_rtol=1e-5, var_atol=1e-7)
    assert bool((v2 >= 0).all())


def test_choose_backend_rule() -> None:
    assert choose_backend(100) == "cholesky"
    assert choose_backend(CHOLESKY_MAX_N + 1) == "cg"
    assert choose_backend(CHOLESKY_MAX_N, dtype=torch.float32) == "cg"
    assert choose_backend(100_000, keops=True) == "keops"
    # below 2048 points (or on another device, or with a graph for the inputs) the
    # evaluator records a whole-matrix graph: EVALUATOR_MATRICES_PER_TERM per addend
    n = 1500
    dense = 8 * n**2
    peak = (EVALUATOR_MATRICES_PER_TERM * 3 + 1) * dense  # evaluator for 3 addends, plus K
    assert choose_backend(n, memory_budget=peak + 2 * dense, n_terms=3) == "cholesky"
    assert choose_backend(n, memory_budget=peak + 2 * dense - 1, n_terms=3) == "cg"
    assert choose_backend(n, memory_budget=peak - 1, keops=True, n_terms=3) == "keops"
    with pytest.raises(ValueError, match="n_terms"):
        choose_backend(100, n_terms=0)
    # beyond the dense limits without KeOps: the torch block operator
    assert choose_backend(100_000, keops=False) == "block"


def test_choose_backend_with_a_blockwise_graph_does_not_count_addends() -> None:
    # from 2048 points on the CPU a graph for the parameters is recorded block by block:
    # at most EVALUATOR_MATRICES_BLOCKWISE matrices, whatever the number of addends
    n = 3000
    dense = 8 * n**2
    fits = (EVALUATOR_MATRICES_BLOCKWISE + 2) * dense
    for terms in (2, 16, 200):
        assert choose_backend(n, memory_budget=fits, n_terms=terms) == "cholesky"
        assert choose_backend(n, memory_budget=fits - 1, n_terms=terms) == "cg"
    # a graph for the inputs, or another device, records the whole matrix per addend
    whole = (EVALUATOR_MATRICES_PER_TERM * 16 + 1 + 2) * dense
    assert choose_backend(n, memory_budget=fits, n_terms=16, input_graph=True, keops=True) == (
        "keops"
    )
    assert choose_backend(n, memory_budget=whole, n_terms=16, input_graph=True) == "cholesky"
    assert choose_backend(n, device="cuda", memory_budget=fits, n_terms=16, keops=True) == "keops"
    # just below the size where the blocks start: per addend
    assert choose_backend(2047, memory_budget=fits, n_terms=16, keops=True) == "keops"
    assert choose_backend(2048, memory_budget=fits, n_terms=16) == "cholesky"


def test_choose_backend_without_a_graph_does_not_count_addends() -> None:
    # no autograd graph: the evaluator works by blocks of points, so its peak is at most
    # EVALUATOR_MATRICES_NO_GRAPH matrices whatever the number of addends
    n = 1500
    dense = 8 * n**2
    fits = (EVALUATOR_MATRICES_NO_GRAPH + 2) * dense  # evaluator (with K) + Cholesky
    assert choose_backend(n, memory_budget=fits, keops=True, n_terms=16) == "keops"
    for terms in (1, 16, 200):
        assert choose_backend(n, memory_budget=fits, n_terms=terms, graph=False) == "cholesky"
        assert choose_backend(n, memory_budget=fits - 1, n_terms=terms, graph=False) == "cg"
    # other devices evaluate whole matrices: the larger bound there (the dense limit doubles)
    device = (EVALUATOR_MATRICES_NO_GRAPH_DEVICE + 2) * dense
    for budget, backend in ((device, "cholesky"), (device - 1, "cg")):
        got = choose_backend(n, device="cuda", memory_budget=budget, n_terms=16, graph=False)
        assert got == backend


def test_exact_gp_without_a_graph_stays_on_cholesky() -> None:
    # a budget where the evaluator with a graph does not fit but the block-wise one does:
    # with detached parameters the GP factors K exactly instead of falling back to CG/KeOps
    X, y = _data(200, 23)
    k, params = _kernel()
    dense = 8 * 200 * 200
    budget = (EVALUATOR_MATRICES_NO_GRAPH + 2) * dense
    assert (EVALUATOR_MATRICES_PER_TERM * k.n_terms + 1) * dense + 2 * dense > budget
    with_graph = Posterior.from_kernel(k, X, y, 0.1, memory_budget=budget, backend="dense")
    assert with_graph.backend == "cg"
    fixed = DimWiseKernel(k.structure, params.detach())
    gp = Posterior.from_kernel(fixed, X, y, 0.1, memory_budget=budget)
    assert gp.backend == "cholesky"
    oracle = dense_gp_log_marginal_likelihood(fixed(X), y, torch.tensor(0.1, dtype=torch.float64))
    torch.testing.assert_close(
        gp.log_marginal_likelihood().detach(), oracle, rtol=1e-10, atol=1e-10
    )


def test_exact_gp_counts_a_graph_for_the_inputs_per_addend() -> None:
    # 2100 points, parameters requiring grad: the graph is recorded block by block and
    # fits a budget of EVALUATOR_MATRICES_BLOCKWISE + 2 matrices; inputs requiring grad
    # make it a whole-matrix graph, counted per addend (3 here), which does not
    X, y = _data(2100, 24)
    k, _ = _kernel()
    dense = 8 * 2100**2
    budget = (EVALUATOR_MATRICES_BLOCKWISE + 2) * dense
    assert (EVALUATOR_MATRICES_PER_TERM * k.n_terms + 1 + 2) * dense > budget
    assert (
        Posterior.from_kernel(k, X, y, 0.1, memory_budget=budget, backend="dense").backend
        == "cholesky"
    )
    Xg = X.clone().requires_grad_()
    assert (
        Posterior.from_kernel(k, Xg, y, 0.1, memory_budget=budget, backend="dense").backend == "cg"
    )


def test_dense_backend_picks_the_solver_by_memory() -> None:
    X, y = _data(50, 12)
    k, _ = _kernel()
    assert Posterior.from_kernel(k, X, y, 0.1, backend="dense").backend == "cholesky"
    small = Posterior.from_kernel(k, X, y, 0.1, backend="dense", memory_budget=8 * 50 * 50)
    assert small.backend == "cg"  # never KeOps, even where only KeOps would fit
    m1, _ = small.predict(X[:4])
    m2, _ = Posterior.from_kernel(k, X, y, 0.1, backend="cholesky").predict(X[:4])
    torch.testing.assert_close(m1, m2, rtol=1e-6, atol=1e-8)


def test_rejects_bad_input() -> None:
    X, y = _data(10, 8)
    k, _ = _kernel()
    with pytest.raises(ValueError, match="noise"):
        Posterior.from_kernel(k, X, y, 0.0)
    with pytest.raises(ValueError, match="y must have shape"):
        Posterior.from_kernel(k, X, y[:5], 0.1)
    with pytest.raises(ValueError, match="dimensions"):
        Posterior.from_kernel(k, X[:, :1], y, 0.1)
    bad = X.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        Posterior.from_kernel(k, bad, y, 0.1)
    with pytest.raises(ValueError, match="unknown backend"):
        Posterior.from_kernel(k, X, y, 0.1, backend="magic")  # type: ignore[arg-type]
    gp = Posterior.from_kernel(k, X, y, 0.1)
    with pytest.raises(ValueError, match="X_test"):
        gp.predict(X[:, :1])


KEOPS_STRUCTURE = DimWiseStructure.parse("(SE + PER*RQ)@0 * (LIN + MAT52*LIN)@1")


@pytest.mark.skipif(not keops_available(), reason="pykeops is not installed")
def test_keops_backend_predicts_like_cholesky() -> None:
    X, y = _data(200, 9)
    params = 0.4 + torch.rand(
        2, 2, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    k = DimWiseKernel(KEOPS_STRUCTURE, params)
    noise = torch.tensor(0.05, dtype=torch.float64)
    Xt, _ = _data(5, 10)
    m1, v1 = Posterior.from_kernel(k, X, y, noise, backend="cholesky").predict(Xt)
    m2, v2 = Posterior.from_kernel(k, X, y, noise, backend="keops").predict(Xt)
    torch.testing.assert_close(m2, m1, rtol=1e-6, atol=1e-7)
    assert v1 is not None
    assert v2 is not None
    torch.testing.assert_close(v2, v1, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.skipif(not keops_available(), reason="pykeops is not installed")
def test_keops_backend_loss_and_gradient_like_dense_cg() -> None:
    X, y = _data(200, 11)
    params = (
        0.4 + torch.rand(2, 2, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ).requires_grad_()
    k = DimWiseKernel(KEOPS_STRUCTURE, params)
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    results = []
    for backend in ("cg", "keops"):
        gp = Posterior.from_kernel(
            k, X, y, noise, backend=backend, generator=torch.Generator().manual_seed(0)
        )
        lml = gp.log_marginal_likelihood()
        results.append((lml, *torch.autograd.grad(lml, [params, noise])))
    for a, b in zip(*results):  # same probes, same solves: equal up to CG tolerance
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_factored_once_the_cholesky_factor_exists() -> None:
    X, y = _data(40, 24)
    k, _ = _kernel()
    post = Posterior.from_kernel(k, X, y, 0.1, backend="cholesky")
    assert not post.factored  # nothing built yet
    post.log_marginal_likelihood()
    assert post.factored
    cg = Posterior.from_kernel(k, X, y, 0.1, backend="cg")
    cg.log_marginal_likelihood()
    assert not cg.factored  # no dense factor on the CG backend
