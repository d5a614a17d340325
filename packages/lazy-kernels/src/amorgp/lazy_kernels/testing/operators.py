"""Conformance suite of kernel operators, run over every implementation.

A check takes an *operator factory* ``(structure, params, X1, X2) -> KernelOperator``
(``params (D, L, P)`` in the padded layout of
:class:`~amorgp.lazy_kernels.DimWiseKernel`), a dimension-wise structure with its
parameters and a generator, and compares the operator's ``dense``, ``matmul``, ``diag``,
``columns`` and ``on`` with the numpy float64 reference formulas of the registry
(``BaseSymbol.reference``), eigenvalues and finite differences.  The factories of the
package's implementations are in :data:`OPERATOR_FACTORIES`: the dense evaluator
(``DimWiseKernel``), the general expression kernel (``ExpressionKernel``, the same kernel
written atom by atom), the torch block operator and KeOps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from amorgp.kernel_grammar import (
    ELEMENTARY,
    Atom,
    BaseSymbol,
    DimWiseStructure,
    Expr,
    Product,
    Sum,
    base_symbol,
)
from amorgp.lazy_kernels.block import BlockKernelOperator
from amorgp.lazy_kernels.keops import KeOpsKernel
from amorgp.lazy_kernels.operators import KernelOperator
from amorgp.lazy_kernels.structure import DimWiseKernel, ExpressionKernel

__all__ = [
    "OPERATOR_CHECKS",
    "OPERATOR_FACTORIES",
    "OperatorFactory",
    "check_operator_columns",
    "check_operator_diag",
    "check_operator_gradients",
    "check_operator_on",
    "check_operator_protocol",
    "check_operator_reference",
    "check_operator_symmetry_psd",
    "block_operator",
    "dense_operator",
    "expression_operator",
    "keops_operator",
    "reference_structure",
    "run_operator_conformance",
    "symbol_case",
]

OperatorFactory = Callable[[DimWiseStructure, Tensor, Tensor, Tensor | None], KernelOperator]
"""``(structure, params (D, L, P), X1 (N, D), X2 (M, D) or None) -> K(X1, X2)``."""


def dense_operator(
    structure: DimWiseStructure, params: Tensor, X1: Tensor, X2: Tensor | None = None
) -> KernelOperator:
    """The dense evaluator's operator (``DimWiseKernel(...).operator``)."""
    return DimWiseKernel(structure, params).operator(X1, X2)


def block_operator(
    structure: DimWiseStructure, params: Tensor, X1: Tensor, X2: Tensor | None = None
) -> KernelOperator:
    """The torch block operator (:class:`~amorgp.lazy_kernels.BlockKernelOperator`) with
    blocks of 3 rows, so that every matvec of the suite spans several blocks."""
    return BlockKernelOperator(DimWiseKernel(structure, params), X1, X2, rows=3)


def keops_operator(
    structure: DimWiseStructure, params: Tensor, X1: Tensor, X2: Tensor | None = None
) -> KernelOperator:
    """The KeOps operator (``KeOpsKernel(...).operator``)."""
    return KeOpsKernel(structure, params).operator(X1, X2)


def _one(cls: type[Sum] | type[Product], parts: list[Expr]) -> Expr:
    return parts[0] if len(parts) == 1 else cls(parts)


