"""Reusable test helpers for kernel-grammar and its dependants.

Hypothesis strategies for expressions and structures (needs ``hypothesis``, a
test dependency; this module is imported only by tests) and conformance checks
for base symbols.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from amorgp.kernel_grammar import (
    ELEMENTARY,
    Atom,
    DimWiseStructure,
    Expr,
    Product,
    Sum,
    base_symbol,
)

KERNELS = sorted(ELEMENTARY)


__all__ = ["any_expressions", "check_base_symbol", "expressions", "structures"]


def expressions(dim: st.SearchStrategy[int | None] | None = None) -> st.SearchStrategy[Expr]:
    """Random expressions whose atoms all draw their dimension from ``dim`` (default None)."""
    dims = st.none() if dim is None else dim
    atoms = st.builds(Atom, st.sampled_from(KERNELS), dims)
    return st.recursive(
        atoms,
        lambda children: st.one_of(
            st.lists(children, min_size=2, max_size=3).map(Sum),
            st.lists(children, min_size=2, max_size=3).map(Product),
        ),
        max_leaves=8,
    )


def any_expressions() -> st.SearchStrategy[Expr]:
    """Dimension-free or fully indexed expressions (never mixed)."""
    return st.one_of(expressions(), expressions(st.integers(0, 3)))


def structures(
    vocab_symbols: tuple[str, ...], max_dims: int = 4, max_addends: int = 4
) -> st.SearchStrategy[DimWiseStructure]:
    """Random structures over ``vocab_symbols`` (repeats allowed within a dimension)."""
    dim = st.lists(st.sampled_from(vocab_symbols), min_size=1, max_size=max_addends).map(tuple)
    return st.lists(dim, min_size=1, max_size=max_dims).map(
        lambda dims: DimWiseStructure(tuple(dims))
    )


def check_base_symbol(
    name: str,
    rng: np.random.Generator,
    n: int = 12,
    params: dict[str, float] | None = None,
    atol: float = 1e-10,
) -> None:
    """Conformance checks of a base symbol's numpy reference (raise ``AssertionError``).

    Checks, on ``n`` random inputs in ``[0, 1]`` and parameters drawn from the priors
    (or ``params``): shape, finiteness, symmetry ``K = K^T``, positive
    semi-definiteness (smallest eigenvalue ``>= -atol * max|K|``), ``K(x, x)`` on one
    point equals the diagonal, and the one-variance product rule
    ``k_{A*B} = s^2 kt_A kt_B`` (``kt`` = the elementary symbol with variance 1).
    """
    sym = base_symbol(name)
    if params is None:
        params = {p.name: float(p.prior.sample(rng, ())) + 0.05 for p in sym.params}
    x = rng.uniform(0.0, 1.0, size=n)
    K = sym.reference(x, x, params)
    assert K.shape == (n, n), f"{name}: shape {K.shape} != {(n, n)}"
    assert np.isfinite(K).all(), f"{name}: non-finite values"
    np.testing.assert_allclose(K, K.T, rtol=0, atol=atol, err_msg=f"{name}: not symmetric")
    scale = max(1.0, float(np.abs(K).max()))
    lam = np.linalg.eigvalsh(K).min()
    assert lam >= -atol * scale * n, f"{name}: not PSD (smallest eigenvalue {lam:g})"
    for i in range(min(n, 3)):
        k_ii = sym.reference(x[i : i + 1], x[i : i + 1], params)[0, 0]
        np.testing.assert_allclose(k_ii, K[i, i], rtol=1e-12, err_msg=f"{name}: diag")
    if len(sym.factors) == 2:
        prod = np.full((n, n), params["variance"])
        for f in sym.factors:
            mapping = sym.factor_param_names(f)
            unit = {"variance": 1.0, **{k: params[v] for k, v in mapping.items()}}
            prod = prod * base_symbol(f).reference(x, x, unit)
        np.testing.assert_allclose(K, prod, rtol=1e-12, err_msg=f"{name}: product rule")
