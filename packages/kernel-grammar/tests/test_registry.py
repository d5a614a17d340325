"""Tests of elementary kernels, base symbols and vocabularies."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from amorgp.core.units import Unit
from amorgp.kernel_grammar import (
    ALIASES,
    ELEMENTARY,
    EXTENDED_VOCABULARY,
    PAPER_VOCABULARY,
    ElementaryKernel,
    ParamKind,
    Vocabulary,
    base_symbol,
    canonical_symbol_name,
    parse,
    register_elementary,
    unregister_elementary,
)
from amorgp.kernel_grammar.testing import check_base_symbol

# Every elementary kernel and every 2-gram product, discovered from the registry: a newly
# registered kernel is tested the day it is added.
ALL_SYMBOLS = Vocabulary.with_products(tuple(ELEMENTARY)).symbols


@pytest.mark.parametrize("name", ALL_SYMBOLS)
def test_conformance(name: str) -> None:
    check_base_symbol(name, np.random.default_rng(zlib.crc32(name.encode())), n=15)


@pytest.mark.parametrize("name", ALL_SYMBOLS)
def test_parameter_lists(name: str) -> None:
    sym = base_symbol(name)
    assert sym.param_names[0] == "variance"
    assert sym.param_kinds[0] is ParamKind.VARIANCE
    assert list(sym.param_names).count("variance") == 1  # one variance, also for products
    expected = 1 + sum(len(ELEMENTARY[f].params) for f in sym.factors)
    assert len(sym.params) == expected
    if len(sym.factors) == 2:
        for f in sym.factors:
            for p in ELEMENTARY[f].params:
                assert f"{f.lower()}_{p.name}" in sym.param_names


def _x(n: int = 9) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, n)


def test_closed_forms() -> None:
    x, y = _x(), _x(5) + 0.3
    r = x[:, None] - y[None, :]
    np.testing.assert_allclose(
        base_symbol("SE").reference(x, y, {"variance": 1.7, "lengthscale": 0.3}),
        1.7 * np.exp(-(r**2) / (2 * 0.3**2)),
        rtol=1e-13,
    )
    np.testing.assert_allclose(
        base_symbol("LIN").reference(x, y, {"variance": 0.6, "offset": 0.2}),
        0.6 * np.outer(x, y) + 0.2,
        rtol=1e-13,
    )
    np.testing.assert_allclose(
        base_symbol("PER").reference(x, y, {"variance": 2.0, "lengthscale": 0.4, "period": 0.5}),
        2.0 * np.exp(-(np.sin(np.pi * np.abs(r) / 0.5) ** 2) / (2 * 0.4**2)),
        rtol=1e-13,
    )
    np.testing.assert_allclose(
        base_symbol("SE*LIN").reference(
            x, y, {"variance": 1.3, "se_lengthscale": 0.2, "lin_offset": 0.7}
        ),
        1.3 * np.exp(-(r**2) / (2 * 0.2**2)) * (np.outer(x, y) + 0.7),
        rtol=1e-13,
    )


def test_against_scikit_learn_kernels() -> None:
    kernels = pytest.importorskip("sklearn.gaussian_process.kernels")
    x = _x(11)
    X = x[:, None]
    cases = [
        ("SE", {"variance": 1.0, "lengthscale": 0.3}, kernels.RBF(0.3)),
        ("MAT52", {"variance": 1.0, "lengthscale": 0.25}, kernels.Matern(0.25, nu=2.5)),
        (
            "RQ",
            {"variance": 1.0, "lengthscale": 0.4, "alpha": 1.5},
            kernels.RationalQuadratic(0.4, 1.5),
        ),
        # scikit-learn/GPyTorch periodic: exp(-2 sin^2(pi r / p) / l^2), so l_sk = 2 l
        (
            "PER",
            {"variance": 1.0, "lengthscale": 0.35, "period": 0.6},
            kernels.ExpSineSquared(0.7, 0.6),
        ),
        # DotProduct: sigma_0^2 + x x'
        ("LIN", {"variance": 1.0, "offset": 0.09}, kernels.DotProduct(0.3)),
    ]
    for name, params, oracle in cases:
        np.testing.assert_allclose(
            base_symbol(name).reference(x, x, params), oracle(X), rtol=1e-10, err_msg=name
        )


def test_base_symbol_lookup_and_errors() -> None:
    assert base_symbol("lin * se").name == "SE*LIN"
    assert base_symbol("PER*SE") == base_symbol("SE*PER")
    assert canonical_symbol_name(["per", "lin"]) == "LIN*PER"
    with pytest.raises(ValueError, match="unknown elementary kernel 'FOO'"):
        base_symbol("FOO")
    with pytest.raises(ValueError, match="at most two factors"):
        base_symbol("SE*LIN*PER")
    with pytest.raises(ValueError, match="repeats a factor"):
        base_symbol("SE*SE")
    with pytest.raises(ValueError, match="missing parameters"):
        base_symbol("SE").reference([0.0], [1.0], {"variance": 1.0})


def test_register_elementary_errors() -> None:
    with pytest.raises(ValueError, match="upper-case alphanumerics"):
        register_elementary(ElementaryKernel("se2x-", "", (), lambda a, b, p: a))
    with pytest.raises(ValueError, match="already registered"):
        register_elementary(ElementaryKernel("SE", "", (), lambda a, b, p: a))


def test_aliases_and_unit_metadata_are_declared_with_each_kernel() -> None:
    assert ALIASES == {
        "RBF": "SE",
        "SQEXP": "SE",
        "SQUAREDEXPONENTIAL": "SE",
        "LINEAR": "LIN",
        "PERIODIC": "PER",
        "EXPSINESQUARED": "PER",
        "MATERN52": "MAT52",
        "MATERN_52": "MAT52",
        "RATIONALQUADRATIC": "RQ",
    }
    assert {n: k.stationary for n, k in ELEMENTARY.items()} == {
        "SE": True,
        "LIN": False,
        "PER": True,
        "MAT52": True,
        "RQ": True,
    }
    assert ELEMENTARY["PER"].input_scaled == ("period",)  # its lengthscale is unit-free
    assert ELEMENTARY["SE"].input_scaled == ("lengthscale",)
    assert ELEMENTARY["RQ"].input_scaled == ("lengthscale",)  # alpha has no units
    assert ELEMENTARY["LIN"].input_scaled == ()


def test_param_units_follow_the_kernels_forms() -> None:
    """How each parameter maps back to original units, written out by hand from the
    kernels' formulas: a length along the input scales with the column range; PER's
    lengthscale divides sin^2(pi r / p) and is unit-free; LIN's x x' is not of the same
    form after the affine input map; RQ's alpha is reported in normalised units only."""
    inp, free, var, no = Unit.INPUT, Unit.FREE, Unit.VARIANCE, Unit.INEXACT
    expected = {
        "SE": (var, inp),
        "PER": (var, free, inp),
        "LIN": (no, no),
        "RQ": (var, inp, no),
        "MAT52": (var, inp),
        "SE*PER": (var, inp, free, inp),
        "SE*LIN": (no, inp, no),
        "LIN*PER": (no, no, free, inp),
    }
    for name, units in expected.items():
        sym = base_symbol(name)
        assert sym.param_units == units, (name, sym.param_names)


