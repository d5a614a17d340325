"""End to end at large n: amortized inference and prediction on 100,000 points.

The dataset encoder reads a seeded random subset of the points (the network's
training range); the GP conditions on all 100,000 points through lazy-kernels'
``Posterior.from_kernel``, whose ``backend="auto"`` picks KeOps + preconditioned CG (O(n) memory;
one dense kernel matrix would need 75 GiB).  With 100,000 noisy observations of
a smooth function, the posterior mean must be close to the function itself.
"""

from __future__ import annotations

import resource
import time

import numpy as np
import pytest
import torch

from amorgp.amortizer import Amortizer


@pytest.mark.slow
def test_100k_points_predict() -> None:
    pytest.importorskip("pykeops")
    n = 100_000
    rng = np.random.default_rng(0)
    X = rng.uniform(1949, 1961, n)[:, None]

    def f(x: np.ndarray) -> np.ndarray:
        return 20 * np.sin(2 * np.pi * (x - 1949) / 12) + 2 * (x - 1955)

    y = f(X[:, 0]) + rng.normal(size=n)
    amz = Amortizer.from_pretrained(device="cpu", gp_options={"cg_tol": 1e-6, "precond_rank": 128})
    assert amz.gp_backend(n) == "keops"
    t0 = time.perf_counter()
    res = amz.infer(X, y, "SE")
    assert res.n_points == n
    assert res.encoder_points == amz.encoder_points
    Xq = np.linspace(1950, 1960, 9)[:, None]
    mean, var = res.predict(Xq)
    elapsed = time.perf_counter() - t0
    assert np.isfinite(np.asarray(mean)).all()
    assert (np.asarray(var) > 0).all()
    # 100k noisy observations (noise std 1, signal amplitude about 25) pin the posterior
    # mean to the generating function
    assert np.abs(np.asarray(mean) - f(Xq[:, 0])).max() < 1.0
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    assert peak_gib < 16  # far below the 75 GiB of one dense 100k x 100k matrix
    print(f"n = {n}: inference + prediction {elapsed:.0f} s, peak memory {peak_gib:.2f} GiB")


def test_encoder_subset_is_documented_and_seeded() -> None:
    a = Amortizer.from_pretrained(device="cpu", seed=3)
    idx = a.encoder_subset(100_000)
    assert idx is not None
    assert len(idx) == a.encoder_points
    g = torch.Generator().manual_seed(3)
    assert torch.equal(idx, torch.randperm(100_000, generator=g)[: a.encoder_points].sort().values)
