"""``shorten``: input echoed in an error message is bounded."""

from __future__ import annotations

from amorgp.core.errors import shorten


def test_short_text_is_kept_whole() -> None:
    assert shorten("SE + PER") == "SE + PER"
    assert shorten("x" * 80) == "x" * 80


def test_long_text_is_cut_and_its_length_said() -> None:
    text = "SE+" * 33_334  # 100 002 characters
    out = shorten(text)
    assert out == "SE+" * 26 + "SE... (100002 characters)"
    assert len(out) < 120


def test_the_limit_and_non_strings() -> None:
    assert shorten("abcdef", 3) == "abc... (6 characters)"
    assert shorten(list(range(3))) == "[0, 1, 2]"
    assert shorten("it's") == "it's"
    assert shorten(["it's"]) == '["it\'s"]'


def test_an_integer_past_the_digit_limit_is_described_by_its_size() -> None:
    assert shorten(2**20_000) == "<an integer of 20001 bits>"


def test_quoted_strings() -> None:
    assert shorten("SE", quote=True) == "'SE'"
    assert shorten("ab" * 50, 4, quote=True) == "'abab'... (100 characters)"
    assert shorten(12, quote=True) == "12"
