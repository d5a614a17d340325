"""Tests of DimWiseStructure, the conversion from expressions, encode and decode."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amorgp.kernel_grammar import (
    EXTENDED_VOCABULARY,
    PAPER_VOCABULARY,
    Atom,
    DimWiseStructure,
    KernelSyntaxError,
    Product,
    Sum,
    base_symbol,
    decode,
    encode,
)
from amorgp.kernel_grammar.testing import structures

P = PAPER_VOCABULARY


def test_constructor_canonicalises_and_sorts() -> None:
    s = DimWiseStructure((("lin*se", "per", "SE"), ("LIN",)))
    assert s.dims == (("SE", "PER", "SE*LIN"), ("LIN",))
    assert s == DimWiseStructure([["SE", "SE*LIN", "PER"], ["lin"]])  # type: ignore[arg-type]
    assert hash(s) == hash(DimWiseStructure((("PER", "SE*LIN", "SE"), ("LIN",))))
    assert s.n_dims == 2
    assert s.n_addends == (3, 1)
    assert s.max_addends == 3
    assert not s.is_uniform


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ((), "at least one input dimension"),
        ((("SE",), ()), "dimension 1 has no addend"),
        ((("SE*SE",),), "dimension 0: base symbol 'SE\\*SE' repeats a factor"),
        ((("SE*LIN*PER",),), "dimension 0: base symbols have at most two factors"),
        ((("FOO",),), "dimension 0: unknown elementary kernel 'FOO'"),
        (("SE",), "expected a sequence of symbol names, got the string 'SE'"),
        ("SE + PER", "use DimWiseStructure.parse for text"),
    ],
)
def test_constructor_errors(dims: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DimWiseStructure(dims)  # type: ignore[arg-type]


def test_parse_uniform_and_per_dimension() -> None:
    s = DimWiseStructure.parse("SE + PER", 3)
    assert s.dims == (("SE", "PER"),) * 3
    assert s.is_uniform
    t = DimWiseStructure.parse("(SE*LIN + SE)@0 * (SE + PER)@1")
    assert t.dims == (("SE", "SE*LIN"), ("SE", "PER"))
    assert str(t) == "(SE + SE*LIN)@0 * (SE + PER)@1"
    assert DimWiseStructure.parse(str(t)) == t


def test_coerce_accepts_text_and_structures_for_the_data() -> None:
    s = DimWiseStructure.parse("(SE + PER)@0 * LIN@1")
    assert DimWiseStructure.coerce("(SE + PER)@0 * LIN@1", 2) == s
    assert DimWiseStructure.coerce(s, 2, PAPER_VOCABULARY) is s
    assert DimWiseStructure.coerce("SE", 3) == DimWiseStructure((("SE",),) * 3)
    with pytest.raises(ValueError, match=r"2 input dimension\(s\) but the data has 3"):
        DimWiseStructure.coerce(s, 3)
    with pytest.raises(ValueError, match="text or a DimWiseStructure, got int"):
        DimWiseStructure.coerce(3, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RQ"):
        DimWiseStructure.coerce("RQ", 1, PAPER_VOCABULARY)
    with pytest.raises(KernelSyntaxError):
        DimWiseStructure.coerce("SE +", 1)


def test_from_expr_distributes_products_of_sums() -> None:
    assert DimWiseStructure.parse("(SE + LIN) * PER", 1).dims == (("SE*PER", "LIN*PER"),)
    assert DimWiseStructure.parse("(SE + LIN) * (PER + MAT52)", 1) == DimWiseStructure(
        (("SE*PER", "LIN*PER", "SE*MAT52", "LIN*MAT52"),)
    )
    # SE*SE is not a base symbol, so (SE + LIN) * (PER + SE) is outside the space
    with pytest.raises(ValueError, match=r"repeats the factor SE"):
        DimWiseStructure.parse("(SE + LIN) * (PER + SE)", 1)
    s = DimWiseStructure.parse("(SE + LIN)@0 * PER@0 * (LIN + PER)@1")
    assert s.dims == (("SE*PER", "LIN*PER"), ("LIN", "PER"))


def test_from_expr_merges_factors_split_across_top_level_product() -> None:
    # SE@0 and LIN@0 are separate children of the top-level product: one 2-gram.
    s = DimWiseStructure.parse("SE@0 * PER@1 * LIN@0")
    assert s.dims == (("SE*LIN",), ("PER",))


@pytest.mark.parametrize(
    ("text", "n_dims", "message"),
    [
        ("SE@0 + PER@1", None, "combines input dimensions \\[0, 1\\] inside a sum"),
        ("SE@0 * SE@1 + LIN@0", None, "combines input dimensions"),
        ("SE * LIN * PER", 1, "product SE\\*LIN\\*PER of 3 elementary kernels"),
        ("(SE + LIN) * PER * SE", 1, "of 3 elementary kernels"),
        ("SE * SE", 2, "repeats the factor SE"),
        ("SE@0 * LIN@0 * PER@0", None, "in input dimension 0 contains the product"),
        ("SE@0 * LIN@2", None, "no kernel on input dimension\\(s\\) \\[1\\]"),
        ("SE@0", 2, "no kernel on input dimension\\(s\\) \\[1\\]"),
        ("SE + PER", None, "has no '@' dimension indices.*give n_dims"),
    ],
)
def test_from_expr_says_why_not_in_space(text: str, n_dims: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DimWiseStructure.parse(text, n_dims)


def test_products_of_many_sums_fail_without_full_expansion() -> None:
    text = " * ".join(["(SE + LIN + PER + MAT52 + RQ)"] * 30)  # 5^30 monomials if expanded
    with pytest.raises(ValueError, match="of 3 elementary kernels"):
        DimWiseStructure.parse(text, 1)


def test_from_expr_argument_errors() -> None:
    with pytest.raises(ValueError, match=r"uses input dimension 3 but the data has 2"):
        DimWiseStructure.from_expr(Atom("SE", 3), 2)
    with pytest.raises(ValueError, match=r"expected a kernel expression"):
        DimWiseStructure.from_expr("SE", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"n_dims must be a positive integer"):
        DimWiseStructure.from_expr(Atom("SE"), 0)
    with pytest.raises(KernelSyntaxError, match=r"out of range"):
        DimWiseStructure.parse("SE@2", 2)


def test_vocabulary_membership() -> None:
    s = DimWiseStructure.parse("SE * MAT52", 1)
    with pytest.raises(ValueError, match=r"symbol SE\*MAT52 .* not in vocabulary 'paper'"):
        DimWiseStructure.parse("SE * MAT52", 1, vocabulary=P)
    assert DimWiseStructure.parse("SE * MAT52", 1, vocabulary=EXTENDED_VOCABULARY) == s


def _expand(e: object) -> list[tuple[tuple[str, int | None], ...]]:
    """Independent oracle: the fully expanded polynomial of an expression as sorted monomials."""
    if isinstance(e, Atom):
        return [((e.kernel, e.dim),)]
    if isinstance(e, Sum):
        return sorted(m for c in e.children for m in _expand(c))
    assert isinstance(e, Product)
    out: list[tuple[tuple[str, int | None], ...]] = [()]
    for c in e.children:
        out = [tuple(sorted(a + b)) for a, b in itertools.product(out, _expand(c))]
    return sorted(out)


@given(structures(EXTENDED_VOCABULARY.symbols))
def test_to_expr_round_trip_and_expansion(s: DimWiseStructure) -> None:
    e = s.to_expr()
    assert DimWiseStructure.from_expr(e) == s
    assert DimWiseStructure.parse(str(s)) == s
    # The expanded polynomial of to_expr() is the product over dims of the sums.
    per_dim = [
        [tuple(sorted((f, d) for f in base_symbol(n).factors)) for n in addends]
        for d, addends in enumerate(s.dims)
    ]
    oracle = sorted(tuple(sorted(sum(choice, ()))) for choice in itertools.product(*per_dim))
    assert _expand(e) == oracle


@given(structures(P.symbols, max_dims=1), st.integers(1, 4))
def test_uniform_text_broadcasts(s: DimWiseStructure, n_dims: int) -> None:
    text = " + ".join(s.dims[0])
    b = DimWiseStructure.parse(text, n_dims)
    assert b.dims == s.dims * n_dims
    assert b.dim_text(0) == text


def test_param_names_follow_symbol_slots() -> None:
    s = DimWiseStructure.parse("(SE*PER + LIN)@0 * SE@1")
    names = s.param_names()
    assert [(n.dim, n.addend, n.symbol, n.param) for n in names] == [
        (0, 0, "LIN", "variance"),
        (0, 0, "LIN", "offset"),
        (0, 1, "SE*PER", "variance"),
        (0, 1, "SE*PER", "se_lengthscale"),
        (0, 1, "SE*PER", "per_lengthscale"),
        (0, 1, "SE*PER", "per_period"),
        (1, 0, "SE", "variance"),
        (1, 0, "SE", "lengthscale"),
    ]
    assert [n.slot for n in names] == [0, 1, 0, 1, 2, 3, 0, 1]
    assert str(names[3]) == "d0.1.SE*PER.se_lengthscale"
    assert s.n_params == len(names)
    specs = s.param_specs()
    assert specs[3][1] is base_symbol("SE*PER").params[1]


@given(st.lists(structures(P.symbols), min_size=1, max_size=5))
def test_encode_decode_round_trip(batch: list[DimWiseStructure]) -> None:
    symbols, mask = encode(batch, P)
    B = len(batch)
    D = max(s.n_dims for s in batch)
    L = max(s.max_addends for s in batch)
    assert symbols.shape == mask.shape == (B, D, L)
    assert symbols.dtype == np.int64
    assert mask.dtype == np.bool_
    for b, s in enumerate(batch):
        for d in range(D):
            for a in range(L):
                present = d < s.n_dims and a < s.n_addends[d]
                assert mask[b, d, a] == present
                if present:
                    assert P.symbol(int(symbols[b, d, a])).name == s.dims[d][a]
                else:
                    assert symbols[b, d, a] == 0
    assert decode(symbols, mask, P) == batch
    # extra padding does not change the decoded structures
    big, big_mask = encode(batch, P, max_dims=D + 2, max_addends=L + 1)
    assert big.shape == (B, D + 2, L + 1)
    assert decode(big, big_mask, P) == batch


def test_decode_ignores_ids_outside_the_mask() -> None:
    symbols, mask = encode([DimWiseStructure.parse("SE + PER", 2)], P, max_addends=3)
    symbols[0, :, 2] = 5
    assert decode(symbols, mask, P) == [DimWiseStructure.parse("SE + PER", 2)]


def test_encode_errors() -> None:
    s = DimWiseStructure.parse("SE + PER + LIN", 2)
    with pytest.raises(ValueError, match=r"structure 0 .* has 2 dimensions > max_dims=1"):
        encode([s], P, max_dims=1)
    with pytest.raises(ValueError, match=r"has 3 addends in one dimension > max_addends=2"):
        encode([s], P, max_addends=2)
    with pytest.raises(ValueError, match=r"structure 1: symbol RQ .* not in vocabulary 'paper'"):
        encode([s, DimWiseStructure((("RQ",),))], P)
    with pytest.raises(ValueError, match=r"structure 0 is a str, not a DimWiseStructure"):
        encode(["SE"], P)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"max_dims must be a positive integer"):
        encode([s], P, max_dims=0)
    symbols, _ = encode([], P, max_dims=2, max_addends=3)
    assert symbols.shape == (0, 2, 3)


def test_decode_errors() -> None:
    symbols, mask = encode([DimWiseStructure.parse("SE@0 * PER@1")], P)
    with pytest.raises(ValueError, match=r"shape \(B, D, L\)"):
        decode(symbols[0], mask[0], P)
    with pytest.raises(ValueError, match=r"symbol_mask shape"):
        decode(symbols, mask[:, :1], P)
    with pytest.raises(ValueError, match=r"must be integers"):
        decode(symbols.astype(float), mask, P)
    with pytest.raises(ValueError, match=r"symbol_mask must be bool"):
        decode(symbols, mask.astype(int), P)
    bad = symbols.copy()
    bad[0, 0, 0] = 7
    with pytest.raises(ValueError, match=r"symbol id 7 under the mask is outside 1..6"):
        decode(bad, mask, P)
    gap = mask.copy()
    gap[0, 0, 0] = False
    with pytest.raises(ValueError, match=r"dimension 0 has no active symbol but a later one has"):
        decode(symbols, gap, P)
    with pytest.raises(ValueError, match=r"structure 0 has no active symbol"):
        decode(symbols, np.zeros_like(mask), P)


def _se(x: np.ndarray, y: np.ndarray, s2: float, ls: float) -> np.ndarray:
    return s2 * np.exp(-((x[:, None] - y[None, :]) ** 2) / (2 * ls**2))


def _per(x: np.ndarray, y: np.ndarray, s2: float, ls: float, p: float) -> np.ndarray:
    r = np.abs(x[:, None] - y[None, :])
    return s2 * np.exp(-(np.sin(np.pi * r / p) ** 2) / (2 * ls**2))


def test_reference_against_closed_form() -> None:
    rng = np.random.default_rng(0)
    X1, X2 = rng.uniform(size=(7, 2)), rng.uniform(size=(5, 2))
    s = DimWiseStructure.parse("(SE + SE*LIN)@0 * PER@1")
    theta = np.full((3, 4, 5), 7.0)  # padding entries are ignored
    theta[0, 0, :2] = [1.5, 0.3]  # SE: variance, lengthscale
    theta[0, 1, :3] = [0.7, 0.2, 0.4]  # SE*LIN: variance, se_lengthscale, lin_offset
    theta[1, 0, :3] = [2.0, 0.5, 0.6]  # PER: variance, lengthscale, period
    x, y = X1[:, 0], X2[:, 0]
    dim0 = _se(x, y, 1.5, 0.3) + _se(x, y, 0.7, 0.2) * (np.outer(x, y) + 0.4)
    dim1 = _per(X1[:, 1], X2[:, 1], 2.0, 0.5, 0.6)
    np.testing.assert_allclose(s.reference(X1, X2, theta), dim0 * dim1, rtol=1e-13)


@given(structures(P.symbols, max_dims=3, max_addends=3))
def test_reference_is_psd_and_factorises_over_dimensions(s: DimWiseStructure) -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(10, s.n_dims))
    theta = rng.uniform(0.2, 1.5, size=(s.n_dims, s.max_addends, P.max_params))
    K = s.reference(X, X, theta)
    assert np.linalg.eigvalsh(K).min() >= -1e-9 * np.abs(K).max()
    per_dim = [
        DimWiseStructure((a,)).reference(X[:, d], X[:, d], theta[d : d + 1])
        for d, a in enumerate(s.dims)
    ]
    np.testing.assert_allclose(K, np.prod(per_dim, axis=0), rtol=1e-12)


def test_reference_errors() -> None:
    s = DimWiseStructure.parse("SE + PER", 2)
    X = np.zeros((3, 2))
    ok = np.ones((2, 2, 3))
    with pytest.raises(ValueError, match=r"X1 must have shape \(N, 2\)"):
        s.reference(X[:, :1], X, ok)
    with pytest.raises(ValueError, match=r"params must have shape \(>= 2, >= 2, >= 3\)"):
        s.reference(X, X, np.ones((2, 2, 2)))
    bad = ok.copy()
    bad[1, 1, 2] = -1.0
    with pytest.raises(ValueError, match=r"parameters of PER \(dim 1, addend 1\) must be"):
        s.reference(X, X, bad)
    with pytest.raises(ValueError, match="must be finite"):
        s.reference(np.full((3, 2), np.nan), X, ok)


def test_param_units_follow_param_names() -> None:
    """Each parameter's unit under the normalisation, in the order of ``param_names``:
    SE's lengthscale and PER's period are input lengths, PER's lengthscale is unit-free,
    the variances of stationary kernels are variances and LIN's parameters have no exact
    original value."""
    from amorgp.core.units import Unit

    s = DimWiseStructure.parse("(SE + PER)@0 * LIN@1", 2)
    names = [(n.dim, n.symbol, n.param) for n in s.param_names()]
    assert names == [
        (0, "SE", "variance"),
        (0, "SE", "lengthscale"),
        (0, "PER", "variance"),
        (0, "PER", "lengthscale"),
        (0, "PER", "period"),
        (1, "LIN", "variance"),
        (1, "LIN", "offset"),
    ]
    V, L, F, X = Unit.VARIANCE, Unit.INPUT, Unit.FREE, Unit.INEXACT
    assert s.param_units() == [V, L, V, F, L, X, X]
