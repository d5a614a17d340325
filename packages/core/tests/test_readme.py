"""The README's example runs and prints what the README says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_python_example_runs_and_prints_what_the_readme_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (code,) = _blocks("python")
    exec(compile(code, str(README), "exec"), {})
    out = capsys.readouterr().out
    (expected,) = _blocks("text")
    assert out.rstrip() == expected.rstrip()
