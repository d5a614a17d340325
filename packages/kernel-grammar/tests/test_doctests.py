"""The examples written in the docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "amorgp.kernel_grammar.expressions",
    "amorgp.kernel_grammar.parser",
    "amorgp.kernel_grammar.dimwise",
    "amorgp.kernel_grammar.evaluation",
    "amorgp.kernel_grammar.search",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