def expression_operator(
    structure: DimWiseStructure, params: Tensor, X1: Tensor, X2: Tensor | None = None
) -> KernelOperator:
    """The same kernel as an :class:`ExpressionKernel` of elementary atoms.

    A symbol ``A*B`` with ``(s^2, theta_A, theta_B)`` becomes the atoms ``A`` with
    ``(s^2, theta_A)`` and ``B`` with ``(1, theta_B)`` (the variance goes to a factor it
    scales entirely: ``s^2 kt_A kt_B``); LIN alone keeps ``(s^2, c^2)``.  Each
    (elementary kernel, dimension) may occur once, so atoms map to rows unambiguously.
    """
    rows: dict[tuple[str, int], Tensor] = {}
    dims: list[Expr] = []
    one = params.new_ones(1)
    for d, addends in enumerate(structure.dims):
        terms: list[Expr] = []
        for a, name in enumerate(addends):
            sym = base_symbol(name)
            scaled = [f for f in sym.factors if ELEMENTARY[f].variance_scales_all]
            owner = scaled[0] if scaled else sym.factors[0]
            for f in sym.factors:
                if (f, d) in rows:
                    raise ValueError(f"{f}@{d} occurs twice in {structure}: rows are ambiguous")
                mapping = sym.factor_param_names(f)
                slots = [sym.param_names.index(mapping[p.name]) for p in ELEMENTARY[f].params]
                var = params[d, a, :1] if f == owner else one
                rows[(f, d)] = torch.cat([var, params[d, a, slots]])
            terms.append(_one(Product, [Atom(f, d) for f in sym.factors]))
        dims.append(_one(Sum, terms))
    expr = _one(Product, dims)
    atoms = list(expr.atoms())
    width = max(r.shape[0] for r in rows.values())
    table = torch.stack(
        [
            torch.cat(
                [rows[(a.kernel, a.dim)], one.expand(width - rows[(a.kernel, a.dim)].shape[0])]
            )
            for a in atoms
            if a.dim is not None
        ]
    )
    return ExpressionKernel(expr, table, n_dims=structure.n_dims).operator(X1, X2)


OPERATOR_FACTORIES: dict[str, OperatorFactory] = {
    "dense": dense_operator,
    "expression": expression_operator,
    "keops": keops_operator,
    "block": block_operator,
}
"""The package's operator implementations by name."""


def reference_structure(
    structure: DimWiseStructure, params: Tensor, X1: Tensor, X2: Tensor | None = None
) -> np.ndarray:
    """Numpy float64 oracle ``K(X1, X2)`` ``(N, M)`` of a structure from the registry's
    reference formulas."""
    A = X1.detach().double().numpy()
    B = A if X2 is None else X2.detach().double().numpy()
    P = params.detach().double().numpy()
    out = np.ones((A.shape[0], B.shape[0]))
    for d, addends in enumerate(structure.dims):
        acc = np.zeros_like(out)
        for a, name in enumerate(addends):
            sym = base_symbol(name)
            acc += sym.reference(A[:, d], B[:, d], dict(zip(sym.param_names, P[d, a])))
        out *= acc
    return out


def symbol_case(
    symbol: BaseSymbol | str, generator: torch.Generator, dims: int = 2
) -> tuple[DimWiseStructure, Tensor]:
    """``symbol`` alone on each of ``dims`` dimensions, with parameters in ``[0.3, 1.3]``."""
    sym = base_symbol(symbol) if isinstance(symbol, str) else symbol
    structure = DimWiseStructure(tuple((sym.name,) for _ in range(dims)))
    params = 0.3 + torch.rand(dims, 1, len(sym.params), generator=generator, dtype=torch.float64)
    return structure, params


def _inputs(structure: DimWiseStructure, generator: torch.Generator, n: int) -> Tensor:
    return torch.rand(n, structure.n_dims, generator=generator, dtype=torch.float64)


