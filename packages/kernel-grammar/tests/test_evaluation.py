"""Tests of the paper's evaluation set."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from amorgp.kernel_grammar import (
    EXTENDED_VOCABULARY,
    PAPER_VOCABULARY,
    DimWiseStructure,
    StructureTemplate,
    Vocabulary,
    paper_evaluation_set,
)


def test_shape_of_the_set() -> None:
    templates = paper_evaluation_set(0)
    assert len(templates) == 24
    assert [len(t) for t in templates] == [1] * 6 + [2] * 6 + [3] * 6 + [4] * 6
    assert len(set(templates)) == 24
    for t in templates:
        assert len(set(t.symbols)) == len(t.symbols)  # drawn without replacement
        assert set(t.symbols) <= set(PAPER_VOCABULARY.symbols)
    # with 6 symbols, the six singles are the vocabulary itself
    assert {t.symbols[0] for t in templates[:6]} == set(PAPER_VOCABULARY.symbols)


def test_reproducible_from_seed() -> None:
    assert paper_evaluation_set(3) == paper_evaluation_set(3)
    assert paper_evaluation_set(np.random.default_rng(3)) == paper_evaluation_set(3)
    assert any(paper_evaluation_set(s) != paper_evaluation_set(0) for s in range(1, 4))


def test_broadcast() -> None:
    t = StructureTemplate(("per", "SE"))
    assert t.symbols == ("SE", "PER")
    assert str(t) == "SE + PER"
    assert t.broadcast(3) == DimWiseStructure.parse("SE + PER", 3)
    with pytest.raises(ValueError, match=r"n_dims must be a positive integer"):
        t.broadcast(0)
    with pytest.raises(ValueError, match=r"non-empty sequence"):
        StructureTemplate(())


def test_other_vocabularies_and_errors() -> None:
    templates = paper_evaluation_set(1, EXTENDED_VOCABULARY)
    assert len(set(templates)) == 24
    small = Vocabulary(("SE", "LIN", "PER"))
    assert comb(3, 1) < 6
    with pytest.raises(ValueError, match=r"has 3 symbols: cannot draw 6 distinct sets of 1"):
        paper_evaluation_set(0, small)
    assert len(paper_evaluation_set(0, small, per_size=3, sizes=(1, 2))) == 6
