"""End to end at large n: amortized inference and prediction on 100,000 points.

The dataset encoder reads a seeded random subset of the points (the network's
training range); the GP conditions on all 100,000 points through lazy-kernels'
ExactGP, whose ``backend="auto"`` picks KeOps + preconditioned CG (O(n) memory;
one dense kernel matrix would need 75 GiB).  With 100,000 noisy observations of
a smooth function, the posterior mean must be close to the function itself.
"""

from __future__ import annotations

import resource

import numpy as np
import pytest
import torch

from amorgp.amortizer import AmortizedGPRegressor, Amortizer

pytestmark = pytest.mark.slow


def test_100k_points_predict() -> None:
    pytest.importorskip("pykeops")
    n = 100_000
    rng = np.random.default_rng(0)
    X = rng.uniform(1949, 1961, n)[:, None]
    f = lambda x: 10 * np.sin(2 * np.pi * x) + 3 * (x - 1955)  # noqa: E731
    y = f(X[:, 0]) + rng.normal(size=n)
    reg = AmortizedGPRegressor(kernel="SE", refine=0).fit(X, y)
    assert reg.result_.n_points == n
    assert reg.result_.encoder_points <= 250
    Xq = np.linspace(1950, 1960, 9)[:, None]
    mean, std = reg.predict(Xq, return_std=True)
    assert np.isfinite(mean).all()
    assert (std > 0).all()
    # with 100k points the posterior mean is close to the generating function
    # (the noise std is 1, the signal amplitude about 20)
    assert np.abs(mean - f(Xq[:, 0])).max() < 2.0
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    assert peak_gib < 16  # far below the 75 GiB of one dense 100k x 100k matrix


def test_encoder_subset_is_documented_and_seeded() -> None:
    a = Amortizer.from_pretrained(device="cpu", seed=3)
    idx = a.encoder_subset(100_000)
    assert idx is not None
    assert len(idx) == a.encoder_points
    g = torch.Generator().manual_seed(3)
    assert torch.equal(idx, torch.randperm(100_000, generator=g)[: a.encoder_points].sort().values)
