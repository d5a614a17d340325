"""Shared fixtures: explicit generators, small float64 datasets."""

from __future__ import annotations

import pytest
import torch

# Small float64 problems run fastest single-threaded, and CI shares its cores.
torch.set_num_threads(1)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
