"""Shared fixtures: a small random-weight checkpoint for fast inference tests, and an
Amortizer on it (one per test module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.config import PRESETS
from amorgp.amortizer.testing import seeded_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``tiny``-preset checkpoint with seeded random weights (trained range n <= 40, d <= 3)."""
    return seeded_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", PRESETS["tiny"].network)


@pytest.fixture(scope="module")
def amz(tiny_checkpoint: Path) -> Amortizer:
    """The ``tiny`` checkpoint's :class:`Amortizer` on the CPU (library defaults)."""
    return Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
