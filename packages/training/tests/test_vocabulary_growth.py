"""Growing a trained network's vocabulary: old kernels unchanged, new ones start as their
stand-ins (the original network's predictions are the oracle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_learned_gate_opens_from_two_cycles(tiny_checkpoint: Path) -> None:
    """A sine of 2.5 cycles over the input: the fixed gate (three cycles) keeps the
    network's own period, the converted learnt gate (two cycles, correction zero)
    follows the periodogram's peak, and a correction of -10 closes it again; the oracle
    is the blend ``anchor^g own^(1-g)`` with ``g`` written out by hand."""
    import torch

    from amorgp.amortizer.networks.config import NetworkConfig
    from amorgp.amortizer.networks.period_tokens import GATE_SCALE, strongest_periods
    from amorgp.training.vocabulary import add_learned_gate, add_period_tokens

    base = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    with pytest.raises(OptionError, match="period tokens"):
        add_learned_gate(base.model, base.network)
    model, cfg = add_period_tokens(base.model, base.network)
    gated_model, gated_cfg = add_learned_gate(model, cfg)
    assert gated_cfg.learned_gate
    assert not cfg.learned_gate
    assert NetworkConfig.from_dict(gated_cfg.to_dict()) == gated_cfg
    assert "learned_gate" not in cfg.to_dict()  # older configs stay as they were
    with pytest.raises(ValueError, match="needs period_tokens"):
        NetworkConfig(learned_gate=True)
    with pytest.raises(OptionError, match="learned gate already"):
        add_learned_gate(gated_model, gated_cfg)

    rng = np.random.default_rng(3)
    X = np.sort(rng.random(80))[:, None]
    y = np.sin(2 * np.pi * 2.5 * (X[:, 0] - X.min()) / np.ptp(X)) + 0.05 * rng.normal(size=80)
    opts = {"calibrate": False, "starts": 1, "refine": 0}  # the network alone
    kernel = "SE*PER + LIN"
    every = {"device": "cpu", "encoder_points": 80}  # the encoder reads every point
    fixed = Amortizer(model, base.meta, **every).infer(X, y, kernel, **opts)
    gated = Amortizer(gated_model, base.meta, **every)
    Xn = torch.tensor((X - X.min(0)) / np.ptp(X, 0))
    per, power, fap = (float(v[0, 0]) for v in strongest_periods(Xn[None], torch.tensor(y)[None]))
    assert 2.4 < 1.0 / per < 2.6
    assert power > 0.5
    assert fap < 1e-6

    def gate(cycles: float, correction: float = 0.0) -> float:
        sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
        g = sig((power - 0.2) / 0.02) * sig((1.0 / per - cycles) / 0.1) / (1.0 + fap / 0.01)
        g = min(max(g, 1e-6), 1.0 - 1e-6)
        return float(sig(np.log(g / (1.0 - g)) + correction)) if correction else g

    slot = [i for i, name in enumerate(fixed.hyperparameters) if name[2].endswith("period")]
    assert len(slot) == 1
    at = slot_index(fixed, slot[0])
    flat = fixed.params.flatten()
    other = [i for i in range(flat.numel()) if i != at]
    period_fixed = float(flat[at])
    g3 = gate(3.0)
    log_own = (np.log(period_fixed) - g3 * np.log(per)) / (1.0 - g3)
    for correction in (0.0, -10.0):
        assert gated_model.gate_proj is not None
        with torch.no_grad():
            gated_model.gate_proj.bias.fill_(correction / GATE_SCALE)
        got = gated.infer(X, y, kernel, **opts).params.flatten()
        g = gate(2.0, correction)
        want = np.exp(g * np.log(per) + (1.0 - g) * log_own)
        assert float(got[at]) == pytest.approx(want, rel=1e-4)
        np.testing.assert_allclose(got[other].numpy(), flat[other].numpy(), rtol=1e-6)
    assert gate(2.0) > 0.9 > 0.01 > g3  # the case is one the two gates tell apart


def slot_index(result: Any, k: int) -> int:
    """The flat index in ``result.params (D, L, P)`` of its ``k``-th named
    hyperparameter (keys ``(dimension, addend, name)``, each addend's in slot order)."""
    names = list(result.hyperparameters)
    d, addend, _ = names[k]
    slot = [n[:2] for n in names[:k]].count((d, addend))
    _, L, P = result.params.shape
    return (d * L + addend) * P + slot


def test_converted_checkpoint_keeps_its_recipe_and_predictions(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m amorgp.training.vocabulary``: the converted checkpoint has both kinds of
    token and the source's training recipe, and predicts the source's relevance-only
    conversion's hyperparameters on data without a periodic kernel; an existing folder
    and a request for nothing are one-line errors."""
    from amorgp.amortizer.networks.checkpoint import load_checkpoint
    from amorgp.training.vocabulary import add_relevance_tokens, main

    main([str(tiny_checkpoint), str(tmp_path / "both")])
    assert capsys.readouterr().out.strip() == str(tmp_path / "both")
    got = load_checkpoint(tmp_path / "both")
    assert got.network.period_tokens
    assert got.network.relevance_tokens
    assert got.meta["train"] == load_checkpoint(tiny_checkpoint).meta["train"]
    base = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    model, _ = add_relevance_tokens(base.model, base.network)
    rng = np.random.default_rng(3)
    X, y = rng.random((30, 2)), rng.normal(size=30)
    opts = {"calibrate": False, "starts": 1, "refine": 0}
    a = Amortizer.from_pretrained(tmp_path / "both", device="cpu").infer(X, y, "SE", **opts)
    b = Amortizer(model, base.meta, device="cpu").infer(X, y, "SE", **opts)
    np.testing.assert_allclose(a.params.numpy(), b.params.numpy(), rtol=1e-6)
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "both"), str(tmp_path / "both")])
    assert exc.value.code == 2
    assert "exists" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tiny_checkpoint), str(tmp_path / "none"), "--no-period", "--no-relevance"])
    assert "nothing to add" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_converted_checkpoint_counts_the_datasets_seen_before(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The conversion keeps the source's training record, so a GPU chunk started from the
    converted weights logs the datasets it added, not the total minus all earlier ones."""
    from amorgp.amortizer.networks.checkpoint import load_checkpoint
    from amorgp.amortizer.testing import edited_checkpoint
    from amorgp.training.gpu_chunk import phase1_datasets
    from amorgp.training.vocabulary import convert_checkpoint

    history = [{"phase": 1, "datasets_seen": 1000}, {"phase": 2, "datasets_seen": 64}]
    progress = {"phase": 1, "datasets_seen": 300, "step": 3}
    src = edited_checkpoint(
        tiny_checkpoint, tmp_path / "src", {"history": history, "progress": progress}
    )
    got = load_checkpoint(convert_checkpoint(src, tmp_path / "tokens")).meta
    assert got["history"] == history
    assert got["progress"] == progress
    assert phase1_datasets(got) == 1300


def test_conversion_with_a_learnt_gate(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--learned-gate`` adds the learnt gate to the tokens (or to a network that reads
    them already) and predicts as the network without it wherever no period is anchored
    (here: no periodic kernel); without period tokens it is a one-line error."""
    from amorgp.amortizer.networks.checkpoint import load_checkpoint
    from amorgp.training.vocabulary import main

    main([str(tiny_checkpoint), str(tmp_path / "tokens")])
    main([str(tmp_path / "tokens"), str(tmp_path / "gate"), "--learned-gate"])
    capsys.readouterr()
    got = load_checkpoint(tmp_path / "gate").network
    assert got.learned_gate
    assert got.period_tokens
    assert got.relevance_tokens
    rng = np.random.default_rng(5)
    X, y = rng.random((30, 2)), rng.normal(size=30)
    opts = {"calibrate": False, "starts": 1, "refine": 0}
    a = Amortizer.from_pretrained(tmp_path / "gate", device="cpu").infer(X, y, "SE", **opts)
    b = Amortizer.from_pretrained(tmp_path / "tokens", device="cpu").infer(X, y, "SE", **opts)
    np.testing.assert_allclose(a.params.numpy(), b.params.numpy(), rtol=1e-6)
    with pytest.raises(SystemExit) as exc:
        main([str(tiny_checkpoint), str(tmp_path / "bad"), "--no-period", "--learned-gate"])
    assert exc.value.code == 2
    assert "period tokens" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
