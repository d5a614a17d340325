"""AmortizedGPRegressor against scikit-learn's GaussianProcessRegressor on the same kernel.

The oracle is scikit-learn itself (``kernel_.to_sklearn()``, ``normalize_y=True``,
``optimizer=None``), the grammar's dense numpy reference kernel, scipy's multivariate
normal density and central finite differences.
"""

from __future__ import annotations

import pickle

import joblib
import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ExpSineSquared
from sklearn.model_selection import KFold, cross_val_score

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor
from amorgp.amortizer.frontends.fitted_kernel import FittedKernel


def _data_1d(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0.0, 9.0, n))[:, None]
    X[0, 0] = 0.0  # column minimum 0: LIN converts to DotProduct
    y = np.sin(X[:, 0]) + 0.1 * X[:, 0] + 0.1 * rng.standard_normal(n)
    return X, 3.0 * y + 5.0


def _data_2d(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.uniform(-2.0, 3.0, (n, 2))
    return X, np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.05 * rng.standard_normal(n)


CASES = [
    ("SE + PER", _data_1d),
    ("SE*PER + LIN", _data_1d),
    ("SE*LIN + PER", _data_1d),
    ("SE", _data_2d),
]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def fitted(
    request: pytest.FixtureRequest,
) -> tuple[AmortizedGPRegressor, GaussianProcessRegressor, np.ndarray, np.ndarray]:
    kernel, data = request.param
    X, y = data()
    # the amortized answer: a refined one can be near-noiseless, whose draws agree with
    # scikit-learn's only to the rounding of an ill-conditioned factorisation
    reg = AmortizedGPRegressor(kernel=kernel, device="cpu", refine=0).fit(X, y)
    gpr = GaussianProcessRegressor(
        kernel=reg.kernel_.to_sklearn(), normalize_y=True, optimizer=None, alpha=0.0
    ).fit(X, y)
    return reg, gpr, X, y


def _test_points(X: np.ndarray) -> np.ndarray:
    return np.concatenate([X[:5] + 0.3, X[-3:] + 1.0])


def test_predictive_matches_sklearn(fitted: tuple) -> None:
    reg, gpr, X, _ = fitted
    Xt = _test_points(X)
    mean, std = reg.predict(Xt, return_std=True)
    m_sk, s_sk = gpr.predict(Xt, return_std=True)
    scale = np.abs(m_sk).max()
    np.testing.assert_allclose(mean, m_sk, rtol=1e-9, atol=1e-10 * scale)
    np.testing.assert_allclose(std, s_sk, rtol=1e-8)
    mean_c, cov = reg.predict(Xt, return_cov=True)
    m_sk, c_sk = gpr.predict(Xt, return_cov=True)
    np.testing.assert_allclose(mean_c, m_sk, rtol=1e-9, atol=1e-10 * scale)
    np.testing.assert_allclose(cov, c_sk, rtol=1e-7, atol=1e-10 * np.abs(c_sk).max())
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-8)


def test_fitted_attributes_match_sklearn(fitted: tuple) -> None:
    reg, gpr, X, y = fitted
    np.testing.assert_array_equal(reg.X_train_, X)
    np.testing.assert_allclose(reg.alpha_, gpr.alpha_, rtol=1e-7, atol=1e-9)
    # scikit-learn's normalize_y likelihood is that of the standardised targets
    offset = -len(y) * np.log(y.std())
    assert reg.log_marginal_likelihood_value_ == pytest.approx(
        gpr.log_marginal_likelihood_value_ + offset, rel=1e-9, abs=1e-8
    )
    assert reg.log_marginal_likelihood() == reg.log_marginal_likelihood_value_
    assert reg.log_marginal_likelihood(reg.kernel_.theta) == pytest.approx(
        reg.log_marginal_likelihood_value_, rel=1e-9, abs=1e-8
    )


def test_kernel_covariance_matches_sklearn_and_the_reference(fitted: tuple) -> None:
    reg, _, X, _ = fitted
    k = reg.kernel_
    noise = k.get_params()["noise_level"]
    K_sk = k.to_sklearn()(X)
    np.testing.assert_allclose(K_sk, k(X) + noise * np.eye(len(X)), rtol=1e-12, atol=1e-14)
    res = reg.result_
    Xn = res.normalizer.transform_x(X).numpy()
    ref = res.kernel.reference(Xn, Xn, res.params.numpy())
    np.testing.assert_allclose(k(X), ref, rtol=1e-12, atol=1e-14)


