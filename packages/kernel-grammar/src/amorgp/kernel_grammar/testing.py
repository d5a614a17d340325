"""Reusable test helpers for kernel-grammar and its dependants.

Hypothesis strategies for expressions and structures (needs ``hypothesis``, a
test dependency; this module is imported only by tests) and conformance checks
for base symbols.
"""

from __future__ import annotations

from hypothesis import strategies as st

from amorgp.kernel_grammar import ELEMENTARY, Atom, DimWiseStructure, Expr, Product, Sum

KERNELS = sorted(ELEMENTARY)


__all__ = ["any_expressions", "expressions", "structures"]


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
