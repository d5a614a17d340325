"""Tests of the expression AST: flattening, canonical order, equality, hashing, printing."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amorgp.kernel_grammar import Atom, Expr, Product, Sum
from amorgp.kernel_grammar.testing import any_expressions

SE, LIN, PER = Atom("SE"), Atom("LIN"), Atom("PER")


def test_operators_build_flat_nary_nodes() -> None:
    e = SE + LIN + PER
    assert isinstance(e, Sum)
    assert len(e.children) == 3
    p = SE * LIN * PER
    assert isinstance(p, Product)
    assert len(p.children) == 3
    assert all(isinstance(c, Atom) for c in p.children)


def test_sum_and_product_are_commutative_and_associative() -> None:
    terms = [SE, LIN * PER, PER]
    sums = {Sum(list(order)) for order in itertools.permutations(terms)}
    assert len(sums) == 1
    assert (SE + LIN) + PER == SE + (LIN + PER)
    assert (SE * LIN) * PER == SE * (LIN * PER)
    assert hash(SE * LIN + PER) == hash(PER + LIN * SE)


def test_repeated_children_are_kept() -> None:
    e = SE + SE
    assert isinstance(e, Sum)
    assert e.children == (SE, SE)
    assert e != SE
    assert SE + SE + LIN != SE + LIN


def test_sum_and_product_differ() -> None:
    assert SE + LIN != SE * LIN
    assert hash(SE + LIN) != hash(SE * LIN)


def test_atom_normalises_case_and_validates() -> None:
    assert Atom("se") == SE
    assert Atom(" Per ", 2).dim == 2
    assert Atom("SE", np.int64(1)) == Atom("SE", 1)
    with pytest.raises(ValueError, match=r"unknown elementary kernel 'FOO'"):
        Atom("FOO")
    with pytest.raises(ValueError, match=r"integer >= 0"):
        Atom("SE", -1)
    with pytest.raises(ValueError, match=r"integer >= 0"):
        Atom("SE", True)  # type: ignore[arg-type]


def test_nodes_need_two_children_of_type_expr() -> None:
    with pytest.raises(ValueError, match=r"at least two children"):
        Sum([SE])
    with pytest.raises(TypeError, match=r"must be Expr"):
        Sum([SE, "LIN"])  # type: ignore[list-item]


def test_mixing_indexed_and_unindexed_atoms_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"cannot combine kernels on every dimension"):
        _ = SE + Atom("LIN", 0)


def test_canonical_text() -> None:
    assert str(PER + SE * LIN + SE) == "SE + PER + SE*LIN"
    assert str((SE + LIN) * PER) == "PER*(SE + LIN)"
    e = (Atom("SE", 0) * Atom("LIN", 0) + Atom("SE", 0)) * (Atom("PER", 1) + Atom("SE", 1))
    assert str(e) == "(SE + SE*LIN)@0 * (SE + PER)@1"
    assert str(Atom("SE", 0) * Atom("PER", 1) + Atom("LIN", 0)) == "LIN@0 + SE@0 * PER@1"


def test_at_indexes_every_atom() -> None:
    e = (SE + LIN * PER).at(3)
    assert e.dims == frozenset({3})
    assert e == Atom("SE", 3) + Atom("LIN", 3) * Atom("PER", 3)
    with pytest.raises(ValueError, match=r"already has an input dimension"):
        e.at(1)


def test_tree_print() -> None:
    e = (Atom("SE", 0) + Atom("LIN", 0)) * Atom("PER", 1)
    assert e.tree().splitlines() == [
        "Product",
        "├── Sum @0",
        "│   ├── SE @0",
        "│   └── LIN @0",
        "└── PER @1",
    ]


def _count_atoms(e: Expr) -> int:
    return sum(1 for _ in e.atoms())


@given(any_expressions(), st.randoms(use_true_random=False))
def test_equality_is_invariant_to_child_order(e: Expr, rnd) -> None:  # type: ignore[no-untyped-def]
    def shuffled(x: Expr) -> Expr:
        if isinstance(x, Atom):
            return x
        assert isinstance(x, Sum | Product)
        children = [shuffled(c) for c in x.children]
        rnd.shuffle(children)
        return type(x)(children)

    s = shuffled(e)
    assert s == e
    assert hash(s) == hash(e)
    assert str(s) == str(e)


@given(any_expressions())
def test_nodes_are_flat(e: Expr) -> None:
    def check(x: Expr) -> None:
        if isinstance(x, Sum | Product):
            assert all(type(c) is not type(x) for c in x.children)
            for c in x.children:
                check(c)

    check(e)
    assert _count_atoms(e) >= 1


def test_pickle_in_a_fresh_interpreter_rebuilds_hashes() -> None:
    # string hashes differ between interpreters; unpickled nodes must not keep stale ones
    e = (Atom("SE", 0) * Atom("LIN", 0) + Atom("SE", 0)) * Atom("PER", 1)
    code = (
        "import pickle, sys; from amorgp.kernel_grammar import parse; "
        "e = pickle.loads(sys.stdin.buffer.read()); "
        "assert e == parse('(SE*LIN + SE)@0 * PER@1'); "
        "assert hash(e) == hash(parse('(SE*LIN + SE)@0 * PER@1'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(e), check=True, env=env, timeout=120
    )
    assert pickle.loads(pickle.dumps(e)) == e
