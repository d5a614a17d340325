"""The reusable checks detect broken batches (mutation tests)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from amorgp.simulator import Simulator, SimulatorConfig
from amorgp.simulator.testing import check_batch

CFG = SimulatorConfig(n_min=3, n_max=9, d_max=3)


@pytest.fixture
def batch(gen: torch.Generator):
    b = Simulator(CFG).sample(12, gen)
    check_batch(b, CFG)
    # the mutations below need at least one padded point and one negative
    assert bool((~b.point_mask).any())
    assert bool((~b.is_positive).any())
    return b


def _mutations(b):
    y = b.y.clone()
    y[~b.point_mask] = 1.0
    X = b.X.clone()
    X[~b.point_mask] = 0.5
    flipped = b.is_positive.clone()
    flipped[0] = ~flipped[0]
    params = b.params.clone()
    params[b.true_symbol_mask] = -params[b.true_symbol_mask]
    sym = b.symbols.clone()
    sym[b.symbol_mask] = 99
    return {
        "y at padding": replace(b, y=y),
        "X at padding": replace(b, X=X),
        "is_positive": replace(b, is_positive=flipped),
        "negative params": replace(b, params=params),
        "unknown ids": replace(b, symbols=sym),
        "float32 X": replace(b, X=b.X.float()),
        "noise": replace(b, noise=-b.noise),
    }


@pytest.mark.parametrize(
    "name",
    [
        "y at padding",
        "X at padding",
        "is_positive",
        "negative params",
        "unknown ids",
        "float32 X",
        "noise",
    ],
)
def test_check_batch_catches(batch, name: str) -> None:
    with pytest.raises(AssertionError):
        check_batch(_mutations(batch)[name], CFG)
