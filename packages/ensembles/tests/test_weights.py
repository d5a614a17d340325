"""Member weights against hand-computed cases and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize

from amorgp.ensembles import bma_weights, stacking_weights, uniform_weights


def test_bma_hand_computed_and_stable() -> None:
    w = bma_weights([0.0, math.log(3.0)])
    torch.testing.assert_close(w, torch.tensor([0.25, 0.75], dtype=torch.float64))
    w = bma_weights([-10_000.0, -10_000.0 + math.log(3.0)])  # exp underflows: log-sum-exp needed
    torch.testing.assert_close(w, torch.tensor([0.25, 0.75], dtype=torch.float64))
    w = bma_weights([0.0, 0.0], log_prior=[math.log(0.2), math.log(0.8)])
    torch.testing.assert_close(w, torch.tensor([0.2, 0.8], dtype=torch.float64))


def test_failed_members_get_weight_zero_with_a_warning() -> None:
    with pytest.warns(RuntimeWarning, match="PER"):
        w = bma_weights([1.0, float("nan"), 1.0], labels=["SE", "PER", "LIN"])
    torch.testing.assert_close(w, torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="every ensemble member failed"):
        bma_weights([float("nan"), float("-inf")])
    with pytest.warns(RuntimeWarning):
        torch.testing.assert_close(
            uniform_weights([True, False, True, True]),
            torch.tensor([1 / 3, 0, 1 / 3, 1 / 3], dtype=torch.float64),
        )


def test_stacking_symmetric_case_is_uniform() -> None:
    p = torch.tensor([[0.9, 0.1], [0.1, 0.9]], dtype=torch.float64)
    torch.testing.assert_close(
        stacking_weights(p.log()), torch.tensor([0.5, 0.5], dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_stacking_matches_scipy_on_the_simplex() -> None:
    rng = np.random.default_rng(0)
    ld = rng.normal(size=(4, 30)) - 1.0
    ld[2] += 0.8  # one member better on average

    def neg(z: np.ndarray) -> float:
        w = np.exp(z) / np.exp(z).sum()
        return -float(np.log((w[:, None] * np.exp(ld)).sum(0)).mean())

    res = optimize.minimize(neg, np.zeros(4), method="BFGS", options={"gtol": 1e-10})
    w_ref = np.exp(res.x) / np.exp(res.x).sum()
    w = stacking_weights(torch.as_tensor(ld), max_iter=20_000, tol=1e-15).numpy()
    assert -neg(np.log(np.maximum(w, 1e-300))) >= -res.fun - 1e-8
    np.testing.assert_allclose(w, w_ref, atol=2e-3)


def test_stacking_drops_members_with_non_finite_densities() -> None:
    ld = torch.tensor([[-1.0, -1.0], [float("nan"), -0.5]], dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="member 1"):
        w = stacking_weights(ld)
    torch.testing.assert_close(w, torch.tensor([1.0, 0.0], dtype=torch.float64))
