"""Tests of DimWiseKernel and ExpressionKernel against numpy reference formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.kernel_grammar import Atom, DimWiseStructure, Expr, Product, Sum, base_symbol, parse
from amorgp.lazy_kernels import DimWiseKernel, ExpressionKernel


def _named(structure: DimWiseStructure, g: torch.Generator) -> dict[str, float]:
    names = [str(n) for n in structure.param_names()]
    vals = 0.3 + torch.rand(len(names), generator=g, dtype=torch.float64)
    return dict(zip(names, vals.tolist()))


def _reference_dimwise(structure: DimWiseStructure, named: dict[str, float], X1, X2) -> np.ndarray:
    out = np.ones((X1.shape[0], X2.shape[0]))
    for d, addends in enumerate(structure.dims):
        acc = np.zeros_like(out)
        for a, s in enumerate(addends):
            sym = base_symbol(s)
            p = {n: named[f"d{d}.{a}.{s}.{n}"] for n in sym.param_names}
            acc += sym.reference(X1[:, d], X2[:, d], p)
        out *= acc
    return out


@pytest.mark.parametrize(
    ("text", "n_dims"),
    [("SE + PER", 1), ("SE*LIN + LIN", 2), ("(SE*LIN + SE)@0 * (SE + PER + LIN*PER)@1", None)],
)
def test_dimwise_kernel_matches_reference(text: str, n_dims: int | None) -> None:
    g = torch.Generator().manual_seed(0)
    s = DimWiseStructure.parse(text, n_dims)
    named = _named(s, g)
    k = DimWiseKernel(text, named, n_dims=n_dims)
    X1 = torch.rand(7, s.n_dims, generator=g, dtype=torch.float64)
    X2 = torch.rand(4, s.n_dims, generator=g, dtype=torch.float64)
    ref = _reference_dimwise(s, named, X1.numpy(), X2.numpy())
    np.testing.assert_allclose(k(X1, X2).numpy(), ref, rtol=1e-12)
    np.testing.assert_allclose(
        k.diag(X1).numpy(),
        np.diag(_reference_dimwise(s, named, X1.numpy(), X1.numpy())),
        rtol=1e-12,
    )
    for name, value in k.named_params().items():
        assert float(value) == named[name]


def test_dimwise_kernel_tensor_params_and_errors() -> None:
    s = DimWiseStructure.parse("(SE + PER)@0 * LIN@1")
    params = torch.full((2, 2, 3), 0.5, dtype=torch.float64)
    k = DimWiseKernel(s, params)
    X = torch.rand(3, 2, dtype=torch.float64)
    assert k(X).shape == (3, 3)
    with pytest.raises(ValueError, match="shape"):
        DimWiseKernel(s, params[:1])
    bad = params.clone()
    bad[0, 1, 2] = -1.0
    with pytest.raises(ValueError, match="finite and positive"):
        DimWiseKernel(s, bad)
    with pytest.raises(ValueError, match="missing"):
        DimWiseKernel(s, {"d0.0.SE.variance": 1.0})
    with pytest.raises(ValueError, match="unknown parameter"):
        DimWiseKernel(s, {"d9.0.SE.variance": 1.0})
    with pytest.raises(ValueError, match="exceeds the data"):
        k(X[:, :1])
    with pytest.raises(ValueError, match="NaN"):
        k(torch.full((2, 2), float("nan"), dtype=torch.float64))


def _reference_expr(e: Expr, atoms: list[Atom], params: np.ndarray, X1, X2) -> np.ndarray:
    if isinstance(e, Atom):
        i = next(j for j, a in enumerate(atoms) if a is e)
        sym = base_symbol(e.kernel)
        p = dict(zip(sym.param_names, params[i]))
        return sym.reference(X1[:, e.dim], X2[:, e.dim], p)
    parts = [_reference_expr(c, atoms, params, X1, X2) for c in e.children]
    out = parts[0]
    for q in parts[1:]:
        out = out + q if isinstance(e, Sum) else out * q
    return out


@pytest.mark.parametrize(
    "text", ["SE@0 * SE@1 + PER@0", "(LIN@0 + RQ@1) * (MAT52@0 + SE@1 * PER@1)", "LIN@0 * LIN@0"]
)
def test_expression_kernel_matches_reference(text: str) -> None:
    g = torch.Generator().manual_seed(1)
    n_atoms = len(list(parse(text).atoms()))
    params = 0.3 + torch.rand(n_atoms, 3, generator=g, dtype=torch.float64)
    k = ExpressionKernel(text, params)
    X1 = torch.rand(6, k.n_dims, generator=g, dtype=torch.float64) * 2 - 0.5
    X2 = torch.rand(5, k.n_dims, generator=g, dtype=torch.float64)
    atoms = list(k.atoms)
    ref = _reference_expr(k.expr, atoms, params.numpy(), X1.numpy(), X2.numpy())
    np.testing.assert_allclose(k(X1, X2).numpy(), ref, rtol=1e-12)
    refd = _reference_expr(k.expr, atoms, params.numpy(), X1.numpy(), X1.numpy())
    np.testing.assert_allclose(k.diag(X1).numpy(), np.diag(refd), rtol=1e-12)


def test_expression_kernel_dimension_free_and_named() -> None:
    k = ExpressionKernel(
        "SE",
        [{"variance": 2.0, "lengthscale": 0.5}, {"variance": 1.0, "lengthscale": 0.3}],
        n_dims=2,
    )
    assert isinstance(k.expr, Product)
    X = torch.rand(4, 2, dtype=torch.float64)
    r0 = (X[:, None, 0] - X[None, :, 0]) ** 2
    r1 = (X[:, None, 1] - X[None, :, 1]) ** 2
    expected = 2.0 * torch.exp(-r0 / (2 * 0.25)) * torch.exp(-r1 / (2 * 0.09))
    torch.testing.assert_close(k(X), expected, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="needs parameters"):
        ExpressionKernel("SE@0 + LIN@0", [{"variance": 1.0}, {"variance": 1.0, "offset": 1.0}])
    with pytest.raises(ValueError, match="2 atoms"):
        ExpressionKernel("SE@0 + LIN@0", [{"variance": 1.0, "lengthscale": 1.0}])
    with pytest.raises(ValueError, match="give n_dims"):
        ExpressionKernel("SE + LIN", torch.ones(2, 2))
    k2 = ExpressionKernel("SE@0 + SE@2", torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="exceeds the data"):
        k2(X)
