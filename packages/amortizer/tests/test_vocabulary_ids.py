"""The token ids of the bundled networks are pinned: their weights index symbol embeddings
by these ids, so no change to the base-kernel registry (a new kernel included) may move
them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amorgp.amortizer.networks.bundled import PRETRAINED_ROOT, pretrained_names
from amorgp.kernel_grammar import (
    ELEMENTARY,
    PAPER_VOCABULARY,
    ElementaryKernel,
    ParamKind,
    ParamSpec,
    Vocabulary,
    base_symbol,
    register_elementary,
    unregister_elementary,
)
from amorgp.kernel_grammar.priors import Gamma

PAPER = {"SE": 1, "LIN": 2, "PER": 3, "SE*LIN": 4, "SE*PER": 5, "LIN*PER": 6}
PINNED = {
    "default": {
        "SE": 1,
        "LIN": 2,
        "PER": 3,
        "MAT52": 4,
        "SE*LIN": 5,
        "SE*PER": 6,
        "SE*MAT52": 7,
        "LIN*PER": 8,
        "LIN*MAT52": 9,
        "PER*MAT52": 10,
    },
    "ahgp-se-ard-d4-v1": {"SE": 1},
}


def _ids(vocab: Vocabulary) -> dict[str, int]:
    return {name: vocab.id(name) for name in vocab.symbols}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_bundled_networks_keep_their_token_ids(name: str) -> None:
    assert name in pretrained_names()
    stored = json.loads((PRETRAINED_ROOT / name / "checkpoint.json").read_text())
    vocab = Vocabulary.from_dict(stored["network"]["vocabulary"])
    assert list(stored["network"]["vocabulary"]["symbols"]) == list(PINNED[name])
    assert _ids(vocab) == PINNED[name]


def test_the_paper_vocabulary_and_the_registry_order_are_pinned() -> None:
    assert _ids(PAPER_VOCABULARY) == PAPER
    assert list(ELEMENTARY)[:5] == ["SE", "LIN", "PER", "MAT52", "RQ"]


def test_a_new_kernel_moves_no_id() -> None:
    def unit(x1: np.ndarray, x2: np.ndarray, p: dict[str, float]) -> np.ndarray:
        return np.exp(-np.abs(np.subtract.outer(x1, x2)) / p["lengthscale"])

    spec = ParamSpec("lengthscale", ParamKind.LENGTHSCALE, Gamma(2.0, 5.0))
    register_elementary(ElementaryKernel("AAA", "s^2 exp(-|x-x'| / l)", (spec,), unit))
    try:
        assert _ids(PAPER_VOCABULARY) == PAPER
        assert base_symbol("PER*SE").name == "SE*PER"  # a name sorts by registry order
        assert base_symbol("AAA*SE").name == "SE*AAA"  # new kernels sort last
        stored = json.loads((PRETRAINED_ROOT / "default" / "checkpoint.json").read_text())
        assert _ids(Vocabulary.from_dict(stored["network"]["vocabulary"])) == PINNED["default"]
    finally:
        unregister_elementary("AAA")
