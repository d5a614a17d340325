from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.baselines.data import Normalizer, as_dataset, train_test_split


def test_normalizer_matches_numpy_formulas() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)) * [1.0, 10.0, 0.0] + [0.0, 5.0, 3.0]  # third column constant
    y = rng.normal(size=20) * 4 + 7
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


def test_to_original_units() -> None:
    norm = Normalizer.fit(torch.tensor([[0.0, 1.0], [4.0, 1.0]]), torch.tensor([1.0, 3.0]))
    assert norm.to_original("lengthscale", 0, 0.5) == pytest.approx(2.0)
    assert norm.to_original("se_period", 0, 0.25) == pytest.approx(1.0)
    assert norm.to_original("lengthscale", 1, 0.5) is None  # constant column
    assert norm.to_original("noise", 0, 0.5) == pytest.approx(0.5 * 1.0)  # std of [1, 3] is 1
    assert norm.to_original("variance", 0, 0.5) is None


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


def test_transform_x_checks_columns() -> None:
    norm = Normalizer.identity(2)
    with pytest.raises(ValueError, match="columns"):
        norm.transform_x(torch.ones(3, 3))


def test_train_test_split_is_a_deterministic_partition() -> None:
    a_tr, a_te = train_test_split(50, 30, 10, torch.Generator().manual_seed(3))
    b_tr, b_te = train_test_split(50, 30, 10, torch.Generator().manual_seed(3))
    assert torch.equal(a_tr, b_tr)
    assert torch.equal(a_te, b_te)
    assert len(a_tr) == 30
    assert len(a_te) == 10
    assert not set(a_tr.tolist()) & set(a_te.tolist())
    _, full = train_test_split(50, 30, None, torch.Generator().manual_seed(3))
    assert sorted(torch.cat([a_tr, full]).tolist()) == list(range(50))
    with pytest.raises(ValueError, match="n_train"):
        train_test_split(5, 5, None, torch.Generator())
