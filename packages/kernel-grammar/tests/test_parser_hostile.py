"""A huge ``@`` index and very long kernel texts give a short syntax error (issue 64,
item 18): never Python's ``int`` digit-limit message, never the whole text echoed."""

from __future__ import annotations

import pytest

from amorgp.kernel_grammar import DimWiseStructure, KernelSyntaxError


def test_a_huge_index_is_a_short_syntax_error() -> None:
    with pytest.raises(KernelSyntaxError) as info:
        DimWiseStructure.parse("SE@" + "9" * 5000)
    message = str(info.value)
    assert message.startswith("dimension index of 5000 digits is too large at position 3")
    assert "set_int_max_str_digits" not in message
    assert max(len(line) for line in message.splitlines()) < 120


def test_indices_up_to_nine_digits_are_read() -> None:
    with pytest.raises(KernelSyntaxError, match="dimension index 777777777 out of range"):
        DimWiseStructure.parse("SE@777777777", n_dims=2)
    assert str(DimWiseStructure.parse("SE@1 * PER@0", n_dims=2)) == "PER@0 * SE@1"


def test_a_long_text_is_shown_as_a_window_around_the_problem() -> None:
    text = "SE + " * 300 + "XX" + " + SE" * 300
    with pytest.raises(KernelSyntaxError) as info:
        DimWiseStructure.parse(text)
    err = info.value
    reason, shown, caret, _hint = str(err).splitlines()
    assert reason == "unknown kernel 'XX' at position 1500"
    assert len(shown) < 90
    assert shown.startswith("  ...")
    assert shown.endswith("...")
    assert shown[caret.index("^") : caret.index("^") + 2] == "XX"
    assert err.text == text
    assert err.position == 1500


def test_a_long_unknown_name_and_a_digit_suffix_hint() -> None:
    with pytest.raises(KernelSyntaxError) as info:
        DimWiseStructure.parse("SE" + "1" * 5000)
    assert len(str(info.value)) < 400
    with pytest.raises(KernelSyntaxError, match="write 'SE@1' for dimension 1"):
        DimWiseStructure.parse("SE1")
    with pytest.raises(KernelSyntaxError, match="unexpected character '²'"):
        DimWiseStructure.parse("SE²")