def test_log_marginal_likelihood_at_theta_and_its_gradient(fitted: tuple) -> None:
    reg, _, X, y = fitted
    rng = np.random.default_rng(3)
    theta = reg.kernel_.theta + 0.2 * rng.standard_normal(reg.kernel_.theta.shape)
    value, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    # oracle: scipy's Gaussian density of the original targets, dense numpy kernel
    params, noise = reg.kernel_.params_from_theta(torch.from_numpy(theta))
    res = reg.result_
    norm = res.normalizer
    Xn = norm.transform_x(X).numpy()
    K = res.kernel.reference(Xn, Xn, params.numpy()) + float(noise) * np.eye(len(y))
    expect = multivariate_normal(np.full(len(y), norm.y_mean), norm.y_std**2 * K).logpdf(y)
    assert value == pytest.approx(expect, rel=1e-9, abs=1e-8)
    assert reg.log_marginal_likelihood(theta) == pytest.approx(value, rel=1e-12)
    h = 1e-5
    fd = np.array(
        [
            (
                reg.log_marginal_likelihood(theta + h * e)
                - reg.log_marginal_likelihood(theta - h * e)
            )
            / (2 * h)
            for e in np.eye(theta.size)
        ]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)


def test_sample_y_is_sklearn_s_draw(fitted: tuple) -> None:
    reg, gpr, X, _ = fitted
    Xt = _test_points(X)
    s = reg.sample_y(Xt, n_samples=3, random_state=7)
    assert s.shape == (len(Xt), 3)
    np.testing.assert_allclose(s, gpr.sample_y(Xt, n_samples=3, random_state=7), rtol=1e-6)
    np.testing.assert_array_equal(reg.sample_y(Xt, 2), reg.sample_y(Xt, 2))  # default seed 0


def test_sample_y_with_a_torch_generator_has_the_predictive_moments() -> None:
    X, y = _data_1d()
    reg = AmortizedGPRegressor(kernel="SE + PER", device="cpu").fit(X, y)
    Xt = np.array([[1.0], [1.2], [4.0]])
    draws = reg.sample_y(Xt, 20000, random_state=torch.Generator().manual_seed(0))
    again = reg.sample_y(Xt, 20000, random_state=torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(draws, again)
    mean, cov = reg.predict(Xt, return_cov=True)
    sd = np.sqrt(np.diag(cov))
    # 20000 draws: standard errors of about 0.7 % of sd (mean) and 1 % of var (cov)
    np.testing.assert_allclose(draws.mean(1), mean, atol=0.03 * sd.max())
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * cov.max())


def test_parity_errors() -> None:
    X, y = _data_1d()
    reg = AmortizedGPRegressor(kernel="SE", device="cpu").fit(X, y)
    with pytest.raises(RuntimeError, match="At most one"):
        reg.predict(X[:2], return_std=True, return_cov=True)
    with pytest.raises(ValueError, match="Gradient can only be evaluated"):
        reg.log_marginal_likelihood(eval_gradient=True)
    with pytest.raises(ValueError, match="theta must hold 3"):
        reg.log_marginal_likelihood(np.zeros(2))
    with pytest.raises(ValueError, match="n_samples"):
        reg.sample_y(X[:2], n_samples=0)
    shifted = AmortizedGPRegressor(kernel="LIN", device="cpu").fit(X + 1.0, y)
    with pytest.raises(ValueError, match="no scikit-learn equivalent"):
        shifted.kernel_.to_sklearn()
    X2, y2 = _data_2d()
    two = AmortizedGPRegressor(kernel="SE + PER", device="cpu").fit(X2, y2)
    with pytest.raises(ValueError, match="no scikit-learn equivalent"):
        two.kernel_.to_sklearn()