def test_register_and_unregister_a_kernel_with_aliases() -> None:
    def unit(a: np.ndarray, b: np.ndarray, p: dict[str, float]) -> np.ndarray:
        return np.ones((a.size, b.size))

    with pytest.raises(ValueError, match="aliases must be new"):
        register_elementary(ElementaryKernel("CONSTX", "s^2", (), unit, aliases=("RBF",)))
    with pytest.raises(ValueError, match="unknown parameters"):
        ElementaryKernel("CONSTX", "s^2", (), unit, input_scaled=("lengthscale",))
    assert "CONSTX" not in ELEMENTARY
    register_elementary(ElementaryKernel("CONSTX", "s^2", (), unit, aliases=("CONSTANT",)))
    try:
        assert str(parse("constant + SE")) == str(parse("CONSTX + SE"))
        assert base_symbol("CONSTX*SE").name == "SE*CONSTX"
    finally:
        unregister_elementary("CONSTX")
    assert "CONSTX" not in ELEMENTARY
    assert "CONSTANT" not in ALIASES
    with pytest.raises(ValueError, match="unknown elementary kernel"):
        base_symbol("CONSTX")
    with pytest.raises(ValueError, match="not registered"):
        unregister_elementary("CONSTX")


def test_paper_vocabulary() -> None:
    assert PAPER_VOCABULARY.symbols == ("SE", "LIN", "PER", "SE*LIN", "SE*PER", "LIN*PER")
    assert [PAPER_VOCABULARY.id(s) for s in PAPER_VOCABULARY.symbols] == [1, 2, 3, 4, 5, 6]
    assert PAPER_VOCABULARY.id("per*se") == 5
    assert PAPER_VOCABULARY.symbol(4).name == "SE*LIN"
    assert PAPER_VOCABULARY.max_params == 4  # SE*PER: variance, se_l, per_l, per_p
    assert PAPER_VOCABULARY.elementary == ("SE", "LIN", "PER")
    assert "lin*per" in PAPER_VOCABULARY
    assert "RQ" not in PAPER_VOCABULARY
    assert "FOO" not in PAPER_VOCABULARY
    assert len(EXTENDED_VOCABULARY) == 5 + 10


