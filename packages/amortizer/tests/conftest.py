"""Shared fixtures: a small random-weight checkpoint for fast inference tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from amorgp.amortizer.checkpoint import save_checkpoint
from amorgp.amortizer.config import PRESETS
from amorgp.amortizer.model import build_model


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``tiny``-preset checkpoint with seeded random weights (trained range n <= 40, d <= 3)."""
    network = PRESETS["tiny"].network
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(network)
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(out, model, network, meta={"train": PRESETS["tiny"].train.to_dict()})
    return out
