"""Solver options and memory budgets out of their domain are one ``OptionError`` each,
never a NaN likelihood or a torch error; ``memory_budget=inf`` means no limit (issue 64,
item 16)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from amorgp.core.errors import OptionError
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import DimWiseKernel, Posterior
from amorgp.lazy_kernels.block import BlockKernelOperator, block_rows

STRUCTURE = DimWiseStructure.parse("SE@0")


def _problem(n: int = 40) -> tuple[DimWiseKernel, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(n, 1, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    params = torch.tensor([[[1.0, 0.3, 0.0]]], dtype=torch.float64)
    return DimWiseKernel(STRUCTURE, params), X, y


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cg_tol": -1.0}, r"cg_tol must be a number in \(0, 1\), got -1.0"),
        ({"cg_tol": math.nan}, r"cg_tol must be a number in \(0, 1\)"),
        ({"cg_tol": 0.0}, r"cg_tol must be a number in \(0, 1\)"),
        ({"max_cg_iter": 0}, r"max_cg_iter must be an integer >= 1, got 0"),
        ({"n_probes": 0}, r"n_probes must be an integer >= 1, got 0"),
        ({"precond_rank": -1}, r"precond_rank must be an integer >= 0, got -1"),
        ({"jitter": -1e-3}, r"jitter must be a finite number >= 0"),
        ({"max_tries": 0}, r"max_tries must be an integer >= 1"),
    ],
)
@pytest.mark.parametrize("backend", ["cholesky", "cg", "block"])
def test_solver_options_out_of_their_domain_are_refused(
    options: dict[str, float], message: str, backend: str
) -> None:
    kernel, X, y = _problem()
    with pytest.raises(OptionError, match=message):
        Posterior.from_kernel(kernel, X, y, 0.05, backend=backend, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_probes": 10**12}, r"n_probes must be at most 10000, got 1000000000000$"),
        ({"max_cg_iter": 10**9}, r"max_cg_iter must be at most 100000, got 1000000000$"),
        ({"precond_rank": 2**40}, r"precond_rank must be at most 100000, got 1099511627776$"),
        ({"max_tries": 10**6}, r"max_tries must be at most 100, got 1000000$"),
        ({"var_block": 2**31}, r"var_block must be at most 1073741824, got 2147483648$"),
        ({"var_block": 0}, r"var_block must be an integer >= 1, got 0$"),
    ],
)
@pytest.mark.parametrize("backend", ["cholesky", "cg"])
def test_integer_sizes_past_their_maximum_are_refused_before_any_allocation(
    options: dict[str, int], message: str, backend: str
) -> None:
    """``n_probes=10**12`` reached an (n, 10**12) allocation (88 TB at n = 10^4)."""
    kernel, X, y = _problem()
    with pytest.raises(OptionError, match=message):
        Posterior.from_kernel(kernel, X, y, 0.05, backend=backend, **options)  # type: ignore[arg-type]


def test_the_largest_accepted_sizes_pass_the_check() -> None:
    from amorgp.lazy_kernels.solvers import MAX_SOLVER_SIZES, check_solver_options

    assert MAX_SOLVER_SIZES["n_probes"] == 10_000
    assert check_solver_options(n_probes=10_000, max_cg_iter=100_000) == {
        "n_probes": 10_000,
        "max_cg_iter": 100_000,
    }


def test_a_huge_option_value_is_cut_in_the_message() -> None:
    from amorgp.lazy_kernels.solvers import check_solver_options

    with pytest.raises(OptionError, match=r"got 1{80}\.\.\. \(4001 characters\)$") as info:
        check_solver_options(n_probes=int("1" * 4001))
    assert len(str(info.value)) < 200
    with pytest.raises(OptionError, match=r"got <an integer of 16610 bits>$") as info:
        check_solver_options(n_probes=10**5000)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("budget", [math.nan, 0.0, -1.0, "lots"])
def test_a_memory_budget_must_be_a_positive_number(budget: object) -> None:
    kernel, X, y = _problem()
    with pytest.raises(OptionError, match="memory_budget must be a positive number of bytes"):
        Posterior.from_kernel(kernel, X, y, 0.05, backend="block", memory_budget=budget)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="memory_budget must be a positive number of bytes"):
        BlockKernelOperator(kernel, X, memory_budget=budget)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["block", "cg", "cholesky"])
def test_an_infinite_memory_budget_means_no_limit(backend: str) -> None:
    kernel, X, y = _problem()
    post = Posterior.from_kernel(
        kernel,
        X,
        y,
        0.05,
        backend=backend,
        memory_budget=math.inf,
        chunk_budget=math.inf,
        cg_tol=1e-10,
    )
    K = kernel(X, X).detach().numpy() + 0.05 * np.eye(len(y))
    want = dense_gp_log_marginal_likelihood(K, y.numpy(), 0.0)
    assert float(post.log_marginal_likelihood()) == pytest.approx(want, rel=1e-6)
    assert block_rows(40, 1, torch.float64, math.inf, graph=False) > 40


def test_precond_rank_zero_runs_plain_cg() -> None:
    kernel, X, y = _problem()
    post = Posterior.from_kernel(kernel, X, y, 0.05, backend="cg", cg_tol=1e-10, precond_rank=0)
    K = kernel(X, X).detach().numpy() + 0.05 * np.eye(len(y))
    np.testing.assert_allclose(
        post.alpha().detach().numpy(), np.linalg.solve(K, y.numpy()), rtol=1e-6
    )


def test_numpy_numbers_are_accepted() -> None:
    kernel, X, y = _problem()
    post = Posterior.from_kernel(
        kernel, X, y, 0.05, backend="cg", cg_tol=np.float64(1e-10), max_cg_iter=np.int64(200),
        n_probes=np.int32(4), precond_rank=np.int64(8), memory_budget=np.int64(2**30),
    )  # fmt: skip
    K = kernel(X, X).detach().numpy() + 0.05 * np.eye(len(y))
    np.testing.assert_allclose(
        post.alpha().detach().numpy(), np.linalg.solve(K, y.numpy()), rtol=1e-6
    )
