from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from amorgp.baselines import METHODS, Baseline, HyperparameterInference, fit, fit_many
from amorgp.baselines.testing import (
    check_inference,
    check_kernel_fit,
    dense_log_marginal_likelihood,
    dense_predictive,
)
from amorgp.core.data import Normalizer
from amorgp.core.errors import DataError
from amorgp.core.fit import KernelFit
from amorgp.kernel_grammar import DimWiseStructure

FAST = {
    "gp-ml": {"max_iters": 30},
    "gp-ml-multistart": {"max_iters": 20, "restarts": 3},
    "gp-ml-lbfgs": {"max_iters": 20},
    "map": {"max_iters": 30},
    "map-lbfgs": {"max_iters": 20},
    "svgp": {"max_iters": 30},
    "advi-meanfield": {
        "max_iters": 200,
        "adapt_iters": 10,
        "n_predictive_samples": 8,
        "n_elbo_samples": 10,
    },
    "advi-fullrank": {
        "max_iters": 200,
        "adapt_iters": 10,
        "n_predictive_samples": 8,
        "n_elbo_samples": 10,
    },
    "diwp": {"quick": True, "n_inducing": 8, "iterations": 20, "late_iterations": 5},
}


def _raw_data(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = np.c_[rng.uniform(100, 200, n), rng.uniform(-3, 3, n)]
    y = 50 + 10 * np.sin(X[:, 0] / 10) + X[:, 1] + rng.normal(0, 0.5, n)
    return X, y


@pytest.mark.parametrize("method", METHODS)
def test_every_method_satisfies_the_protocol(method: str) -> None:
    X, y = _raw_data()
    kernels = (
        ["SE"] if method == "diwp" else ["SE", "SE + LIN"]
    )  # a DIWP kernel names its Gram kernel
    check_inference(Baseline(method, **FAST[method]), X, y, kernels)  # type: ignore[arg-type]


def test_predict_is_in_original_units_and_matches_the_dense_posterior() -> None:
    X, y = _raw_data()
    res = fit(X, y, "SE + PER", method="gp-ml", max_iters=40)
    norm = Normalizer.fit(torch.as_tensor(X), torch.as_tensor(y))
    Xn = norm.transform_x(torch.as_tensor(X)).numpy()
    yn = norm.transform_y(torch.as_tensor(y)).numpy()
    X_new = X[:5] + 1.0
    m_ref, v_ref = dense_predictive(
        Xn,
        yn,
        norm.transform_x(torch.as_tensor(X_new)).numpy(),
        res.kernel,
        res.hyperparameters,
        res.noise,
    )
    mean, var = res.predict(X_new)
    np.testing.assert_allclose(mean.numpy(), m_ref * norm.y_std + norm.y_mean, rtol=1e-8)
    np.testing.assert_allclose(var.numpy(), v_ref * norm.y_std**2, rtol=1e-8)
    lml = dense_log_marginal_likelihood(Xn, yn, res.kernel, res.hyperparameters, res.noise)
    assert res.log_marginal_likelihood == pytest.approx(lml, rel=1e-9)
    lpd = res.log_predictive_density(X_new, y[:5])
    ref = -0.5 * (np.log(2 * np.pi * var.numpy()) + (y[:5] - mean.numpy()) ** 2 / var.numpy())
    np.testing.assert_allclose(lpd.numpy(), ref, rtol=1e-9)
    orig = res.hyperparameters_original
    rng0 = X[:, 0].max() - X[:, 0].min()
    assert orig[(0, 0, "lengthscale")] == pytest.approx(
        res.hyperparameters[(0, 0, "lengthscale")] * rng0
    )
    assert orig[(0, 0, "variance")] == pytest.approx(
        res.hyperparameters[(0, 0, "variance")] * norm.y_std**2
    )


def test_fit_many_equals_separate_fits() -> None:
    X, y = _raw_data()
    kernels = ["SE", "PER + LIN", "(SE)@0 * (LIN*PER)@1"]
    many = fit_many(X, y, kernels, method="gp-ml", max_iters=25)
    for k, r in zip(kernels, many, strict=True):
        alone = fit(X, y, k, method="gp-ml", max_iters=25)
        assert r.kernel == alone.kernel
        assert r.log_marginal_likelihood == pytest.approx(
            alone.log_marginal_likelihood, rel=1e-9, abs=1e-9
        )
        assert r.hyperparameters == pytest.approx(alone.hyperparameters, rel=1e-8)


def test_accepts_structures_and_one_dimensional_inputs() -> None:
    x = np.linspace(0, 5, 12)
    res = fit(x, np.cos(x), DimWiseStructure.parse("SE", 1), max_iters=10)
    check_kernel_fit(res, x[:3, None])
    assert isinstance(Baseline(), HyperparameterInference)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kernel": "SE + FOO"}, "FOO|unknown"),
        ({"kernel": "(SE)@0 * (SE)@2"}, "dimension"),
        ({"kernel": "MAT52"}, "vocabulary"),
        ({"method": "gp-mle"}, "unknown method"),
        ({"y": [1.0, math.nan, 2.0, 3.0]}, "NaN"),
        ({"X": np.ones((3, 2))}, "rows"),
    ],
)
def test_bad_input_gives_clear_errors(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "X": np.random.default_rng(0).uniform(size=(4, 2)),
        "y": [1.0, 2.0, 0.5, 3.0],
        "kernel": "SE",
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fit(**args)  # type: ignore[arg-type]


def test_predict_validates_inputs() -> None:
    X, y = _raw_data(8)
    res = fit(X, y, "SE", max_iters=5)
    with pytest.raises(ValueError, match="shape"):
        res.predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        res.predict(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="values"):
        res.log_predictive_density(X[:3], y[:2])


@pytest.mark.parametrize("scale", [1e-120, 1e120])
def test_extreme_target_scales_map_exactly(scale: float) -> None:
    """Scaling y by c leaves the normalised fit unchanged and maps predictions exactly."""
    X, y = _raw_data()
    ref = fit(X, y, "SE", method="gp-ml", max_iters=20)
    res = fit(X, y * scale, "SE", method="gp-ml", max_iters=20)
    assert res.hyperparameters == pytest.approx(ref.hyperparameters, rel=1e-9)
    assert res.log_marginal_likelihood_original == pytest.approx(
        ref.log_marginal_likelihood_original - len(y) * math.log(scale), rel=1e-9
    )
    mean, var = res.predict(X[:3])
    m0, v0 = ref.predict(X[:3])
    np.testing.assert_allclose(mean.numpy(), m0.numpy() * scale, rtol=1e-8)
    np.testing.assert_allclose(var.numpy(), v0.numpy() * scale**2, rtol=1e-8)


@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_unrepresentable_target_scales_are_refused(scale: float) -> None:
    X, y = _raw_data()
    with pytest.raises(DataError, match=r"standard deviation .* rescale y"):
        fit(X, y * scale, "SE", max_iters=5)


def test_results_share_the_fit_result_base() -> None:
    X, y = _raw_data()
    (res,) = fit_many(X, y, ["SE"], max_iters=5)
    assert isinstance(res, KernelFit)
    assert res.call_time_s >= res.time_s > 0
    assert res.noise_original == pytest.approx(res.noise * res.normalizer.y_std**2)
    assert res.to_dict()["status"] == res.status
