"""Tests of the parser: syntax variants, round trip, error positions and hints."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amorgp.kernel_grammar import Atom, Expr, KernelSyntaxError, parse
from amorgp.kernel_grammar.testing import any_expressions

SE, LIN, PER = Atom("SE"), Atom("LIN"), Atom("PER")


@pytest.mark.parametrize(
    "text",
    ["SE + PER", "se+per", "  Per +   sE ", "(SE) + ((PER))", "PER + SE"],
)
def test_case_whitespace_and_parentheses_are_free(text: str) -> None:
    assert parse(text) == SE + PER


@pytest.mark.parametrize("op", ["*", "x", "X", "×"])
def test_product_spellings(op: str) -> None:
    assert parse(f"SE {op} LIN") == SE * LIN
    assert parse(f"(SE){op}(LIN)") == SE * LIN


def test_precedence_product_binds_tighter() -> None:
    assert parse("SE + LIN * PER") == SE + LIN * PER
    assert parse("(SE + LIN) * PER") == (SE + LIN) * PER


def test_per_dimension_syntax() -> None:
    e = parse("(SE x LIN + SE)@0 * (SE + PER)@1")
    expected = (Atom("SE", 0) * Atom("LIN", 0) + Atom("SE", 0)) * (Atom("SE", 1) + Atom("PER", 1))
    assert e == expected
    assert parse("SE@0*LIN@0 + SE@0") == (SE * LIN + SE).at(0)
    assert parse("SE @ 12") == Atom("SE", 12)


def test_n_dims_accepts_valid_indices() -> None:
    assert parse("SE@1", n_dims=2) == Atom("SE", 1)
    with pytest.raises(ValueError, match=r"n_dims must be a positive integer"):
        parse("SE", n_dims=0)
    with pytest.raises(ValueError, match=r"must be a string"):
        parse(3)  # type: ignore[arg-type]


@given(any_expressions())
def test_round_trip(e: Expr) -> None:
    text = str(e)
    assert parse(text) == e
    assert str(parse(text)) == text
    assert parse(text.lower().replace("*", " x ")) == e


def _error(text: str, n_dims: int | None = None) -> KernelSyntaxError:
    with pytest.raises(KernelSyntaxError) as info:
        parse(text, n_dims)
    assert isinstance(info.value, ValueError)
    return info.value


def _caret_column(err: KernelSyntaxError) -> int:
    lines = str(err).splitlines()
    assert lines[1] == "  " + err.text.replace("\t", " ").replace("\n", " ")
    return lines[2].index("^") - 2


@pytest.mark.parametrize(
    ("text", "n_dims", "position", "reason", "hint"),
    [
        ("SE + PRE", None, 5, "unknown kernel 'PRE'", "did you mean 'PER'?"),
        ("lni", None, 0, "unknown kernel 'lni'", "did you mean 'LIN'?"),
        ("SE + QQQQQQQ", None, 5, "unknown kernel 'QQQQQQQ'", "known kernels: SE, LIN, PER"),
        ("SE1 x LIN1", None, 0, "unknown kernel 'SE1'", "write 'SE@1' for dimension 1"),
        ("SE + MAT522", None, 5, "unknown kernel 'MAT522'", "write 'MAT52@2'"),
        ("SExLIN", None, 0, "unknown kernel 'SExLIN'", "'SE x LIN'"),
        ("(SE + PER", None, 0, "'(' is never closed", "add a ')'"),
        ("((SE + PER) * LIN", None, 0, "'(' is never closed", "add a ')'"),
        ("SE + PER)", None, 8, "')' without a matching '('", "remove this ')'"),
        ("SE + ()", None, 6, "unbalanced parentheses or empty group", "a kernel must come"),
        ("SE@2 * LIN@0", 2, 3, "dimension index 2 out of range for data with 2", "0..1"),
        ("SE@1", 1, 3, "out of range for data with 1 input dimension", "0..0"),
        ("SE@0 + PER", None, 7, "kernel without '@' mixed", "either index every kernel"),
        ("SE * (PER + LIN)@1", None, 0, "kernel without '@' mixed", "either index every"),
        ("(SE@0 + LIN@0)@1", None, 14, "dimension given twice", "either on the group"),
        ("SE@", None, 3, "expected a dimension index after '@'", "'SE@0'"),
        ("SE@x", None, 3, "expected a dimension index after '@'", "count from 0"),
        ("", None, 0, "empty kernel expression", "'SE + PER'"),
        ("SE +", None, 4, "expression ends too early", "a kernel or '('"),
        ("SE ? PER", None, 3, "unexpected character '?'", "'+', '*'"),
        ("SE PER", None, 3, "unexpected 'PER'", "combine kernels with '+' or '*'"),
        ("SE + 1", None, 5, "unexpected number '1'", "written after '@'"),
        ("SE + *", None, 5, "unexpected '*'", "a kernel name or '('"),
    ],
)
def test_errors_show_position_caret_and_hint(
    text: str, n_dims: int | None, position: int, reason: str, hint: str
) -> None:
    err = _error(text, n_dims)
    assert err.position == position
    assert _caret_column(err) == position
    assert reason in err.reason
    assert hint in err.hint
    assert reason in str(err)
    assert f"hint: {err.hint}" in str(err)


def test_caret_underlines_the_whole_token() -> None:
    err = _error("SE + SQUARED")
    assert err.length == len("SQUARED")
    assert str(err).splitlines()[2] == "  " + " " * 5 + "^" * 7


@given(st.text(alphabet="SELINPRMAT52Qqx×*+()@0123 \t\n?", max_size=25))
def test_any_text_parses_or_raises_a_syntax_error(text: str) -> None:
    error: KernelSyntaxError | None = None
    try:
        e = parse(text, n_dims=3)
    except KernelSyntaxError as err:
        error = err
    if error is None:
        assert parse(str(e)) == e
    else:
        assert 0 <= error.position <= len(text)
        # the text is shown on one line (tabs and newlines as spaces) so the caret aligns
        shown = text.replace("\t", " ").replace("\n", " ")
        assert str(error).splitlines()[1] == f"  {shown}"
        assert _caret_column(error) == error.position


def test_syntax_error_pickles() -> None:
    err = _error("SE + PRE")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, KernelSyntaxError)
    assert (back.position, back.hint, str(back)) == (err.position, err.hint, str(err))