def test_kernel_object_is_readable() -> None:
    X, y = _data_1d()
    reg = AmortizedGPRegressor(kernel="SE + PER", device="cpu").fit(X, y)
    k = reg.kernel_
    assert isinstance(k, FittedKernel)
    text = repr(k)
    assert "SE@0(variance=" in text
    assert "period=" in text
    assert "WhiteNoise(noise_level=" in text
    params = k.get_params()
    assert list(params) == [
        "d0.0.SE.variance",
        "d0.0.SE.lengthscale",
        "d0.1.PER.variance",
        "d0.1.PER.lengthscale",
        "d0.1.PER.period",
        "noise_level",
    ]
    np.testing.assert_allclose(np.exp(k.theta), list(params.values()), rtol=1e-12)
    assert k.bounds.shape == (6, 2)
    # units: lengthscale and period of the original inputs (range r), PER's lengthscale
    # unit-free, variances and noise of the standardised targets
    r = X.max() - X.min()
    hyper = reg.hyperparameters_
    assert params["d0.0.SE.lengthscale"] == pytest.approx(hyper["d0.0.SE.lengthscale"] * r)
    assert params["d0.1.PER.period"] == pytest.approx(hyper["d0.1.PER.period"] * r)
    assert params["d0.1.PER.lengthscale"] == pytest.approx(hyper["d0.1.PER.lengthscale"])
    assert params["noise_level"] == pytest.approx(hyper["noise"])
    per = [p for p in k.to_sklearn().get_params().values() if isinstance(p, ExpSineSquared)]
    assert len(per) == 1
    assert per[0].length_scale == pytest.approx(2 * params["d0.1.PER.lengthscale"])
    assert per[0].periodicity == pytest.approx(params["d0.1.PER.period"])


def test_kernel_result_predict_returns_the_input_s_array_type() -> None:
    X, y = _data_1d()
    res = Amortizer.from_pretrained(device="cpu").infer(X, y, "SE")
    m, v = res.predict(X[:4])
    assert isinstance(m, np.ndarray)
    assert isinstance(v, np.ndarray)
    assert m.dtype == np.float64
    assert m.shape == (4,)
    mt, vt = res.predict(torch.from_numpy(X[:4]))
    assert isinstance(mt, torch.Tensor)
    assert isinstance(vt, torch.Tensor)
    np.testing.assert_array_equal(mt.numpy(), m)
    np.testing.assert_array_equal(vt.numpy(), v)
    ml, _ = res.predict(X[:4].tolist())
    assert isinstance(ml, np.ndarray)


def test_fitted_estimator_pickles_without_the_posterior_factor() -> None:
    X, y = _data_1d(400)
    reg = AmortizedGPRegressor(kernel="SE + PER", device="cpu").fit(X, y)
    mean, std = reg.predict(X[:5], return_std=True)
    assert reg.result_.factored or reg.result_._posterior is not None
    blob = pickle.dumps(reg)
    assert len(blob) < 400 * 400 * 8 // 10  # the factor alone is n^2 float64
    back = pickle.loads(blob)
    m2, s2 = back.predict(X[:5], return_std=True)
    # the factor is computed again: equal to the rounding of a refined (near-noiseless)
    # covariance's factorisation
    np.testing.assert_allclose(m2, mean, rtol=1e-9)
    np.testing.assert_allclose(s2, std, rtol=1e-9)
    assert back.log_marginal_likelihood_ == reg.log_marginal_likelihood_


def _cv_scores(**kwargs: object) -> np.ndarray:
    X, y = _data_1d(60)
    cv = KFold(4, shuffle=True, random_state=0)
    est = AmortizedGPRegressor(kernel="SE + PER", device="cpu")
    return cross_val_score(est, X, y, cv=cv, **kwargs)  # type: ignore[arg-type]


def test_cross_validation_in_threads_matches_serial() -> None:
    serial = _cv_scores()
    with joblib.parallel_config(backend="threading"):
        threaded = _cv_scores(n_jobs=2)
    np.testing.assert_allclose(threaded, serial, rtol=1e-10)


@pytest.mark.slow
def test_cross_validation_in_processes_matches_serial() -> None:
    np.testing.assert_allclose(_cv_scores(n_jobs=2), _cv_scores(), rtol=1e-10)
