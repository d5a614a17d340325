"""The DIWP model, its training and prediction, and ``method="diwp"``."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import RBF

from amorgp.baselines import Baseline, fit, fit_many
from amorgp.baselines.bayesian import mixture_moments
from amorgp.baselines.diwp import DIWP, DIWPSettings, PointNoise, fit_diwp
from amorgp.baselines.testing import check_inference
from amorgp.baselines.testing import synthetic_dataset as make_data
from amorgp.core.errors import DataError, OptionError
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood, dense_gp_predictive
from amorgp.kernel_grammar import EXTENDED_VOCABULARY

F64 = torch.float64
TINY = {"quick": True, "n_inducing": 8, "iterations": 30, "late_iterations": 10}
DATA = Path(__file__).resolve().parents[3] / "data"


def _se_of_gram(K: np.ndarray, lengthscale: float, variance: float = 1.0) -> np.ndarray:
    """SE kernel of the features whose Gram matrix is ``K``: ``R = k_aa + k_bb - 2 k_ab``."""
    d = np.diag(K)
    R = d[:, None] + d[None, :] - 2.0 * K
    return variance * np.exp(-0.5 * R / lengthscale**2)


def test_very_large_delta_reproduces_the_nngp_limit() -> None:
    """delta -> inf: G^l -> K(G^(l-1)); with Z = X, v = y and Lambda = I / sigma^2 the
    predictive is the exact GP's with the composed kernel K(K(K_ARD(X)))."""
    X, y = make_data(10, 2, seed=3)
    Xt = torch.rand(5, 2, generator=torch.Generator().manual_seed(4), dtype=F64)
    s = DIWPSettings(
        n_hidden=2,
        n_inducing=10,
        delta_init=1e9,
        gamma_init=1e-9,
        v_init_scale=0.0,
        lengthscale_init=0.6,
        variance_init=1.3,
        noise_init=0.05,
        jitter=1e-12,
        test_samples=4,
    )
    model = DIWP(X, y, s)
    with torch.no_grad():
        model.log_lam.fill_(-math.log(0.05))
    gen = torch.Generator().manual_seed(5)
    mean, var = mixture_moments(*model.predictive_components(Xt, 4000, gen))
    # oracle: dense numpy layers on all points, then the dense exact predictive
    A = np.vstack([X.numpy(), Xt.numpy()])
    K = RBF(length_scale=[0.6, 0.6])(A)
    K = _se_of_gram(K, 1.0)
    K = _se_of_gram(K, 1.0, 1.3)
    n = X.shape[0]
    m_ref, v_ref = dense_gp_predictive(K[:n, :n], K[:n, n:], np.diag(K)[n:], y.numpy(), 0.05)
    # f_i ~ Q is random (the GP posterior at Z = X): Monte Carlo tolerances
    np.testing.assert_allclose(mean.numpy(), m_ref, atol=0.02)
    np.testing.assert_allclose(var.numpy(), v_ref, rtol=0.05)
    # the ELBO with Z = X is the exact log marginal likelihood of the composed kernel
    # (the inverse Wishart layers' log ratios vanish as Q -> P)
    with torch.no_grad():
        elbo = float(model.elbo(X, y, 4, gen))
    exact = dense_gp_log_marginal_likelihood(K[:n, :n], y.numpy(), 0.05)
    assert elbo == pytest.approx(exact, abs=1e-3), (elbo, exact)
    # and with no hidden layer it is the ARD-SE GP itself
    model0 = DIWP(X, y, replace(s, n_hidden=0))
    with torch.no_grad():
        model0.log_lam.fill_(-math.log(0.05))
    mean0, _ = mixture_moments(*model0.predictive_components(Xt, 4000, gen))
    K0 = 1.3 * RBF(length_scale=[0.6, 0.6])(A)
    m0, _ = dense_gp_predictive(K0[:n, :n], K0[:n, n:], np.diag(K0)[n:], y.numpy(), 0.05)
    np.testing.assert_allclose(mean0.numpy(), m0, atol=0.02)


