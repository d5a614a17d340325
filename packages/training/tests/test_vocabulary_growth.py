"""Growing a trained network's vocabulary: old kernels unchanged, new ones start as their
stand-ins (the original network's predictions are the oracle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer.api import Amortizer
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import PAPER_VOCABULARY, Vocabulary
from amorgp.training.vocabulary import extend_vocabulary, stand_in_symbol

GROWN = Vocabulary.with_products(("SE", "LIN", "PER", "MAT52"), "paper-mat52")


def test_stand_ins_by_hand() -> None:
    assert stand_in_symbol("MAT52", {"MAT52": "SE"}, PAPER_VOCABULARY) == (
        "SE",
        {"variance": "variance", "lengthscale": "lengthscale"},
    )
    source, names = stand_in_symbol("LIN*MAT52", {"MAT52": "SE"}, PAPER_VOCABULARY)
    assert source == "SE*LIN"
    assert names == {
        "variance": "variance",
        "lin_offset": "lin_offset",
        "mat52_lengthscale": "se_lengthscale",
    }
    source, names = stand_in_symbol("SE*MAT52", {"MAT52": "SE"}, PAPER_VOCABULARY)
    assert source == "SE"
    assert names["mat52_lengthscale"] == names["se_lengthscale"] == "lengthscale"
    with pytest.raises(OptionError, match="no stand-in"):
        stand_in_symbol("MAT52", {}, PAPER_VOCABULARY)


def test_grown_network_predicts_as_before(tiny_checkpoint: Path) -> None:
    base = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    grown_model, cfg = extend_vocabulary(base.model, base.network, GROWN, {"MAT52": "SE"})
    assert cfg.vocabulary == GROWN
    grown = Amortizer(grown_model, base.meta, device="cpu")
    rng = np.random.default_rng(0)
    X, y = rng.random((30, 2)), rng.normal(size=30)
    opts = {"calibrate": False, "starts": 1, "refine": 0}  # the network alone
    for kernel in ("SE + LIN", "SE*PER", "LIN*PER + PER"):
        a = base.infer(X, y, kernel, **opts)
        b = grown.infer(X, y, kernel, **opts)
        np.testing.assert_array_equal(a.params.numpy(), b.params.numpy())
        assert a.noise == b.noise
    # a new kernel starts as its stand-in
    for new, old in (("MAT52", "SE"), ("MAT52*PER", "SE*PER"), ("LIN*MAT52", "SE*LIN")):
        a = base.infer(X, y, old, **opts)
        b = grown.infer(X, y, new, **opts)
        np.testing.assert_array_equal(
            np.sort(a.params.numpy().ravel()), np.sort(b.params.numpy().ravel())
        )


def test_vocabulary_must_extend() -> None:
    small = Vocabulary.with_products(("SE", "LIN"), "small")
    from amorgp.amortizer.networks.config import PRESETS
    from amorgp.amortizer.networks.model import AmortizedGP

    cfg = PRESETS["tiny"].network
    with pytest.raises(OptionError, match="drops"):
        extend_vocabulary(AmortizedGP(cfg), cfg, small, {})


def test_period_tokens_keep_all_but_the_periods(tiny_checkpoint: Path) -> None:
    from amorgp.amortizer.stages.periodogram import period_candidates
    from amorgp.training.vocabulary import add_period_tokens

    base = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    model, cfg = add_period_tokens(base.model, base.network)
    assert cfg.period_tokens
    assert not base.network.period_tokens
    tokens = Amortizer(model, base.meta, device="cpu")
    rng = np.random.default_rng(1)
    X = rng.random((60, 2))
    y = np.sin(2 * np.pi * X[:, 0] / 0.17) + 0.1 * rng.normal(size=60)
    opts = {"calibrate": False, "starts": 1, "refine": 0}  # the network alone
    for kernel in ("SE + LIN", "SE*PER + LIN"):
        a = tokens.infer(X, y, kernel, **opts).hyperparameters
        b = base.infer(X, y, kernel, **opts).hyperparameters
        for key, value in a.items():
            if not key[2].endswith("period"):
                assert value == pytest.approx(b[key], rel=1e-6), key
    # the period: the stages' strongest periodogram peak of input 0 (normalised units)
    Xn = (X - X.min(0)) / np.ptp(X, 0)
    import torch

    peak = period_candidates(torch.tensor(Xn), torch.tensor(y))[0]
    hyp = tokens.infer(X, y, "SE*PER + LIN", **opts).hyperparameters
    got = next(v for (d, _, name), v in hyp.items() if d == 0 and name.endswith("period"))
    assert peak[0] == 0
    assert got == pytest.approx(peak[1], rel=0.01)
    with pytest.raises(OptionError, match="period tokens already"):
        add_period_tokens(model, cfg)


def test_relevance_tokens_keep_the_prediction(tiny_checkpoint: Path) -> None:
    from amorgp.training.vocabulary import add_relevance_tokens

    base = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    model, cfg = add_relevance_tokens(base.model, base.network)
    assert cfg.relevance_tokens
    tokens = Amortizer(model, base.meta, device="cpu")
    rng = np.random.default_rng(2)
    X, y = rng.random((40, 3)), rng.normal(size=40)
    opts = {"calibrate": False, "starts": 1, "refine": 0}  # the network alone
    for kernel in ("SE", "SE*PER + LIN"):
        a = tokens.infer(X, y, kernel, **opts)
        b = base.infer(X, y, kernel, **opts)
        np.testing.assert_allclose(a.params.numpy(), b.params.numpy(), rtol=1e-6)
    with pytest.raises(OptionError, match="relevance tokens already"):
        add_relevance_tokens(model, cfg)
