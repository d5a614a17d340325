"""The README's example runs and prints what the README says."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.core.testing import readme_blocks, run_readme_block

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_runs_and_prints_what_the_readme_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert len(readme_blocks(README)) == 1
    run_readme_block(README)
    out = capsys.readouterr().out
    (expected,) = readme_blocks(README, "text")
    assert out.rstrip() == expected.rstrip()
