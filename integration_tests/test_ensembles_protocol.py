"""The ensembles package consumes the inference protocol: the amortizer and a baseline
both plug in, and the batched member predictive equals each member's own predictive."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from amorgp.amortizer import Amortizer
from amorgp.baselines import Baseline, train_test_split
from amorgp.diff_linalg.testing import torch_settings
from amorgp.ensembles import KernelEnsemble, structure_search
from amorgp.kernel_grammar import paper_evaluation_set

DATA = Path(__file__).resolve().parents[1] / "data" / "airline.csv"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with torch_settings(num_threads=1):
        yield


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    arr = np.loadtxt(DATA, delimiter=",", skiprows=1)
    tr, te = train_test_split(len(arr), 100, 400, torch.Generator().manual_seed(0))
    return arr[tr, :-1], arr[tr, -1], arr[te, :-1], arr[te, -1]


@pytest.mark.parametrize("method", ["amortizer", "gp-ml"])
def test_bma_with_each_implementer(method: str) -> None:
    X, y, Xt, yt = _split()
    inference = (
        Amortizer.from_pretrained(device="cpu") if method == "amortizer" else Baseline("gp-ml")
    )
    kernels = [t.broadcast(1) for t in paper_evaluation_set(0)[:8]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ens = KernelEnsemble.fit(inference, X, y, kernels)
    assert abs(float(ens.weights.sum()) - 1.0) < 1e-12
    mix = ens.predictive(Xt)
    # the batched path equals the members' own predictives (oracle: each fit's predict)
    live = [i for i, w in enumerate(ens.weights.tolist()) if w > 0]
    for i in live:
        mean, var = ens.fits[i].predict(Xt)
        j = live.index(i)
        np.testing.assert_allclose(
            mix.means[j].numpy(), np.asarray(mean), rtol=1e-6, atol=1e-6 * np.std(y)
        )
        np.testing.assert_allclose(mix.variances[j].numpy(), np.asarray(var), rtol=1e-6)
    rmse = float(np.sqrt(np.mean((mix.mean().numpy() - yt) ** 2)))
    constant = float(np.sqrt(np.mean((y.mean() - yt) ** 2)))
    assert rmse < 0.5 * constant


def test_structure_search_with_the_amortizer_scores_many_structures() -> None:
    X, y, _, _ = _split()
    res = structure_search(Amortizer.from_pretrained(device="cpu"), X, y, depth=2, beam=2)
    assert len(res.levels[0]) == 6  # every symbol of the paper vocabulary alone
    assert len(res.levels) >= 2  # and at least one expansion
    assert np.isfinite(res.best.score)
    assert res.best.score == max(c.score for c in res.ranking())
