"""The README's example runs and prints what the README says."""

from __future__ import annotations

from pathlib import Path

from amorgp.core.testing import readme_output

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_runs_and_prints_what_the_readme_says() -> None:
    out, expected = readme_output(README)
    assert out == expected
