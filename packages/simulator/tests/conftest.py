"""Shared fixtures: explicit generators, never the global RNG."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(20240521)
