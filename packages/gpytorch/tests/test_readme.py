"""The README's example runs as written."""

from __future__ import annotations

from pathlib import Path

from amorgp.core.testing import run_readme_block

README = Path(__file__).parents[1] / "README.md"


def test_gpytorch_example_runs() -> None:
    """The quick start (skipped without GPyTorch and BoTorch)."""
    import pytest

    pytest.importorskip("gpytorch")
    pytest.importorskip("botorch")
    namespace = run_readme_block(README, after="## Quick start")
    mean, res = namespace["mean"], namespace["res"]
    ref, _ = res.predict(namespace["X"][:3], include_noise=False)  # type: ignore[attr-defined,index]
    assert float((mean[:, 0] - ref).abs().max()) < 1e-8  # type: ignore[index]
    assert not namespace["model"].training  # type: ignore[attr-defined]
