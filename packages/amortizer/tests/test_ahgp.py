"""Tests of the AHGP-SE-ARD comparison model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from amorgp.amortizer import testing
from amorgp.amortizer.networks.ahgp import AHGPSEARD
from amorgp.amortizer.networks.config import PRESETS
from amorgp.kernel_grammar import PAPER_VOCABULARY, base_symbol
from amorgp.lazy_kernels import PaddedBatch

CONFIG = dataclasses.replace(PRESETS["tiny"].network, model="ahgp-se-ard")


@pytest.fixture
def model() -> AHGPSEARD:
    m = testing.random_model(CONFIG)
    assert isinstance(m, AHGPSEARD)
    return m


@pytest.fixture
def batch() -> PaddedBatch:
    return testing.random_padded_batch(
        torch.Generator().manual_seed(3),
        PAPER_VOCABULARY,
        batch=4,
        n_max=10,
        d_max=3,
        single_se=True,
    )


def test_symmetries_and_padding(model: AHGPSEARD, batch: PaddedBatch) -> None:
    g = torch.Generator().manual_seed(0)
    testing.assert_point_invariant(model, batch, g)
    testing.assert_dimension_equivariant(model, batch, g)
    testing.assert_padding_invariant(model, batch)


def test_product_of_se_factors_is_se_ard(model: AHGPSEARD, batch: PaddedBatch) -> None:
    """prod_d s_d^2 exp(-r_d^2 / 2 l_d^2) equals s^2 exp(-sum_d r_d^2 / 2 l_d^2) (numpy oracle)."""
    import numpy as np

    with torch.no_grad():
        pred = model(batch)
    readable = model.se_ard(pred, batch.dim_mask)
    se = base_symbol("SE")
    b = 0
    d = int(batch.dim_mask[b].sum())
    n = int(batch.point_mask[b].sum())
    X = batch.X[b, :n, :d].detach().numpy()
    prod = np.ones((n, n))
    for i in range(d):
        prod *= se.reference(
            X[:, i],
            X[:, i],
            {
                "variance": float(pred.params[b, i, 0, 0]),
                "lengthscale": float(pred.params[b, i, 0, 1]),
            },
        )
    ls = readable["lengthscales"][b, :d].detach().numpy()
    r2 = (((X[:, None, :] - X[None, :, :]) / ls) ** 2).sum(-1)
    ard = float(readable["variance"][b]) * np.exp(-0.5 * r2)
    np.testing.assert_allclose(prod, ard, rtol=1e-12)


def test_rejects_other_structures(model: AHGPSEARD, batch: PaddedBatch) -> None:
    symbols = batch.symbols.clone()
    symbols[0, 0, 0] = PAPER_VOCABULARY.id("PER")
    with pytest.raises(ValueError, match="only predicts the SE kernel"):
        model(dataclasses.replace(batch, symbols=symbols))


def test_wrong_model_kind() -> None:
    with pytest.raises(ValueError, match="ahgp-se-ard"):
        AHGPSEARD(PRESETS["tiny"].network)
