"""Parser limits and other libraries' kernel names."""

from __future__ import annotations

import sys

import pytest

from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, KernelSyntaxError, parse
from amorgp.kernel_grammar.parser import MAX_DEPTH


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 400, 5 * sys.getrecursionlimit()])
def test_deep_parentheses_are_a_syntax_error_not_a_recursion_error(depth: int) -> None:
    text = "(" * depth + "SE" + ")" * depth
    with pytest.raises(KernelSyntaxError, match="nested deeper") as info:
        parse(text)
    assert info.value.position == MAX_DEPTH  # the first '(' past the limit


def test_nesting_up_to_the_limit_parses() -> None:
    text = "(" * MAX_DEPTH + "SE + PER" + ")" * MAX_DEPTH
    assert parse(text) == parse("SE + PER")


@pytest.mark.parametrize(
    ("alias", "name"),
    [("RBF", "SE"), ("rbf", "SE"), ("Matern52", "MAT52"), ("Linear", "LIN"), ("Periodic", "PER")],
)
def test_other_libraries_names_are_read_as_the_grammars(alias: str, name: str) -> None:
    assert parse(f"{alias} + PER*{alias}") == parse(f"{name} + PER*{name}")


@pytest.mark.parametrize("text", ["Matern", "Matern32", "matern12"])
def test_matern_without_five_halves_is_refused_with_the_right_hint(text: str) -> None:
    with pytest.raises(KernelSyntaxError, match="unknown kernel") as info:
        parse(text)
    assert "MAT52" in info.value.hint
    # for a vocabulary without a Matérn kernel the hint lists only its own symbols
    with pytest.raises(KernelSyntaxError) as info:
        DimWiseStructure.parse(text, 1, PAPER_VOCABULARY)
    assert "no Matérn kernel" in info.value.hint
    listed = info.value.hint.split(": ")[-1].split(", ")
    assert listed == ["SE", "LIN", "PER"]
    assert set(listed) <= set(PAPER_VOCABULARY.symbols)


def test_unknown_name_hint_lists_only_the_vocabulary() -> None:
    with pytest.raises(KernelSyntaxError) as info:
        DimWiseStructure.parse("PERR", 1, PAPER_VOCABULARY)
    assert "did you mean 'PER'" in info.value.hint
    assert "MAT52" not in info.value.hint
    assert "RQ" not in info.value.hint


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("SE*" + "1" * 100_000, "unexpected number '" + "1" * 40 + "'... (100000 characters)"),
        ("SE " + "SE" * 50_000, "unexpected '" + "SE" * 20 + "'... (100000 characters)"),
        ("(SE " + "A" * 100_000, "(found '" + "A" * 40 + "'... (100000 characters) instead)"),
        ("Q" * 100_000, "unknown kernel '" + "Q" * 40 + "'... (100000 characters)"),
        ("SEX" * 33_333 + "SE", "by spaces: '" + "SE x " * 14 + "SE'... (166667 characters)"),
    ],
)
def test_a_100_kb_kernel_text_gives_a_bounded_message(text: str, token: str) -> None:
    """The reason and hint once quoted a whole token: a 100 kB text came back as a
    100 kB message."""
    with pytest.raises(KernelSyntaxError) as info:
        parse(text)
    message = str(info.value)
    assert token in message
    assert len(message) < 500
    assert len(message.splitlines()) <= 4
