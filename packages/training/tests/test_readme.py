"""The README's Python examples run as written."""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"


def _blocks(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    return code.group(1)


def test_quick_start_trains_and_the_runtime_loads_the_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict[str, object] = {}
    exec(compile(_blocks("## Quick start"), str(README), "exec"), namespace)
    result = namespace["result"]
    assert result.step == 3  # type: ignore[attr-defined]
    assert result.stopped_by == "max_steps"  # type: ignore[attr-defined]
    assert namespace["amz"] is not None


def test_loss_example_runs() -> None:
    namespace: dict[str, object] = {}
    exec(compile(_blocks("## The loss on a simulated batch"), str(README), "exec"), namespace)
    assert math.isfinite(float(namespace["loss"].loss))  # type: ignore[attr-defined]
