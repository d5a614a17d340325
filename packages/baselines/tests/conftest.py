"""Shared fixtures: explicit generators, small float64 datasets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from amorgp.diff_linalg.testing import torch_settings


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Iterator[None]:
    """Small float64 problems run fastest single-threaded, and CI shares its cores."""
    with torch_settings(num_threads=1):
        yield


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
