"""Noise floor, fixed hyperparameters and bounds, against independent oracles: scikit-learn's
GP for the near-noiseless optimum, scipy's optimum of the closed-form dense log marginal
likelihood for fixed and bounded parameters."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.stages.constraints import (
    DEFAULT_NOISE_FLOOR,
    NoiseFloorWarning,
    check_constraints,
)
from amorgp.amortizer.stages.objective import LogMarginalLikelihood
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import DimWiseStructure

LS = (0, 0, "lengthscale")
VAR = (0, 0, "variance")


def _sine(n: int = 50, noise: float = 0.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(0.0, 1.0, n)
    rng = np.random.default_rng(seed)
    return x, np.sin(6.0 * x) + noise * rng.normal(size=n)


def _normalised(r: object) -> tuple[np.ndarray, np.ndarray]:
    post = r.posterior  # type: ignore[attr-defined]
    return post.X.numpy().astype(np.float64), post.y.numpy().astype(np.float64)


def _se_lml(Xn: np.ndarray, yn: np.ndarray, var: float, ls: float, noise: float) -> float:
    """Dense float64 ``log N(y | 0, var exp(-r^2 / 2 ls^2) + noise I)``."""
    r2 = (Xn[:, 0, None] - Xn[None, :, 0]) ** 2
    A = var * np.exp(-0.5 * r2 / ls**2) + noise * np.eye(len(yn))
    L = np.linalg.cholesky(A)
    a = np.linalg.solve(L, yn)
    return float(-0.5 * a @ a - np.log(np.diag(L)).sum() - 0.5 * len(yn) * math.log(2 * math.pi))


def _scipy_optimum(f, starts, bounds=None) -> float:  # type: ignore[no-untyped-def]
    """Highest ``f(log theta)`` over L-BFGS-B runs from ``starts``."""
    best = -math.inf
    for s in starts:
        res = minimize(lambda t: -f(t), np.asarray(s, float), method="L-BFGS-B", bounds=bounds)
        best = max(best, -float(res.fun))
    return best


# -- the noise floor ---------------------------------------------------------------------------


def test_a_lower_floor_reaches_the_near_noiseless_optimum_of_sklearn(amz: Amortizer) -> None:
    """Noiseless sin(6x) on 50 points: the default floor stops the noise at 1e-6 and warns;
    noise_floor=1e-10 with refine reaches scikit-learn's optimum (noise at its 1e-10 bound)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    x, y = _sine()
    with pytest.warns(NoiseFloorWarning, match=r"noise_floor=") as rec:
        default = amz.infer(x, y, "SE", refine="auto")
    assert rec[0].filename == __file__  # the warning names the caller's line
    assert default.noise == pytest.approx(DEFAULT_NOISE_FLOOR, rel=1e-3)
    with pytest.warns(NoiseFloorWarning):  # 1e-10 is still binding on noiseless data
        low = amz.infer(x, y, "SE", refine="auto", noise_floor=1e-10)
    Xn, yn = _normalised(low)
    kernel = C(1.0) * RBF(1.0) + WhiteKernel(1e-5, noise_level_bounds=(1e-10, 1e5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp = GaussianProcessRegressor(kernel, n_restarts_optimizer=3, random_state=0)
        gp.fit(Xn, yn)
    sk_lml = float(gp.log_marginal_likelihood_value_)
    assert sk_lml > default.log_marginal_likelihood + 100.0  # the floor cost > 100 nats
    assert low.log_marginal_likelihood >= sk_lml - 0.5
    assert 1e-10 <= low.noise < 1e-9
    assert low.noise_floor == 1e-10
    assert default.noise_floor == DEFAULT_NOISE_FLOOR
    assert low.posterior.cholesky_jitter == 0.0  # factored without jitter
    var, ls = low.hyperparameters[VAR], low.hyperparameters[LS]
    # condition number ~1e11: the two float64 evaluations agree to ~1e-5 relative
    assert low.log_marginal_likelihood == pytest.approx(
        _se_lml(Xn, yn, var, ls, low.noise), rel=1e-5
    )


def test_a_lower_floor_lowers_the_calibrated_noise_too(amz: Amortizer) -> None:
    x, y = _sine()
    with pytest.warns(NoiseFloorWarning):
        r = amz.infer(x, y, "SE", noise_floor=1e-10, refine=0)
    assert 2e-10 <= r.noise < 1e-8


def test_no_warning_when_the_optimum_is_above_the_floor(amz: Amortizer) -> None:
    x, y = _sine(noise=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseFloorWarning)
        r = amz.infer(x, y, "SE", refine="auto", noise_floor=1e-10)
    assert r.noise > 1e-4


def test_a_raised_floor_bounds_every_stage(amz: Amortizer) -> None:
    x, y = _sine()
    for calibrate in (True, False):
        with pytest.warns(NoiseFloorWarning, match="floor 0.01"):
            r = amz.infer(x, y, "SE", refine=3, calibrate=calibrate, noise_floor=1e-2)
        assert r.noise >= 1e-2


# -- fixed values ------------------------------------------------------------------------------


def test_fixed_noise_is_exact_and_the_rest_is_the_profile_optimum(amz: Amortizer) -> None:
    """With the noise fixed the refined variance and lengthscale maximise the dense LML at
    that noise (scipy's optimum over both, several starts)."""
    x, y = _sine(noise=0.05, seed=1)
    v = 1e-2
    r = amz.infer(x, y, "SE", refine="auto", fixed={"noise": v})
    assert r.noise == v
    assert r.fixed == {"noise": v}
    Xn, yn = _normalised(r)
    best = _scipy_optimum(
        lambda t: _se_lml(Xn, yn, math.exp(t[0]), math.exp(t[1]), v),
        [(0.0, math.log(0.3)), (1.0, math.log(0.1)), (0.0, 0.0)],
    )
    assert r.log_marginal_likelihood == pytest.approx(best, abs=0.02)
    assert r.log_marginal_likelihood >= best - 0.02


def test_fixed_kernel_parameter_is_exact_and_the_rest_optimal(amz: Amortizer) -> None:
    x, y = _sine(noise=0.05, seed=2)
    r = amz.infer(x, y, "SE", refine="auto", fixed={LS: 0.2})
    assert r.hyperparameters[LS] == 0.2
    Xn, yn = _normalised(r)
    best = _scipy_optimum(
        lambda t: _se_lml(Xn, yn, math.exp(t[0]), 0.2, math.exp(t[1])),
        [(0.0, math.log(1e-2)), (1.0, math.log(1e-3))],
        bounds=[(None, None), (math.log(DEFAULT_NOISE_FLOOR), None)],
    )
    assert r.log_marginal_likelihood == pytest.approx(best, abs=0.02)


def test_everything_fixed_returns_the_given_values(amz: Amortizer) -> None:
    x, y = _sine(noise=0.05)
    fixed = {VAR: 2.0, LS: 0.3, "noise": 0.01}
    r = amz.infer(x, y, "SE", refine="auto", fixed=fixed)
    assert (r.hyperparameters[VAR], r.hyperparameters[LS], r.noise) == (2.0, 0.3, 0.01)
    Xn, yn = _normalised(r)
    assert r.log_marginal_likelihood == pytest.approx(_se_lml(Xn, yn, 2.0, 0.3, 0.01), abs=1e-8)


# -- bounds ------------------------------------------------------------------------------------


def test_bounds_hold_and_refinement_finds_the_bounded_optimum(amz: Amortizer) -> None:
    """The free optimum's lengthscale is about 0.5; bounded to (0.05, 0.2) it ends at the
    upper bound with scipy's L-BFGS-B optimum (scikit-learn's bounds semantics)."""
    x, y = _sine(noise=0.05, seed=3)
    lo, hi = 0.05, 0.2
    r = amz.infer(x, y, "SE", refine="auto", bounds={LS: (lo, hi), "noise": (1e-4, 1.0)})
    ls = r.hyperparameters[LS]
    assert lo <= ls <= hi
    assert ls == pytest.approx(hi, rel=1e-2)
    assert 1e-4 <= r.noise <= 1.0
    assert r.bounds == {LS: (lo, hi), "noise": (1e-4, 1.0)}
    Xn, yn = _normalised(r)
    best = _scipy_optimum(
        lambda t: _se_lml(Xn, yn, math.exp(t[0]), math.exp(t[1]), math.exp(t[2])),
        [(0.0, math.log(0.1), math.log(1e-2)), (1.0, math.log(0.2), math.log(1e-3))],
        bounds=[(None, None), (math.log(lo), math.log(hi)), (math.log(1e-4), 0.0)],
    )
    assert r.log_marginal_likelihood == pytest.approx(best, abs=0.05)


def test_a_start_outside_the_bounds_is_clipped_into_them(amz: Amortizer) -> None:
    x, y = _sine(noise=0.05)
    r = amz.infer(x, y, "SE", bounds={LS: (2.0, 3.0)}, calibrate=False, refine=0)
    assert r.hyperparameters[LS] == 2.0


def test_constraints_are_reported(amz: Amortizer) -> None:
    x, y = _sine(noise=0.05)
    r = amz.infer(x, y, "SE", fixed={"noise": 0.01}, bounds={LS: (0.1, 1.0)})
    d = r.to_dict()
    assert d["fixed"] == {"noise": 0.01}
    assert d["bounds"] == {"d0.0.lengthscale": [0.1, 1.0]}
    assert d["noise_floor"] == DEFAULT_NOISE_FLOOR
    assert "fixed={'noise': 0.01}" in repr(r)


def test_a_name_applies_to_each_kernel_that_has_it(amz: Amortizer) -> None:
    x, y = _sine(noise=0.05)
    per = (0, 1, "period")
    a, b = amz.infer_many(x, y, ["SE", "SE + PER"], fixed={per: 0.25}, starts=1)
    assert a.fixed == {}
    assert b.fixed == {per: 0.25}
    assert b.hyperparameters[per] == 0.25


# -- the objective's transform -----------------------------------------------------------------


def test_the_constrained_gradient_is_the_objective_s_derivative() -> None:
    """Closed-form gradient of the constrained objective (fixed, bounded and floored
    coordinates) against central differences."""
    s = DimWiseStructure.coerce("SE + PER", 1)
    cons = check_constraints(
        {(0, 1, "variance"): 0.5}, {(0, 0, "lengthscale"): (0.05, 1.0)}, 1e-9
    ).resolve([s])[0]
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(20, 1, generator=gen, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0])
    f = LogMarginalLikelihood(X, y, s, cons)
    params = torch.tensor([[[1.0, 0.3, 1.0], [0.5, 0.7, 0.4]]], dtype=torch.float64)
    z = f.to_log(params, torch.tensor(1e-3, dtype=torch.float64))
    assert z.shape == (5,)  # 6 parameters, one fixed
    _, grad = f.value_and_grad(z)
    eps = 1e-6
    for i in range(z.numel()):
        dz = torch.zeros_like(z)
        dz[i] = eps
        fd = (f.value_and_grad(z + dz)[0] - f.value_and_grad(z - dz)[0]) / (2 * eps)
        assert float(grad[i]) == pytest.approx(float(fd), rel=1e-5, abs=1e-6)
    p, nz = f.from_log(z)
    assert float(p[0, 1, 0]) == 0.5
    assert 0.05 < float(p[0, 0, 1]) < 1.0
    assert float(nz) == pytest.approx(1e-3, rel=1e-9)


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"noise_floor": 1e-14}, "below 1e-12.*float64 Cholesky"),
        ({"noise_floor": 0.0}, "positive"),
        ({"noise_floor": "1e-8"}, "real number"),
        ({"noise_floor": 2.0}, "below 1"),
        ({"fixed": {"lengthscale": 0.3}}, "must be 'noise' or \\(dim, addend, name\\)"),
        ({"fixed": {(0, 0, "period"): 0.3}}, "none of the kernels"),
        ({"fixed": {LS: -1.0}}, "positive and finite"),
        ({"fixed": {LS: math.nan}}, "positive and finite"),
        ({"fixed": {"noise": 1e-8}}, "below the noise_floor= 1e-06.*lower noise_floor"),
        ({"fixed": {LS: 1e-6}}, "below the floor of its kind 0.0001"),
        ({"fixed": [("noise", 0.1)]}, "must be a mapping"),
        ({"bounds": {LS: (0.5, 0.1)}}, "needs low < high"),
        ({"bounds": {LS: (0.5, 0.5)}}, "needs low < high"),
        ({"bounds": {LS: 0.5}}, "pair \\(low, high\\)"),
        ({"bounds": {"noise": (0.0, 1.0)}}, "low must be positive"),
        ({"fixed": {LS: 0.3}, "bounds": {LS: (0.1, 1.0)}}, "both fixed and bounded"),
    ],
)
def test_bad_constraints_are_one_line_option_errors(
    amz: Amortizer, options: dict[str, object], match: str
) -> None:
    x, y = _sine(noise=0.05)
    with pytest.raises(OptionError, match=match) as err:
        amz.infer(x, y, "SE", **options)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_the_estimator_takes_the_options() -> None:
    from sklearn.base import clone

    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    reg = AmortizedGPRegressor("SE", noise_floor=1e-10, fixed={"noise": 1e-3})
    assert clone(reg).get_params()["noise_floor"] == 1e-10
    x, y = _sine(noise=0.05)
    reg.fit(x[:, None], y)
    # the estimator's values are in the data's units: the noise in units of y^2
    assert reg.result_.noise == pytest.approx(1e-3 / np.var(y), rel=1e-12)
    assert reg.hyperparameters_original_["noise"] == pytest.approx(1e-3, rel=1e-12)
    with pytest.raises(OptionError, match="low < high"):
        reg.set_params(fixed=None, bounds={LS: (1.0, 0.1)}).fit(x[:, None], y)


