"""Shared fixture: a small random-weight checkpoint (the training tests that load or grow
a network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.amortizer import testing


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`amorgp.amortizer.testing.tiny_checkpoint`, one a session."""
    return testing.tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))
