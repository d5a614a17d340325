"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(_blocks()) >= 2


@pytest.mark.parametrize("index", range(2))
def test_readme_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if index == 0:
        pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    exec(compile(_blocks()[index], f"README block {index}", "exec"), {"__name__": "readme"})
    if index == 0:
        assert (tmp_path / "simulated_datasets.png").stat().st_size > 0
