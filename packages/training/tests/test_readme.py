"""The README's Python examples run as written."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

from amorgp.core.testing import run_readme_block

README = Path(__file__).parents[1] / "README.md"


def test_quick_start_trains_and_the_runtime_loads_the_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace = run_readme_block(README, after="## Quick start")
    result = namespace["result"]
    assert result.step == 3  # type: ignore[attr-defined]
    assert result.stopped_by == "max_steps"  # type: ignore[attr-defined]
    assert namespace["amz"] is not None


def test_loss_example_runs() -> None:
    namespace = run_readme_block(README, after="## The loss on a simulated batch")
    assert math.isfinite(float(namespace["loss"].loss))  # type: ignore[attr-defined]
