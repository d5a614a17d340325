"""Tests of the grammar moves restricted to the dimension-wise space."""

from __future__ import annotations

import pytest
from hypothesis import given

from amorgp.kernel_grammar import (
    EXTENDED_VOCABULARY,
    PAPER_VOCABULARY,
    Atom,
    DimWiseStructure,
    Expr,
    Product,
    Sum,
    Vocabulary,
    moves,
    neighbours,
)
from amorgp.kernel_grammar.testing import structures

P = PAPER_VOCABULARY


def _oracle(s: DimWiseStructure, vocab: Vocabulary) -> set[DimWiseStructure]:
    """Neighbours built on expressions and converted with from_expr (independent path)."""
    out: set[DimWiseStructure] = set()

    def symbol_expr(name: str, d: int) -> Expr:
        factors = name.split("*")
        atoms: list[Expr] = [Atom(f, d) for f in factors]
        return atoms[0] if len(atoms) == 1 else Product(atoms)

    def rebuild(per_dim: list[list[Expr]]) -> DimWiseStructure | None:
        sums: list[Expr] = [t[0] if len(t) == 1 else Sum(t) for t in per_dim]
        e = sums[0] if len(sums) == 1 else Product(sums)
        try:
            return DimWiseStructure.from_expr(e, s.n_dims, vocab)
        except ValueError:
            return None

    base = [[symbol_expr(n, d) for n in addends] for d, addends in enumerate(s.dims)]
    for b in vocab.symbols:
        for d in range(s.n_dims):
            per = [list(t) for t in base]
            per[d].append(symbol_expr(b, d))
            out.add(rebuild(per))  # type: ignore[arg-type]
        per = [[*t, symbol_expr(b, d)] for d, t in enumerate(base)]
        out.add(rebuild(per))  # type: ignore[arg-type]
    for d in range(s.n_dims):
        for i in range(len(base[d])):
            for e in vocab.elementary:
                per = [list(t) for t in base]
                per[d][i] = per[d][i] * Atom(e, d)
                r = rebuild(per)
                if r is not None:
                    out.add(r)
            for b in vocab.symbols:
                per = [list(t) for t in base]
                per[d][i] = symbol_expr(b, d)
                out.add(rebuild(per))  # type: ignore[arg-type]
    out.discard(s)
    return out


def test_single_se_in_one_dimension() -> None:
    s = DimWiseStructure((("SE",),))
    got = neighbours(s, P)
    expected = {DimWiseStructure((("SE", b),)) for b in P.symbols}  # S + B
    expected |= {DimWiseStructure(((b,),)) for b in P.symbols if b != "SE"}  # B -> B'
    # S x B: SE*LIN and SE*PER are already replacements; nothing new
    assert set(got) == expected
    assert len(got) == len(expected) == 11


def test_moves_describe_themselves() -> None:
    s = DimWiseStructure((("SE",), ("PER",)))
    described = {str(m): r for m, r in moves(s, P)}
    assert described["add LIN to every dimension"] == DimWiseStructure(
        (("SE", "LIN"), ("PER", "LIN"))
    )
    assert described["multiply addend 0 of dimension 1 by LIN"] == DimWiseStructure(
        (("SE",), ("LIN*PER",))
    )
    assert "replace addend 0 of dimension 0 by PER" in described


@given(structures(P.symbols, max_dims=3, max_addends=3))
def test_neighbours_match_expression_oracle(s: DimWiseStructure) -> None:
    got = neighbours(s, P)
    assert len(got) == len(set(got))  # deduplicated by canonical form
    assert s not in got
    assert set(got) == _oracle(s, P)


@given(structures(EXTENDED_VOCABULARY.symbols, max_dims=2, max_addends=2))
def test_neighbours_extended_vocabulary(s: DimWiseStructure) -> None:
    assert set(neighbours(s, EXTENDED_VOCABULARY)) == _oracle(s, EXTENDED_VOCABULARY)


def test_max_addends_limits_growth() -> None:
    s = DimWiseStructure((("SE", "PER"), ("LIN",)))
    got = neighbours(s, P, max_addends=2)
    assert all(max(len(a) for a in r.dims) <= 2 for r in got)
    assert DimWiseStructure((("SE", "PER"), ("LIN", "SE"))) in got


def test_errors() -> None:
    s = DimWiseStructure((("RQ",),))
    with pytest.raises(ValueError, match=r"symbol RQ \(input dimension 0\) is not in vocabulary"):
        neighbours(s, P)
    with pytest.raises(ValueError, match="expected a DimWiseStructure"):
        neighbours("SE", P)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_addends must be a positive integer"):
        neighbours(DimWiseStructure((("SE",),)), P, max_addends=0)
