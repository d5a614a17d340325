"""Tests of the normalisation contract and dataset validation against numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.core.data import Normalizer, as_dataset, as_inputs
from amorgp.core.errors import DataError
from amorgp.core.units import Unit


def test_normalizer_matches_numpy_formulas() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)) * [1.0, 10.0, 0.0] + [0.0, 5.0, 3.0]  # third column constant
    y = rng.normal(size=20) * 4 + 7
    with pytest.warns(UserWarning, match=r"input column\(s\) 3 \(counting from 1\) are constant"):
        norm = Normalizer.fit(X, y)
    Xn = norm.transform_x(torch.as_tensor(X)).numpy()
    lo, hi = X.min(0), X.max(0)
    np.testing.assert_allclose(Xn[:, :2], (X[:, :2] - lo[:2]) / (hi[:2] - lo[:2]), rtol=1e-12)
    np.testing.assert_allclose(Xn[:, 2], 0.5)
    assert Xn[:, :2].min() == 0.0
    assert Xn[:, :2].max() == 1.0
    yn = norm.transform_y(torch.as_tensor(y)).numpy()
    np.testing.assert_allclose(yn, (y - y.mean()) / y.std(), rtol=1e-12)
    mean, var = norm.unnormalize_predictive(
        torch.as_tensor(yn), torch.ones(20, dtype=torch.float64)
    )
    np.testing.assert_allclose(mean.numpy(), y, rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), y.var(), rtol=1e-12)


@pytest.mark.parametrize(
    ("X", "y", "match"),
    [
        (np.ones((3, 2)), np.ones(4), "rows"),
        (np.ones((3, 2, 1)), np.ones(3), "shape"),
        (np.zeros((0, 2)), np.zeros(0), "empty"),
        (np.array([[np.nan], [1.0]]), np.ones(2), "NaN"),
        (np.ones((2, 1)), np.array([1.0, np.inf]), "NaN or infinite"),
        (np.ones((2, 1)), np.ones((2, 2)), "y must"),
    ],
)
def test_as_dataset_rejects_bad_input(X: np.ndarray, y: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        as_dataset(X, y)


def test_as_dataset_names_the_first_bad_entry_and_checks_training_data() -> None:
    X = np.ones((4, 2))
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"first at data row 3, column 2; counting from 1"):
        as_dataset(X, np.arange(4.0))
    with pytest.raises(ValueError, match=r"first at data row 4;"):
        as_dataset(np.ones((4, 1)), [0.0, 1.0, 2.0, np.inf])
    with pytest.raises(ValueError, match="X must be numeric"):
        as_dataset([["a"], ["b"]], [0.0, 1.0])
    with pytest.raises(ValueError, match="at least 3 data points"):
        as_dataset(np.ones((2, 1)), [0.0, 1.0], min_points=3, training=True)
    with pytest.raises(ValueError, match="y is constant"):
        as_dataset(np.arange(3.0), np.ones(3), training=True)
    Xt, yt = as_dataset(np.arange(3.0), np.ones((3, 1)))  # not training: constant y is fine
    assert tuple(Xt.shape) == (3, 1)
    assert tuple(yt.shape) == (3,)
    with pytest.raises(ValueError, match="empty inputs"):
        as_inputs(np.zeros((0, 2)))


def test_transform_x_checks_columns() -> None:
    norm = Normalizer.identity(2)
    with pytest.raises(ValueError, match="columns"):
        norm.transform_x(torch.ones(3, 3))


@pytest.mark.parametrize("scale", [1e-140, 1e-100, 1e-30, 1.0, 1e30, 1e100, 1e140])
def test_extreme_target_scales_are_exact(scale: float) -> None:
    """Mean and std at scales where squaring y under- or overflows equal the rescaled
    ones of the unit-scale data (float64 oracle: numpy on the unit-scale data)."""
    rng = np.random.default_rng(2)
    y1 = rng.normal(3.0, 2.0, size=40)
    norm = Normalizer.fit(np.arange(40.0), y1 * scale)
    assert norm.y_mean == pytest.approx(y1.mean() * scale, rel=1e-12)
    assert norm.y_std == pytest.approx(y1.std() * scale, rel=1e-12)
    yn = norm.transform_y(torch.as_tensor(y1 * scale)).numpy()
    np.testing.assert_allclose(yn, (y1 - y1.mean()) / y1.std(), rtol=1e-10, atol=1e-12)
    _, var = norm.unnormalize_predictive(
        torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    )
    assert float(var[0]) == pytest.approx((y1.std() * scale) ** 2, rel=1e-12)
    assert norm.noise_to_original(0.5) == pytest.approx(0.5 * (y1.std() * scale) ** 2, rel=1e-12)
    assert norm.lml_offset(40) == pytest.approx(-40 * (np.log(y1.std()) + np.log(scale)))


@pytest.mark.parametrize("scale", [1e-300, 1e-162, 1e-155, 1e155, 1e160, 1e300])
def test_unrepresentable_target_scales_are_refused(scale: float) -> None:
    """Variances in the targets' units would under- or overflow: a clear DataError."""
    y = np.sin(np.arange(30.0)) * scale
    with pytest.raises(DataError, match=r"standard deviation .* outside .*rescale y"):
        Normalizer.fit(np.arange(30.0), y)


def test_input_range_that_overflows_is_refused() -> None:
    X = np.array([[-1.7e308], [0.0], [1.7e308]])
    with pytest.raises(DataError, match=r"input column 1 spans .* rescale the inputs"):
        Normalizer.fit(X, [0.0, 1.0, 2.0])
    big = Normalizer.fit(np.array([[-1.7e307], [0.0], [1.7e307]]), [0.0, 1.0, 2.0])
    Xn = big.transform_x(torch.tensor([[-1.7e307], [1.7e307]], dtype=torch.float64))
    np.testing.assert_allclose(Xn.numpy()[:, 0], [0.0, 1.0])
    assert big.to_original(0, Unit.INPUT, 0.5) == pytest.approx(1.7e307)
    assert big.to_original(0, Unit.INPUT, 100.0) is None  # 3.4e309 is not finite: no value
    narrow = Normalizer.fit(np.array([[0.0], [1e-200], [2e-200]]), [0.0, 1.0, 2.0])
    with pytest.raises(DataError, match="overflows"):
        narrow.transform_x(torch.tensor([[1e200]], dtype=torch.float64))


def test_inputs_only_and_column_count() -> None:
    Xt, yt = as_dataset(np.ones((3, 2)))
    assert yt is None
    assert tuple(Xt.shape) == (3, 2)
    with pytest.raises(DataError, match=r"must have shape \(m, 3\)"):
        as_inputs(np.ones((2, 2)), n_dims=3)
