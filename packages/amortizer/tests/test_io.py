"""Tests of CSV loading and validation (the normalisation is tested in amorgp.baselines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer.frontends.io import read_csv
from amorgp.core.errors import DataError


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
        ("a,t\n1,2\n2,nan\n4,5\n", None, r"column 't' has a NaN .*\('nan' on line 3\)"),
        ("a,t\n1,2\ninf,3\n4,5\n", None, r"column 'a' has a NaN or infinite .*line 3"),
        ("a,t\n1,2\n\n\n2,3\n4,x\n", None, r"'x' on line 6"),  # blank lines counted
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


def test_read_test_table_rejects_unknown_columns(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.csv", "a,b,other\n1,2,3\n")
    with pytest.raises(ValueError, match=r"unexpected column\(s\) \['other'\]"):
        read_csv(f, require_target=False, feature_names=("a", "b"), training=False)
    ds = read_csv(f, "other", feature_names=("a", "b"), training=False)
    assert ds.target_name == "other"


def test_infer_and_read_csv_reject_every_bad_dataset(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from amorgp.amortizer import Amortizer
    from amorgp.lazy_kernels.testing import bad_datasets, check_rejects_bad_data

    amz = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", calibrate=False)
    check_rejects_bad_data(lambda X, y: amz.infer(X, y, "SE"))
    check_rejects_bad_data(lambda X, y: amz.infer_many(X, y, ["SE", "SE + PER"]))
    # the CSV reader refuses the tables it can write (NaN, too few rows, constant target)
    for case in bad_datasets():
        if case.X.ndim != 2 or case.X.dtype == object or case.y.ndim != 1:
            continue
        if len(case.y) != len(case.X) or len(case.y) == 0:
            continue
        rows = "\n".join(",".join(map(str, [*x, t])) for x, t in zip(case.X, case.y, strict=True))
        f = _write(tmp_path / "bad.csv", "a,b,t\n" + rows + "\n")
        with pytest.raises(DataError) as err:
            read_csv(f)
        assert "\n" not in str(err.value), case.name