def test_points_are_predicted_independently_so_cost_is_linear_in_their_number() -> None:
    X, y = make_data(24, 3, seed=1)
    s = DIWPSettings.quick(n_hidden=2, n_inducing=6)
    model = DIWP(X[:6], y[:6], s)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        ind = model.sample_inducing(3, gen)
        noise = model.draw_noise(3, 24, gen)
        whole = model.sample_points(ind, X, noise)
        parts = [
            model.sample_points(
                ind, X[sl], [PointNoise(nz.gamma[:, sl], nz.normal[..., sl]) for nz in noise]
            )
            for sl in (slice(0, 1), slice(1, 10), slice(10, 24))
        ]
    for w, p in zip(whole, zip(*parts, strict=True), strict=True):
        torch.testing.assert_close(w, torch.cat(p, -1), rtol=1e-12, atol=1e-12)
        assert w.shape == (3, 24)
    # the predictive runs chunk by chunk: one chunk equals the explicit computation
    gen_a, gen_b = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    single = model.predictive_components(X, 5, gen_a, include_noise=False, chunk_size=24)
    with torch.no_grad():
        ind = model.sample_inducing(5, gen_b)
        manual = model.sample_points(ind, X, model.draw_noise(5, 24, gen_b))
    for a, b in zip(single, manual, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    chunked = model.predictive_components(X, 5, gen_a, chunk_size=5)
    assert chunked[0].shape == (5, 24)


def test_training_raises_the_elbo_and_beats_the_constant_predictor() -> None:
    X, y = make_data(60, 1, seed=5, noise=0.05)
    Xtr, ytr, Xte, yte = X[:40], y[:40], X[40:], y[40:]
    s = DIWPSettings.quick(n_inducing=12, iterations=200, late_iterations=50)
    res = fit_diwp(Xtr, ytr, s, generator=torch.Generator().manual_seed(0))
    trace = res.trace
    assert res.skipped == 0
    assert res.status == "max_iters"
    assert float(trace[-20:].mean()) > float(trace[:20].mean()) + 50.0
    mean, var = res.predict(Xte)
    assert bool((var > 0).all())
    rmse = float(((mean - yte) ** 2).mean().sqrt())
    assert rmse < 0.5 * float(((yte - ytr.mean()) ** 2).mean().sqrt())
    lpd = res.log_predictive_density(Xte, yte).mean()
    const = (
        -0.5 * (math.log(2 * math.pi * ytr.var()) + ((yte - ytr.mean()) ** 2 / ytr.var())).mean()
    )
    assert float(lpd) > float(const) + 0.5
    # the predictive is deterministic and in original units
    Xo, yo = 10.0 * Xtr + 3.0, 4.0 * ytr - 1.0
    res_o = fit_diwp(Xo, yo, s, generator=torch.Generator().manual_seed(0))
    m_o, v_o = res_o.predict(10.0 * Xte + 3.0)
    torch.testing.assert_close(m_o, 4.0 * mean - 1.0, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(v_o, 16.0 * var, rtol=1e-8, atol=1e-10)


def test_method_diwp_satisfies_the_inference_protocol() -> None:
    X, y = make_data(20, 2, seed=6)
    fits = check_inference(Baseline("diwp", **TINY), X.numpy(), y.numpy(), ["SE"])
    assert fits[0].objective == "elbo"
    assert fits[0].method == "diwp"
    [mat] = fit_many(
        X, y, ["MAT52"], method="diwp", vocab=EXTENDED_VOCABULARY, analytic_kl=True, **TINY
    )
    assert mat.kernel_text == "MAT52"
    lpd = mat.log_predictive_density(X[:4], y[:4])
    assert lpd.shape == (4,)
    assert bool(torch.isfinite(lpd).all())


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda X, y: fit_diwp(torch.where(X > 0.9, math.nan, X), y), DataError, "NaN"),
        (lambda X, y: fit_diwp(X, y, DIWPSettings.quick(n_inducing=13)), DataError, "inducing"),
        (lambda X, y: fit(X, y, "PER", method="diwp", **TINY), OptionError, "SE, MAT52"),
        (lambda X, y: fit(X, y, "SE + SE*LIN", method="diwp", **TINY), OptionError, "one addend"),
        (lambda X, y: DIWPSettings(kernel="cosine"), OptionError, "Gram-matrix kernel"),
        (lambda X, y: DIWPSettings(n_hidden=-1), OptionError, "n_hidden"),
        (
            lambda X, y: fit(X, y, "SE", method="diwp", **TINY).predict(np.ones((2, 3))),
            DataError,
            "column",
        ),
        (
            lambda X, y: fit_diwp(X, y, DIWPSettings.quick(n_inducing=4, iterations=2)).predict(
                np.ones((2, 3))
            ),
            DataError,
            "column",
        ),
    ],
)
def test_bad_input_gives_clear_errors(call, error: type[Exception], match: str) -> None:  # type: ignore[no-untyped-def]
    X, y = make_data(12, 2, seed=7)
    with pytest.raises(error, match=match):
        call(X, y)


@pytest.mark.slow
def test_yacht_quick_diwp_beats_the_constant_predictor() -> None:
    data = np.loadtxt(DATA / "yacht.csv", delimiter=",", skiprows=1)
    perm = np.random.default_rng(0).permutation(len(data))
    tr, te = data[perm[:250]], data[perm[250:]]
    s = DIWPSettings.quick(n_inducing=50, iterations=800, late_iterations=200, test_samples=50)
    res = fit_diwp(tr[:, :-1], tr[:, -1], s, generator=torch.Generator().manual_seed(0))
    lpd = float(res.log_predictive_density(te[:, :-1], te[:, -1]).mean())
    y_tr = tr[:, -1]
    const = float(
        np.mean(
            -0.5 * (np.log(2 * np.pi * y_tr.var()) + (te[:, -1] - y_tr.mean()) ** 2 / y_tr.var())
        )
    )
    mean, _ = res.predict(te[:, :-1])
    rmse = float(np.sqrt(np.mean((mean.numpy() - te[:, -1]) ** 2)))
    assert lpd > const + 2.0, (lpd, const)  # measured: -1.17 against -4.05
    assert rmse < 0.1 * float(np.std(te[:, -1])), rmse  # measured: 0.63 against 13.6