def check_operator_protocol(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """The operator satisfies :class:`KernelOperator` with the right shape, dtype and inputs;
    ``diag`` of a cross operator is refused."""
    X1, X2 = _inputs(structure, g, 7), _inputs(structure, g, 4)
    op = factory(structure, params, X1, X2)
    assert isinstance(op, KernelOperator)
    assert op.shape == (7, 4)
    assert op.dtype == torch.float64
    assert op.device == X1.device
    assert op.X1 is X1
    assert op.X2 is X2
    assert not op.requires_grad
    assert op.bytes_per_entry > 0
    sym = factory(structure, params, X1, None)
    assert sym.X2 is sym.X1
    try:
        op.diag()
    except ValueError:
        pass
    else:
        raise AssertionError("diag() of a cross-covariance operator must raise")


def check_operator_reference(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """``dense()`` and ``matmul`` (a vector and a 16-column block) equal the numpy oracle."""
    X1, X2 = _inputs(structure, g, 9), _inputs(structure, g, 6)
    op = factory(structure, params, X1, X2)
    ref = reference_structure(structure, params, X1, X2)
    np.testing.assert_allclose(op.dense().detach().numpy(), ref, rtol=1e-11, atol=1e-12)
    V = torch.randn(6, 16, generator=g, dtype=torch.float64)
    np.testing.assert_allclose(
        op.matmul(V).detach().numpy(), ref @ V.numpy(), rtol=1e-10, atol=1e-11
    )
    np.testing.assert_allclose(
        op.matmul(V[:, 0]).detach().numpy(), ref @ V[:, 0].numpy(), rtol=1e-10, atol=1e-11
    )


def check_operator_symmetry_psd(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """``K(X, X)`` assembled from matvecs (``matmul(I)``) is symmetric and PSD."""
    X = _inputs(structure, g, 12)
    K = factory(structure, params, X, None).matmul(torch.eye(12, dtype=torch.float64)).detach()
    torch.testing.assert_close(K, K.T, rtol=1e-12, atol=1e-13)
    eig = torch.linalg.eigvalsh(0.5 * (K + K.T))
    assert bool((eig >= -1e-10 * eig[-1].abs()).all()), f"negative eigenvalues {eig}"


def check_operator_diag(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """``diag()`` of ``K(X, X)`` equals the oracle's diagonal."""
    X = _inputs(structure, g, 8)
    d = factory(structure, params, X, None).diag().detach().numpy()
    np.testing.assert_allclose(
        d, np.diag(reference_structure(structure, params, X)), rtol=1e-11, atol=1e-12
    )


def check_operator_columns(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """``columns(index)`` equals the oracle's columns, in the given order."""
    X1, X2 = _inputs(structure, g, 7), _inputs(structure, g, 5)
    index = torch.tensor([3, 0, 3])
    cols = factory(structure, params, X1, X2).columns(index).detach().numpy()
    ref = reference_structure(structure, params, X1, X2)[:, index.numpy()]
    np.testing.assert_allclose(cols, ref, rtol=1e-11, atol=1e-12)


def check_operator_on(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """``on(X3, X4)`` is the same kernel on other inputs (and ``on(X3)`` symmetric)."""
    op = factory(structure, params, _inputs(structure, g, 4), None)
    X3, X4 = _inputs(structure, g, 6), _inputs(structure, g, 3)
    other = op.on(X3, X4)
    assert other.shape == (6, 3)
    np.testing.assert_allclose(
        other.dense().detach().numpy(),
        reference_structure(structure, params, X3, X4),
        rtol=1e-11,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        op.on(X3).diag().detach().numpy(),
        np.diag(reference_structure(structure, params, X3)),
        rtol=1e-11,
        atol=1e-12,
    )


def check_operator_gradients(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, g: torch.Generator
) -> None:
    """float64 ``gradcheck`` of ``matmul(v)`` w.r.t. the parameters and both inputs."""
    X1 = _inputs(structure, g, 3).requires_grad_()
    X2 = _inputs(structure, g, 2).requires_grad_()
    P = params.detach().clone().requires_grad_()
    v = torch.randn(2, 1, generator=g, dtype=torch.float64)

    def f(p: Tensor, x1: Tensor, x2: Tensor) -> Tensor:
        op = factory(structure, p, x1, x2)
        assert op.requires_grad
        return op.matmul(v)

    assert torch.autograd.gradcheck(f, (P, X1, X2), eps=1e-6, atol=1e-7)


OperatorCheck = Callable[[OperatorFactory, DimWiseStructure, Tensor, torch.Generator], None]

OPERATOR_CHECKS: dict[str, OperatorCheck] = {
    "protocol": check_operator_protocol,
    "reference": check_operator_reference,
    "symmetry_psd": check_operator_symmetry_psd,
    "diag": check_operator_diag,
    "columns": check_operator_columns,
    "on": check_operator_on,
    "gradients": check_operator_gradients,
}
"""Every check of the operator conformance suite by name."""


def run_operator_conformance(
    factory: OperatorFactory, structure: DimWiseStructure, params: Tensor, seed: int = 0
) -> None:
    """Run the whole operator suite on one structure (raises AssertionError on failure)."""
    for i, check in enumerate(OPERATOR_CHECKS.values()):
        check(factory, structure, params, torch.Generator().manual_seed(seed + i))