def test_param_kind_table_matches_symbols() -> None:
    for vocab in (PAPER_VOCABULARY, EXTENDED_VOCABULARY):
        kinds, mask = vocab.param_kind_table()
        assert kinds.shape == mask.shape == (len(vocab) + 1, vocab.max_params)
        assert not mask[0].any()
        for i, sym in enumerate(vocab, start=1):
            assert mask[i].sum() == len(sym.params)
            assert [list(ParamKind)[k] for k in kinds[i, mask[i]]] == list(sym.param_kinds)


def test_vocabulary_serialisation_and_errors() -> None:
    d = EXTENDED_VOCABULARY.to_dict()
    assert Vocabulary.from_dict(d) == EXTENDED_VOCABULARY
    with pytest.raises(ValueError, match="not a vocabulary description"):
        Vocabulary.from_dict({"name": "x"})
    with pytest.raises(ValueError, match="duplicate symbols"):
        Vocabulary(("SE", "se"))
    with pytest.raises(ValueError, match="at least one symbol"):
        Vocabulary(())
    with pytest.raises(ValueError, match="not in vocabulary 'paper'"):
        PAPER_VOCABULARY.id("RQ")
    with pytest.raises(ValueError, match=r"outside 1..6 \(0 is padding\)"):
        PAPER_VOCABULARY.symbol(0)


@pytest.mark.parametrize("name", EXTENDED_VOCABULARY.symbols)
def test_scale_slots_scale_the_kernel(name: str) -> None:
    """Multiplying a symbol's scale slots by ``c`` multiplies its dense reference by ``c``
    (LIN alone, ``s^2 x x' + c^2``, needs its constant too; the variance alone is not
    enough there)."""
    sym = base_symbol(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.uniform(-1.0, 2.0, 7)
    params = {p: float(rng.uniform(0.5, 2.0)) for p in sym.param_names}
    scaled = dict(params)
    for slot in sym.scale_slots:
        scaled[sym.param_names[slot]] *= 3.0
    np.testing.assert_allclose(sym.reference(x, x, scaled), 3.0 * sym.reference(x, x, params),
                               rtol=1e-12)  # fmt: skip
    if sym.scale_slots != (0,):
        only_var = dict(params, variance=3.0 * params["variance"])
        assert not np.allclose(sym.reference(x, x, only_var), 3.0 * sym.reference(x, x, params))
    row = EXTENDED_VOCABULARY.scale_slot_table()[EXTENDED_VOCABULARY.id(name)]
    assert np.flatnonzero(row).tolist() == list(sym.scale_slots)
