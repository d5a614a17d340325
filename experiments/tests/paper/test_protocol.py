"""The paper protocol: bundled data, deterministic disjoint splits, scores, bad CSVs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from amorgp_experiments.paper.protocol import (
    BUNDLED_DATASETS,
    load_dataset,
    make_split,
    n_train_for,
    scores,
    split_indices,
)

from amorgp.core.errors import DataError


def test_every_bundled_dataset_loads_with_the_paper_sizes() -> None:
    sizes = {"airline": (144, 1), "concrete": (1030, 8), "energy": (768, 8)}
    sizes |= {"housing": (506, 13), "yacht": (308, 6)}
    for name in BUNDLED_DATASETS:
        data = load_dataset(name)
        assert data.X.shape == sizes[name]
        assert data.y.shape == (sizes[name][0],)
    assert n_train_for("airline", 144) == 100
    assert n_train_for("yacht", 308) == 250
    assert n_train_for("concrete", 1030) == 500
    assert n_train_for("mine", 40) == 30  # at most n - 10


def test_splits_are_deterministic_disjoint_and_capped() -> None:
    tr, te = split_indices(3000, 500, seed=7)
    tr2, te2 = split_indices(3000, 500, seed=7)
    np.testing.assert_array_equal(tr, tr2)
    np.testing.assert_array_equal(te, te2)
    assert len(tr) == 500
    assert len(te) == 1000  # the rest, capped at 1000
    assert len(set(tr) | set(te)) == 1500  # disjoint
    other, _ = split_indices(3000, 500, seed=8)
    assert not np.array_equal(tr, other)
    with pytest.raises(ValueError, match="n_train"):
        split_indices(10, 10, seed=0)


def test_make_split_uses_the_paper_sizes() -> None:
    sp = make_split(load_dataset("yacht"), 0)
    assert sp.X_train.shape == (250, 6)
    assert sp.X_test.shape == (58, 6)


def test_scores_are_standardised_rmse_and_gaussian_nll() -> None:
    y = np.array([1.0, 3.0, 5.0])
    mean = np.array([1.5, 3.0, 4.0])
    var = np.array([1.0, 4.0, 0.25])
    mu, sd = 2.0, 2.0
    rmse, nll = scores(mean, var, y, mu, sd)
    t, m, v = (y - mu) / sd, (mean - mu) / sd, var / sd**2
    assert rmse == pytest.approx(np.sqrt(np.mean((t - m) ** 2)))
    from scipy.stats import norm

    assert nll == pytest.approx(-np.mean(norm.logpdf(t, m, np.sqrt(v))))


def test_a_bad_csv_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,x\n2,3\n")
    with pytest.raises(DataError, match=r"bad\.csv"):
        load_dataset(bad)
    nan = tmp_path / "nan.csv"
    nan.write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(20)) + "1,nan\n")
    with pytest.raises(DataError, match="NaN"):
        load_dataset(nan)
    with pytest.raises(DataError, match="neither a bundled dataset"):
        load_dataset("no-such-dataset")