def test_the_noise_slope_is_the_likelihood_s_derivative() -> None:
    """The slope that decides the floor warning equals a central finite difference of the
    dense float64 log marginal likelihood (scipy's multivariate normal) in the noise."""
    from scipy.stats import multivariate_normal

    from amorgp.amortizer.stages.constraints import noise_slope

    rng = np.random.default_rng(4)
    x = np.sort(rng.uniform(0.0, 1.0, 25))
    y = np.sin(6.0 * x) + 0.05 * rng.standard_normal(25)
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.2**2)
    sigma2, h = 1e-3, 1e-7

    def lml(s2: float) -> float:
        return float(multivariate_normal(np.zeros(25), K + s2 * np.eye(25)).logpdf(y))

    A = torch.as_tensor(K + sigma2 * np.eye(25))
    L = torch.linalg.cholesky(A)
    alpha = torch.cholesky_solve(torch.as_tensor(y)[:, None], L)[:, 0]
    fd = (lml(sigma2 + h) - lml(sigma2 - h)) / (2 * h)
    assert noise_slope(L, alpha) == pytest.approx(fd, rel=1e-5)


def test_priors_give_the_map_optimum(amz: Amortizer) -> None:
    """``priors=True`` refines to the maximum of the log marginal likelihood plus the
    grammar's log priors (oracle: scipy's L-BFGS-B on the dense float64 objective in log
    space, several starts); without ``refine`` it is refused."""
    from scipy.optimize import minimize
    from scipy.stats import multivariate_normal

    from amorgp.kernel_grammar import NOISE, base_symbol

    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(0.0, 10.0, 30))
    y = np.sin(x) + 0.3 * rng.standard_normal(30)
    r = amz.infer(x, y, "SE", refine="auto", priors=True)
    assert r.priors
    assert r.to_dict()["priors"] is True
    Xn = r.normalizer.transform_x(torch.as_tensor(x[:, None])).numpy()[:, 0]
    yn = r.normalizer.transform_y(torch.as_tensor(y)).numpy()
    specs = [*base_symbol("SE").params, NOISE]

    def objective(log_theta: np.ndarray) -> float:
        s2, ell, noise = np.exp(log_theta)
        K = s2 * np.exp(-0.5 * (Xn[:, None] - Xn[None, :]) ** 2 / ell**2)
        lml = multivariate_normal(np.zeros(30), K + noise * np.eye(30)).logpdf(yn)
        prior = sum(float(p.prior.log_prob(t)) for p, t in zip(specs, (s2, ell, noise)))
        return -(lml + prior)

    best = min(
        (minimize(objective, np.log(s), method="L-BFGS-B") for s in ([1, 0.3, 0.1], [1, 1, 0.5])),
        key=lambda o: o.fun,
    )
    ours = np.log([float(r.params[0, 0, 0]), float(r.params[0, 0, 1]), r.noise])
    # within the stopping rule's resolution: a predicted gain below 0.01 nats (fisher.py)
    assert -objective(ours) >= -best.fun - 0.01
    np.testing.assert_allclose(ours, best.x, atol=5e-2)
    # the default refinement is the MAP fit too
    default = amz.infer(x, y, "SE", priors=True)
    assert -objective(np.log([float(default.params[0, 0, 0]), float(default.params[0, 0, 1]),
                              default.noise])) >= -best.fun - 0.01  # fmt: skip
    with pytest.raises(ValueError, match="priors=True acts through the refinement"):
        amz.infer(x, y, "SE", priors=True, refine=0)
    with pytest.raises(ValueError, match="priors must be True or False"):
        amz.infer(x, y, "SE", refine=3, priors="yes")  # type: ignore[arg-type]
