"""Tests of the sklearn-style estimator: sklearn's own checks and the bundled airline data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import r2_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

AIRLINE = Path(__file__).parents[1] / "src/amorgp/amortizer/data/airline.csv"


def _estimators() -> list[AmortizedGPRegressor]:
    # sklearn collects the checks at import time: build the tiny checkpoint here
    import tempfile

    import torch

    from amorgp.amortizer.networks.checkpoint import save_checkpoint
    from amorgp.amortizer.networks.config import PRESETS
    from amorgp.amortizer.networks.model import build_model

    path = Path(tempfile.gettempdir()) / "amorgp-estimator-checks" / "tiny"  # stable test ids
    network = PRESETS["tiny"].network
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(network)
    save_checkpoint(
        path, model, network, meta={"train": PRESETS["tiny"].train.to_dict()}, overwrite=True
    )
    return [AmortizedGPRegressor(kernel="SE", checkpoint=str(path))]


# sample weights other than a constant are refused (the GP is unweighted)
_REFUSED_WEIGHTS = "sample_weight other than a constant is refused with an OptionError"


@pytest.mark.filterwarnings("ignore:the data have")
@pytest.mark.filterwarnings("ignore:y takes only 2 distinct values")
@parametrize_with_checks(
    _estimators(),
    expected_failed_checks=lambda est: {
        "check_sample_weights_not_overwritten": _REFUSED_WEIGHTS,
        "check_sample_weight_equivalence_on_dense_data": _REFUSED_WEIGHTS,
    },
)
def test_sklearn_estimator_checks(estimator: AmortizedGPRegressor, check: object) -> None:
    """Every applicable check of sklearn.utils.estimator_checks (pandas/array-API checks skip
    themselves when those libraries are missing)."""
    check(estimator)  # type: ignore[operator]


@pytest.fixture(scope="module")
def airline() -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(AIRLINE, delimiter=",", skiprows=1)
    return data[:, :1], data[:, 1]


def test_fit_predict_on_airline_matches_the_api(airline: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = airline
    train, test = slice(0, 120), slice(120, 144)
    reg = AmortizedGPRegressor(kernel="SE + PER").fit(X[train], y[train])
    mean, std = reg.predict(X[test], return_std=True)
    res = Amortizer.from_pretrained(device="cpu").infer(X[train], y[train], "SE + PER")
    m, v = res.predict(X[test])
    np.testing.assert_allclose(mean, m, rtol=1e-10)
    np.testing.assert_allclose(std, np.sqrt(v), rtol=1e-10)
    assert reg.score(X[test], y[test]) == pytest.approx(r2_score(y[test], mean))
    assert reg.n_features_in_ == 1
    assert set(reg.hyperparameters_) == {
        "d0.0.SE.variance",
        "d0.0.SE.lengthscale",
        "d0.1.PER.variance",
        "d0.1.PER.lengthscale",
        "d0.1.PER.period",
        "noise",
    }


def test_log_marginal_likelihood_is_in_original_units(
    airline: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = airline
    reg = AmortizedGPRegressor(kernel="SE").fit(X, y)
    r = reg.result_
    xs = (X - X.min()) / np.ptp(X)
    K = r.kernel.reference(xs, xs, r.params.numpy()) + r.noise * np.eye(len(y))
    expect = multivariate_normal(np.full(len(y), y.mean()), y.std() ** 2 * K).logpdf(y)
    assert reg.log_marginal_likelihood_ == pytest.approx(expect, rel=1e-9)


def test_params_and_clone() -> None:
    reg = AmortizedGPRegressor(kernel="SE + PER", refine=3)
    assert reg.get_params()["kernel"] == "SE + PER"
    other = clone(reg).set_params(kernel="LIN")
    assert other.kernel == "LIN"
    assert reg.kernel == "SE + PER"
    assert other.refine == 3
    with pytest.raises(ValueError, match="Invalid parameter"):
        reg.set_params(nope=1)


def test_errors(airline: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = airline
    with pytest.raises(NotFittedError):
        AmortizedGPRegressor().predict(X)
    with pytest.raises(ValueError, match="RQ"):  # a grammar kernel the network does not know
        AmortizedGPRegressor(kernel="RQ").fit(X, y)
    reg = AmortizedGPRegressor().fit(X[:20], y[:20])
    with pytest.raises(ValueError, match="features"):
        reg.predict(np.zeros((3, 2)))


def test_refine_raises_the_likelihood(airline: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = airline
    a = AmortizedGPRegressor(kernel="SE", refine=0).fit(X, y)
    b = AmortizedGPRegressor(kernel="SE", refine=10).fit(X, y)
    # the refinement accepts only steps that raise it, from the amortized answer's point
    assert b.log_marginal_likelihood_ >= a.log_marginal_likelihood_ - 1e-9


def test_backend_and_memory_budget_reach_the_posterior() -> None:
    """``backend`` and ``memory_budget`` are the estimator's: CG gives the predictions of
    the dense float64 Cholesky posterior (the oracle)."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 1.0, (60, 1))
    y = np.sin(6.0 * X[:, 0]) + 0.1 * rng.standard_normal(60)
    Xt = np.linspace(0.0, 1.0, 7)[:, None]
    dense = AmortizedGPRegressor(kernel="SE", starts=1, refine=0).fit(X, y)
    cg = AmortizedGPRegressor(
        kernel="SE", starts=1, refine=0, backend="cg", memory_budget=2**28
    ).fit(X, y)
    assert dense.result_.posterior.backend == "cholesky"
    assert cg.result_.posterior.backend == "cg"
    assert cg.get_params()["backend"] == "cg"
    np.testing.assert_allclose(cg.predict(Xt), dense.predict(Xt), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="unknown backend 'fast'"):
        AmortizedGPRegressor(kernel="SE", backend="fast").fit(X, y)
    with pytest.raises(ValueError, match="memory_budget"):
        AmortizedGPRegressor(kernel="SE", memory_budget=-1.0).fit(X, y)
