"""The README's examples run as written (each in a fresh interpreter: one registers a kernel)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from amorgp.lazy_kernels import keops_available

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(_blocks()) == 3


@pytest.mark.parametrize("index", range(3))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    if index == 2 and not keops_available():
        pytest.skip("pykeops is not installed")
    out = subprocess.run(
        [sys.executable, "-c", _blocks()[index]], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
