"""Tests of CSV loading, validation and the normalisation contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer.io import Normalization, as_dataset, read_csv
from amorgp.kernel_grammar import DimWiseStructure


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_read_csv_default_target_is_last_column(tmp_path: Path) -> None:
    f = _write(tmp_path / "d.csv", "a,b,t\n1,2,3\n4,5,6.5\n7,8,10\n")
    ds = read_csv(f)
    assert ds.feature_names == ("a", "b")
    assert ds.target_name == "t"
    np.testing.assert_array_equal(ds.X, [[1, 2], [4, 5], [7, 8]])
    np.testing.assert_array_equal(ds.y, [3, 6.5, 10])


def test_read_csv_named_target(tmp_path: Path) -> None:
    f = _write(tmp_path / "d.csv", "a,t,b\n1,2,3\n4,5,6\n7,9,10\n")
    ds = read_csv(f, target="t")
    assert ds.feature_names == ("a", "b")
    np.testing.assert_array_equal(ds.y, [2, 5, 9])


@pytest.mark.parametrize(
    ("text", "target", "match"),
    [
        ("a,t\n1,2\nx,3\n4,5\n", None, r"column 'a' is not numeric \('x' on line 3\)"),
        ("a,t\n1,2\n2,nan\n4,5\n", None, "y contains NaN or infinite"),
        ("a,t\n1,2\ninf,3\n4,5\n", None, "X contains NaN or infinite"),
        ("a,t\n1,2\n2,2\n4,2\n", None, "y is constant"),
        ("a,t\n1,2\n2,3\n", None, "at least 3 data points"),
        ("a,t\n1,2\n2,3\n4,5\n", "nope", "unknown target column 'nope'"),
        ("a\n1\n2\n3\n", None, "at least one input column"),
        ("a,t\n1,2\n2\n4,5\n", None, "line 3: 1 fields"),
        ("", None, "is empty"),
    ],
)
def test_read_csv_errors(tmp_path: Path, text: str, target: str | None, match: str) -> None:
    f = _write(tmp_path / "d.csv", text)
    with pytest.raises(ValueError, match=match):
        read_csv(f, target)


def test_read_csv_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        read_csv(tmp_path / "none.csv")


def test_read_test_table_without_target(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.csv", "b,a\n1,2\n")
    ds = read_csv(f, require_target=False, feature_names=("a", "b"), training=False)
    assert ds.y is None
    np.testing.assert_array_equal(ds.X, [[2, 1]])  # reordered to the training columns
    with pytest.raises(ValueError, match="missing input column"):
        read_csv(f, require_target=False, feature_names=("a", "c"), training=False)


def test_normalization_contract() -> None:
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(-3, 5, 20), np.full(20, 2.0)])
    y = rng.normal(4, 3, 20)
    norm = Normalization.fit(*as_dataset(X, y))  # type: ignore[arg-type]
    Xn = norm.transform_x(X)
    assert Xn[:, 0].min() == 0.0
    assert Xn[:, 0].max() == 1.0
    np.testing.assert_array_equal(Xn[:, 1], 0.5)  # a constant column maps to 0.5
    yn = norm.transform_y(y)
    assert abs(yn.mean()) < 1e-12
    assert abs(yn.std() - 1) < 1e-12
    m, v = norm.inverse_y(yn, np.ones(20))
    np.testing.assert_allclose(m, y)
    np.testing.assert_allclose(v, np.full(20, y.std() ** 2))
    with pytest.raises(ValueError, match="fitted with 2 column"):
        norm.transform_x(X[:, :1])


def test_original_units_reproduce_the_kernel() -> None:
    """The kernel evaluated on original data with original-unit values equals s_y^2 times
    the normalised kernel on normalised data (lengthscales, periods, variances)."""
    rng = np.random.default_rng(1)
    X = rng.uniform([10, -2], [30, 7], size=(15, 2))
    y = rng.normal(100, 20, 15)
    norm = Normalization.fit(X, y)
    s = DimWiseStructure.parse("(SE + PER)@0 * (SE*PER)@1")
    params = rng.uniform(0.3, 2.0, size=(2, 2, 4))
    orig = params.copy()
    for pn in s.param_names():
        value = norm.to_original(pn.dim, pn.symbol, pn.slot, params[pn.dim, pn.addend, pn.slot])
        assert value is not None
        orig[pn.dim, pn.addend, pn.slot] = value
    K_norm = s.reference(norm.transform_x(X), norm.transform_x(X), params)
    K_orig = s.reference(X, X, orig)
    np.testing.assert_allclose(K_orig, norm.y_std**2 * K_norm, rtol=1e-10)


def test_lin_has_no_original_units() -> None:
    norm = Normalization.fit(np.array([[1.0], [2.0], [4.0]]), np.array([1.0, 2.0, 0.0]))
    assert norm.to_original(0, "LIN", 0, 1.0) is None
    assert norm.to_original(0, "SE*LIN", 2, 1.0) is None  # lin_offset
    assert norm.to_original(0, "SE*LIN", 1, 1.0) == 3.0  # its lengthscale still maps


def test_read_test_table_rejects_unknown_columns(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.csv", "a,b,other\n1,2,3\n")
    with pytest.raises(ValueError, match=r"unexpected column\(s\) \['other'\]"):
        read_csv(f, require_target=False, feature_names=("a", "b"), training=False)
    ds = read_csv(f, "other", feature_names=("a", "b"), training=False)
    assert ds.target_name == "other"
