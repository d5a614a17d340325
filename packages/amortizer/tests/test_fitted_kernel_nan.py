"""The estimator's fitted kernel names NaN/inf inputs as such, not as points outside the
training range."""

from __future__ import annotations

import numpy as np
import pytest

from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor
from amorgp.core.errors import DataError


@pytest.fixture(scope="module")
def kernel():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 5.0, (30, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(30)
    return AmortizedGPRegressor(kernel="SE", device="cpu").fit(X, y).kernel_


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_named(kernel, bad: float) -> None:  # type: ignore[no-untyped-def]
    X = np.ones((4, 2))
    X[2, 1] = bad
    with pytest.raises(DataError, match=r"^X contains NaN or infinite values") as err:
        kernel(X)
    assert "range" not in str(err.value)
    with pytest.raises(DataError, match=r"^Y contains NaN or infinite values"):
        kernel(np.ones((3, 2)), X)


def test_finite_inputs_still_evaluate(kernel) -> None:  # type: ignore[no-untyped-def]
    K = kernel(np.ones((3, 2)), np.zeros((2, 2)))
    assert K.shape == (3, 2)
    assert np.isfinite(K).all()
