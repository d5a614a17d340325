from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.baselines.data import Normalizer, as_dataset, as_inputs, train_test_split
from amorgp.kernel_grammar import DimWiseStructure


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


def test_original_units_reproduce_the_kernel() -> None:
    """The kernel evaluated on original data with original-unit values equals s_y^2 times
    the normalised kernel on normalised data (lengthscales, periods, variances)."""
    rng = np.random.default_rng(1)
    X = rng.uniform([10, -2], [30, 7], size=(15, 2))
    y = rng.normal(100, 20, 15)
    norm = Normalizer.fit(X, y)
    s = DimWiseStructure.parse("(SE + PER)@0 * (SE*PER)@1")
    params = rng.uniform(0.3, 2.0, size=(2, 2, 4))
    orig = params.copy()
    for pn in s.param_names():
        value = norm.to_original(pn.dim, pn.symbol, pn.slot, params[pn.dim, pn.addend, pn.slot])
        assert value is not None
        orig[pn.dim, pn.addend, pn.slot] = value
    Xn = norm.transform_x(torch.as_tensor(X)).numpy()
    K_norm = s.reference(Xn, Xn, params)
    K_orig = s.reference(X, X, orig)
    np.testing.assert_allclose(K_orig, norm.y_std**2 * K_norm, rtol=1e-10)
    assert norm.noise_to_original(0.5) == pytest.approx(0.5 * y.var())
    assert norm.lml_offset(15) == pytest.approx(-15 * np.log(y.std()))


def test_lin_and_constant_columns_have_no_original_units() -> None:
    norm = Normalizer.fit(torch.tensor([[1.0, 5.0], [2.0, 5.0], [4.0, 5.0]]), torch.ones(3))
    assert norm.to_original(0, "LIN", 0, 1.0) is None
    assert norm.to_original(0, "SE*LIN", 2, 1.0) is None  # lin_offset
    assert norm.to_original(0, "SE*LIN", 1, 1.0) == 3.0  # its lengthscale still maps
    assert norm.to_original(1, "SE", 1, 0.5) is None  # lengthscale of a constant column


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
    with pytest.raises(ValueError, match=r"first at row 2, column 1"):
        as_dataset(X, np.arange(4.0))
    with pytest.raises(ValueError, match=r"first at row 3"):
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
