"""Tests of the relevance tokens: the nearest-neighbour relevance features (against a
brute-force numpy oracle), the lengthscale tail, and the network that reads them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from amorgp.amortizer import testing
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.relevance_tokens import (
    KNEE,
    MAX_LENGTHSCALE,
    long_positive,
    neighbour_relevance,
)
from amorgp.kernel_grammar import PAPER_VOCABULARY, positive

TINY = PRESETS["tiny"].network


def _knn_mse(Z: np.ndarray, y: np.ndarray, k: int) -> float:
    """Brute force: each point predicted by the mean of its ``k`` nearest others."""
    err = []
    for i in range(len(y)):
        d = ((Z - Z[i]) ** 2).sum(1)
        d[i] = np.inf
        nn = np.argsort(d, kind="stable")[:k]
        err.append((y[i] - y[nn].mean()) ** 2)
    return float(np.mean(err))


def test_features_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 3))
    y = np.sin(6 * X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=30)
    got = neighbour_relevance(torch.tensor(X)[None], torch.tensor(y)[None], k=4)[0].numpy()
    yc = y - y.mean()
    e_all = _knn_mse(X, yc, 4)
    for d in range(3):
        without = _knn_mse(np.delete(X, d, 1), yc, 4)
        alone = _knn_mse(X[:, [d]], yc, 4)
        assert got[d, 0] == pytest.approx(math.log(without / e_all), rel=1e-4, abs=1e-6)
        assert got[d, 1] == pytest.approx(math.log(alone / np.mean(yc**2)), rel=1e-4, abs=1e-6)
    # the irrelevant input (2) reads as such: dropping it does not hurt, alone it explains
    # nothing; the relevant ones the opposite
    assert got[2, 0] < min(got[0, 0], got[1, 0])
    assert got[2, 1] > max(got[0, 1], got[1, 1])


def test_padding_is_never_read() -> None:
    g = torch.Generator().manual_seed(1)
    X = torch.rand(2, 25, 3, generator=g, dtype=torch.float64)
    y = torch.randn(2, 25, generator=g, dtype=torch.float64)
    pm = torch.ones(2, 25, dtype=torch.bool)
    pm[1, 18:] = False
    dm = torch.tensor([[True, True, True], [True, True, False]])
    Xp, yp = X.clone(), y.clone()
    Xp[1, 18:], yp[1, 18:] = 9.0, 50.0
    Xp[1, :, 2] = -3.0
    got = neighbour_relevance(Xp, yp, pm, dm)
    own = neighbour_relevance(X[1:2, :18, :2], y[1:2, :18])
    assert torch.allclose(got[1, :2], own[0], rtol=1e-12)
    assert torch.equal(got[1, 2], torch.zeros(2))
    assert torch.equal(neighbour_relevance(X[:, :6], y[:, :6]), torch.zeros(2, 3, 2))


def test_blocks_of_datasets_do_not_change_the_features(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block size gives the same features (datasets are independent): one dataset
    per block, the CPU's blocks and the accelerator's one block for the whole batch
    (:data:`~amorgp.amortizer.networks.relevance_tokens.DEVICE_BLOCK_ELEMENTS`)."""
    from amorgp.amortizer.networks import relevance_tokens

    g = torch.Generator().manual_seed(4)
    X = torch.rand(9, 40, 4, generator=g, dtype=torch.float64)
    y = torch.sin(5 * X[..., 0]) + 0.1 * torch.randn(9, 40, generator=g, dtype=torch.float64)
    pm = torch.ones(9, 40, dtype=torch.bool)
    pm[2, 30:] = False
    want = neighbour_relevance(X, y, pm)
    for elements in (1, relevance_tokens.DEVICE_BLOCK_ELEMENTS):
        monkeypatch.setattr(relevance_tokens, "BLOCK_ELEMENTS", elements)
        assert torch.equal(neighbour_relevance(X, y, pm), want)


def test_lengthscale_tail() -> None:
    raw = torch.linspace(-5, KNEE, 50, dtype=torch.float64)
    assert torch.equal(long_positive(raw, 1e-4), positive(raw, "lengthscale"))
    # value and slope continuous at the knee (finite differences), exponential beyond
    h = 1e-6
    at = torch.tensor([KNEE - h, KNEE, KNEE + h], dtype=torch.float64)
    lo, mid, hi = long_positive(at, 0.0).tolist()
    assert (hi - mid) / h == pytest.approx((mid - lo) / h, rel=1e-4)
    far = long_positive(torch.tensor([10.0, 15.0], dtype=torch.float64), 0.0)
    assert far[0] > 50  # tens of input ranges at raw = 10
    assert far[1] > 300
    grid = long_positive(torch.linspace(-5, 16, 400, dtype=torch.float64), 0.0)
    assert (grid.diff() > 0).all()
    top = long_positive(torch.tensor([17.0, 1e3], dtype=torch.float64), 0.0)
    torch.testing.assert_close(top, torch.full((2,), MAX_LENGTHSCALE, dtype=torch.float64))


def test_converted_network_changes_nothing_yet() -> None:
    old = testing.random_model(TINY, 0).eval()
    new = testing.random_model(dataclasses.replace(TINY, relevance_tokens=True), 1)
    missing, unexpected = new.load_state_dict(old.state_dict(), strict=False)
    assert not unexpected
    assert sorted(missing) == ["relevance_proj.bias", "relevance_proj.weight"]
    with torch.no_grad():
        new.relevance_proj.weight.zero_()
        new.relevance_proj.bias.zero_()
    new.eval()
    g = torch.Generator().manual_seed(5)
    batch = testing.random_padded_batch(g, PAPER_VOCABULARY, batch=4, n_max=30, d_max=3, l_max=3)
    with torch.no_grad():
        a, b = old(batch), new(batch)
    # random weights keep every raw value below the knee: the same prediction
    assert torch.equal(a.noise, b.noise)
    assert torch.allclose(a.params, b.params, rtol=1e-12)
    new.train()
    out = new(batch)
    out.params.log().sum().backward()
    assert new.relevance_proj.weight.grad.abs().sum() > 0
