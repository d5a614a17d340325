"""Helpers for the packages' tests: a module's public names, a README's code blocks.

Every package's ``tests/test_readme.py`` checks that its README's examples run as
written; these helpers read and run the blocks the same way everywhere.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from types import ModuleType

__all__ = ["check_public_names", "readme_blocks", "readme_output", "run_readme_block"]


def check_public_names(module: ModuleType) -> None:
    """``module.__all__`` names each name once, and the module has every one of them."""
    names = module.__all__
    assert sorted(names) == sorted(set(names)), f"{module.__name__}.__all__ repeats a name"
    for name in names:
        assert hasattr(module, name), f"{module.__name__} has no {name!r}"


def readme_blocks(readme: Path, lang: str = "python", after: str | None = None) -> list[str]:
    """The fenced ``lang`` code blocks of the Markdown file ``readme``, in order.

    Args:
        readme: the README's path.
        lang: the fence's language (```` ```python ````, ```` ```text ````).
        after: only the blocks after the first occurrence of this text (a heading).
    """
    text = readme.read_text(encoding="utf-8")
    if after is not None:
        text = text[text.index(after) :]
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def run_readme_block(readme: Path, after: str | None = None) -> dict[str, object]:
    """Run the first Python block of ``readme`` (after ``after``) and return its namespace.

    The code is compiled with the README's path as its file name, so a failing line is
    reported at the README.
    """
    code = readme_blocks(readme, "python", after)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, str(readme), "exec"), namespace)
    return namespace


def readme_output(readme: Path) -> tuple[str, str]:
    """Run the only Python block of ``readme``; return what it printed and the README's
    only ``text`` block (what the README says it prints), both without trailing space."""
    (code,) = readme_blocks(readme)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(readme), "exec"), {})
    (expected,) = readme_blocks(readme, "text")
    return printed.getvalue().rstrip(), expected.rstrip()
