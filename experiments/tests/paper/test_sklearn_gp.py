"""The scikit-learn kernels equal the grammar's closed forms (``docs/architecture.md`` §4)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from amorgp_experiments.paper.sklearn_gp import expressible, sklearn_gpr, sklearn_kernel

S2, ELL, PERIOD, C2 = 1.7, 0.3, 0.45, 0.6


def _set(kernel: Any) -> Any:
    """Every constant s^2, SE/PER lengthscale ell (sklearn's PER: 2 ell), period and LIN offset."""
    from sklearn.gaussian_process.kernels import (
        RBF,
        ConstantKernel,
        DotProduct,
        ExpSineSquared,
        WhiteKernel,
    )

    params = kernel.get_params(deep=True)
    values = {}
    for key, obj in params.items():
        if isinstance(obj, ConstantKernel):
            values[f"{key}__constant_value"] = S2
        elif isinstance(obj, RBF):
            values[f"{key}__length_scale"] = ELL
        elif isinstance(obj, ExpSineSquared):
            values[f"{key}__length_scale"] = 2 * ELL
            values[f"{key}__periodicity"] = PERIOD
        elif isinstance(obj, DotProduct):
            values[f"{key}__sigma_0"] = np.sqrt(C2 / S2)
        elif isinstance(obj, WhiteKernel):
            values[f"{key}__noise_level"] = 0.0
    return kernel.set_params(**values)


def _closed(symbol: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a[:, None] - b[None, :]
    if symbol == "SE":
        return S2 * np.exp(-(d**2) / (2 * ELL**2))
    if symbol == "PER":
        return S2 * np.exp(-(np.sin(np.pi * np.abs(d) / PERIOD) ** 2) / (2 * ELL**2))
    return S2 * a[:, None] * b[None, :] + C2  # LIN


@pytest.mark.parametrize("text", ["SE", "PER", "LIN", "SE + PER", "SE + LIN + PER"])
def test_one_input_kernels_match_the_closed_forms(text: str) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, 6), rng.uniform(0, 1, 4)
    k = _set(sklearn_kernel(text, 1))
    want = sum(_closed(s.strip(), a, b) for s in text.split("+"))
    np.testing.assert_allclose(k(a[:, None], b[:, None]), want, rtol=1e-12)


def test_products_carry_one_constant() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 1, 5), rng.uniform(0, 1, 3)
    k = _set(sklearn_kernel("SE*PER", 1))
    want = _closed("SE", a, b) * _closed("PER", a, b) / S2
    np.testing.assert_allclose(k(a[:, None], b[:, None]), want, rtol=1e-12)


def test_expressible_structures() -> None:
    assert expressible("SE", 5)
    assert expressible("LIN + SE*PER", 1)
    assert not expressible("LIN + SE*PER", 2)
    with pytest.raises(ValueError, match="no scikit-learn kernel"):
        sklearn_kernel("SE + PER", 3)


def test_gpr_fits_a_smooth_series() -> None:
    x = np.linspace(0, 4, 60)[:, None]
    y = np.sin(2 * x[:, 0]) + 0.05 * np.random.default_rng(2).normal(size=60)
    mean, var, dt = sklearn_gpr(x[::2], y[::2], x[1::2], "SE + LIN")
    assert np.sqrt(np.mean((mean - y[1::2]) ** 2)) < 0.2
    assert np.all(var > 0)
    assert dt > 0
