"""The kernel-operator conformance suite over every implementation, and the operator plumbing."""

from __future__ import annotations

import pytest
import torch

from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import BaseSymbol, DimWiseStructure
from amorgp.lazy_kernels import (
    DenseKernelOperator,
    DimWiseKernel,
    KeOpsOperator,
    KernelOperator,
    Posterior,
    kernel_operator,
)
from amorgp.lazy_kernels.keops import keops_available
from amorgp.lazy_kernels.testing import (
    OPERATOR_CHECKS,
    OPERATOR_FACTORIES,
    all_base_symbols,
    dense_operator,
    symbol_case,
)

SYMBOLS = all_base_symbols()
KEOPS_STRUCTURE = DimWiseStructure.parse("(SE + PER*RQ)@0 * (LIN + MAT52*LIN)@1")
"""One structure covering all five elementary kernels (the KeOps tests share it, so KeOps
compiles few formulas)."""
needs_keops = pytest.mark.skipif(not keops_available(), reason="pykeops is not installed")


@pytest.mark.parametrize("check", list(OPERATOR_CHECKS), ids=str)
@pytest.mark.parametrize("symbol", SYMBOLS, ids=lambda s: s.name)
@pytest.mark.parametrize("implementation", ["dense", "expression", "block"])
def test_operator_conformance_per_symbol(
    implementation: str, symbol: BaseSymbol, check: str
) -> None:
    g = torch.Generator().manual_seed(len(check))
    structure, params = symbol_case(symbol, g)
    OPERATOR_CHECKS[check](OPERATOR_FACTORIES[implementation], structure, params, g)


@pytest.mark.parametrize("check", list(OPERATOR_CHECKS), ids=str)
@pytest.mark.parametrize(
    "implementation",
    ["dense", "block", pytest.param("keops", marks=needs_keops)],
)
def test_operator_conformance_composite(implementation: str, check: str) -> None:
    """A composite structure with every elementary kernel, sums and products."""
    g = torch.Generator().manual_seed(7)
    params = 0.4 + torch.rand(2, 2, 5, generator=g, dtype=torch.float64)
    OPERATOR_CHECKS[check](OPERATOR_FACTORIES[implementation], KEOPS_STRUCTURE, params, g)


def test_suite_detects_a_broken_operator() -> None:
    """A matvec off by 0.1 % must fail the reference check."""

    class Broken(DenseKernelOperator):
        def matmul(self, V: torch.Tensor) -> torch.Tensor:
            return super().matmul(V) * 1.001

    def factory(structure, params, X1, X2=None):  # type: ignore[no-untyped-def]
        return Broken(DimWiseKernel(structure, params), X1, X2)

    structure, params = symbol_case("SE", torch.Generator().manual_seed(0))
    with pytest.raises(AssertionError):
        OPERATOR_CHECKS["reference"](factory, structure, params, torch.Generator())
    OPERATOR_CHECKS["reference"](dense_operator, structure, params, torch.Generator())


def test_kernel_operator_picks_the_implementation() -> None:
    params = torch.full((1, 2, 3), 0.5, dtype=torch.float64)
    kernel = DimWiseKernel(DimWiseStructure.parse("SE + PER", 1), params)
    X = torch.rand(5, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert isinstance(kernel_operator(kernel, X), DenseKernelOperator)
    keops = kernel_operator(kernel, X, backend="keops")
    assert isinstance(keops, KeOpsOperator)
    assert isinstance(keops, KernelOperator)
    with pytest.raises(OptionError, match="unknown operator backend"):
        kernel_operator(kernel, X, backend="gpu")


def test_dense_operator_stores_the_matrix_once() -> None:
    calls: list[int] = []
    params = torch.full((1, 1, 2), 0.5, dtype=torch.float64)
    kernel = DimWiseKernel(DimWiseStructure.parse("SE", 1), params)
    real = kernel.__class__.__call__

    class Counting(DimWiseKernel):
        def __call__(self, X1, X2=None):  # type: ignore[no-untyped-def]
            calls.append(1)
            return real(self, X1, X2)

    op = Counting(kernel.structure, params).operator(torch.rand(6, 1, dtype=torch.float64))
    for _ in range(3):
        op.matmul(torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(op.columns(torch.tensor([2])), op.dense()[:, 2:3])
    assert len(calls) == 1


def test_a_posterior_from_an_operator() -> None:
    """Posterior.from_kernel takes any KernelOperator; backend then picks the solver only."""
    g = torch.Generator().manual_seed(1)
    X = torch.rand(40, 1, generator=g, dtype=torch.float64)
    y = torch.sin(5 * X[:, 0])
    params = torch.full((1, 2, 3), 0.6, dtype=torch.float64)
    kernel = DimWiseKernel(DimWiseStructure.parse("SE + PER", 1), params)
    ref = Posterior.from_kernel(kernel, X, y, 0.1, backend="cholesky")
    gp = Posterior.from_kernel(kernel.operator(X), X, y, 0.1)
    assert gp.backend == "cholesky"
    Xt = torch.linspace(0, 1, 7, dtype=torch.float64)[:, None]
    for a, b in zip(gp.predict(Xt), ref.predict(Xt)):
        assert a is not None
        assert b is not None
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    with pytest.raises(OptionError, match="solver"):
        Posterior.from_kernel(kernel.operator(X), X, y, 0.1, backend="keops")
    with pytest.raises(OptionError, match="symmetric"):
        Posterior.from_kernel(kernel.operator(X, X[:3]), X, y, 0.1)
    with pytest.raises(ValueError, match="differ"):
        Posterior.from_kernel(kernel.operator(X), X + 1, y, 0.1)
