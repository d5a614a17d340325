"""Shared fixtures: a small random-weight checkpoint for fast inference tests, and an
Amortizer on it (one per test module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.amortizer import testing
from amorgp.amortizer.api import Amortizer


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`amorgp.amortizer.testing.tiny_checkpoint`, one a session."""
    return testing.tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def amz(tiny_checkpoint: Path) -> Amortizer:
    """The ``tiny`` checkpoint's :class:`Amortizer` on the CPU (library defaults)."""
    return Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
