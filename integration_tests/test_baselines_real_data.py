"""Baselines end to end on a bundled real dataset (airline) with paper evaluation kernels."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from amorgp.baselines import Baseline, fit_many, train_test_split
from amorgp.baselines.testing import check_inference
from amorgp.diff_linalg.testing import torch_settings
from amorgp.kernel_grammar import paper_evaluation_set

DATA = Path(__file__).resolve().parents[1] / "data" / "airline.csv"


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    arr = np.loadtxt(DATA, delimiter=",", skiprows=1)
    tr, te = train_test_split(len(arr), 100, 400, torch.Generator().manual_seed(0))
    return arr[tr, :-1], arr[tr, -1], arr[te, :-1], arr[te, -1]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Small float64 fits run fastest single-threaded; the global setting is restored."""
    with torch_settings(num_threads=1):
        yield


def test_type2ml_beats_the_constant_predictor_and_batches_match_protocol() -> None:
    X, y, Xt, yt = _split()
    kernels = [str(t) for t in paper_evaluation_set(0)[:6]]
    fits = check_inference(Baseline("gp-ml"), X, y, kernels)
    rmse = [float(np.sqrt(np.mean((f.predict(Xt)[0].numpy() - yt) ** 2))) for f in fits]
    constant = float(np.sqrt(np.mean((y.mean() - yt) ** 2)))
    assert min(rmse) < 0.5 * constant
    # the kernel with the highest evidence predicts better than the median kernel
    best = int(np.argmax([f.log_marginal_likelihood for f in fits]))
    assert rmse[best] <= float(np.median(rmse))


def test_map_and_svgp_on_real_data() -> None:
    X, y, Xt, yt = _split()
    constant = float(np.sqrt(np.mean((y.mean() - yt) ** 2)))
    for method in ("map", "svgp"):
        (f,) = fit_many(X, y, ["SE + LIN"], method=method)  # type: ignore[arg-type]
        assert f.status != "failed"
        mean, var = f.predict(Xt)
        assert float(np.sqrt(np.mean((mean.numpy() - yt) ** 2))) < constant
        assert bool((var > 0).all())
