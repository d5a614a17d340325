"""Shared fixtures: explicit generators, small float64 datasets."""

from __future__ import annotations

import pytest
import torch

# Small float64 problems run fastest single-threaded, and CI shares its cores.
torch.set_num_threads(1)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def make_data(n: int, d: int, seed: int = 0, noise: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs in [0, 1]^d, a smooth target plus Gaussian noise, standardised."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    f = torch.sin(6.0 * X[:, 0]) + (X[:, 1:] ** 2).sum(1) if d > 1 else torch.sin(6.0 * X[:, 0])
    y = f + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return X, (y - y.mean()) / y.std()
