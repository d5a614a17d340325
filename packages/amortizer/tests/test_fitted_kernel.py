"""``kernel_`` in scikit-learn's parameterisation: one output scale, no redundant variances.

The oracle is scikit-learn (``kernel_.to_sklearn()``: its ``theta``, its kernel matrix,
its ``clone_with_theta`` and ``GaussianProcessRegressor.log_marginal_likelihood``) and the
grammar's dense numpy reference of the unfolded structure.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Product, Sum, WhiteKernel

from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor
from amorgp.amortizer.frontends.fitted_kernel import FittedKernel, Folding
from amorgp.kernel_grammar import DimWiseStructure


def _data(d: int, n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 3.0, (n, d))
    X[:, 0] *= 4.0  # columns of different ranges: lengthscales in input units differ
    y = np.sin(X[:, 0] / 4.0) + 0.3 * X[:, 1 % d] + 0.05 * rng.standard_normal(n)
    return X, 10.0 * y + 3.0


@pytest.fixture(scope="module")
def ard() -> tuple[AmortizedGPRegressor, GaussianProcessRegressor, np.ndarray, np.ndarray]:
    X, y = _data(5)
    reg = AmortizedGPRegressor(kernel="SE", device="cpu").fit(X, y)
    gpr = GaussianProcessRegressor(
        kernel=reg.kernel_.to_sklearn(), normalize_y=True, optimizer=None, alpha=0.0
    ).fit(X, y)
    return reg, gpr, X, y


def test_ard_se_has_scikit_learn_s_parameter_count_and_theta(ard: tuple) -> None:
    reg, _, X, _ = ard
    k = reg.kernel_
    # 1 output scale + 5 lengthscales + the noise level (was 5 variances + 5 + 1 = 11)
    assert k.theta.shape == (7,)
    assert k.n_dims == 7
    assert k.bounds.shape == (7, 2)
    assert len(k.hyperparameters) == len(k.get_params()) == 7
    assert k.hyperparameter_names == [
        "d0.0.SE.variance",
        *(f"d{d}.0.SE.lengthscale" for d in range(5)),
        "noise_level",
    ]
    sk = k.to_sklearn()
    assert isinstance(sk, Sum)
    assert isinstance(sk.k1, Product)
    assert isinstance(sk.k1.k1, ConstantKernel)
    assert isinstance(sk.k1.k2, RBF)
    assert isinstance(sk.k2, WhiteKernel)
    assert np.shape(sk.k1.k2.length_scale) == (5,)
    # scikit-learn's theta: [log s^2, log l_1..l_5, log noise], the same values as ours
    assert sk.theta.shape == (7,)
    np.testing.assert_allclose(sk.theta, k.theta, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sk.bounds, k.bounds, rtol=0, atol=1e-12)
    # the output scale is the product of the per-column variances, the lengthscales are
    # the normalised ones times each column's range
    hyper = reg.hyperparameters_
    scale = math.prod(hyper[f"d{d}.0.SE.variance"] for d in range(5))
    assert k.get_params()["d0.0.SE.variance"] == pytest.approx(scale, rel=1e-12)
    r = X.max(0) - X.min(0)
    for d in range(5):
        assert k.get_params()[f"d{d}.0.SE.lengthscale"] == pytest.approx(
            hyper[f"d{d}.0.SE.lengthscale"] * r[d], rel=1e-12
        )
    noise = k.get_params()["noise_level"]
    np.testing.assert_allclose(sk(X), k(X) + noise * np.eye(len(X)), rtol=0, atol=1e-10)
    Xt = X[:7] + 0.25
    np.testing.assert_allclose(sk(Xt, X), k(Xt, X), rtol=0, atol=1e-10)


def test_ard_se_likelihood_at_theta_is_scikit_learn_s(ard: tuple) -> None:
    reg, gpr, _, y = ard
    offset = -len(y) * np.log(y.std())  # scikit-learn's is that of the standardised targets
    theta = reg.kernel_.theta
    assert gpr.log_marginal_likelihood(theta) == pytest.approx(
        reg.log_marginal_likelihood_value_ - offset, rel=1e-9, abs=1e-8
    )
    rng = np.random.default_rng(5)
    for _ in range(3):
        t = theta + 0.3 * rng.standard_normal(theta.shape)
        value, grad = reg.log_marginal_likelihood(t, eval_gradient=True)
        sk_value, sk_grad = gpr.log_marginal_likelihood(t, eval_gradient=True)
        assert value == pytest.approx(sk_value + offset, rel=1e-9, abs=1e-8)
        np.testing.assert_allclose(grad, sk_grad, rtol=1e-6, atol=1e-6)


def test_ard_se_clone_with_theta_round_trips_as_scikit_learn_s(ard: tuple) -> None:
    reg, _, X, _ = ard
    k = reg.kernel_
    sk = k.to_sklearn()
    t = k.theta + 0.4 * np.random.default_rng(2).standard_normal(k.theta.shape)
    ours = k.clone_with_theta(t)
    assert isinstance(ours, FittedKernel)
    np.testing.assert_allclose(ours.theta, t, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.to_sklearn().theta, t, rtol=0, atol=1e-12)
    theirs = sk.clone_with_theta(t)
    noise = ours.get_params()["noise_level"]
    np.testing.assert_allclose(theirs(X), ours(X) + noise * np.eye(len(X)), rtol=0, atol=1e-10)
    np.testing.assert_allclose(k.clone_with_theta(k.theta).theta, k.theta, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"theta must have shape \(7,\)"):
        k.clone_with_theta(np.zeros(11))


@pytest.mark.parametrize(
    ("kernel", "shift"),
    [("SE + PER", {3: math.log(2.0)}), ("MAT52", {}), ("SE*PER", {2: math.log(2.0)})],
)
def test_one_column_theta_is_scikit_learn_s(kernel: str, shift: dict[int, float]) -> None:
    """One column has nothing redundant: every variance stays, scikit-learn's theta is ours
    but for ExpSineSquared's lengthscale, twice ours (the module docstring's table)."""
    X, y = _data(1)
    reg = AmortizedGPRegressor(kernel=kernel, device="cpu").fit(X, y)
    k = reg.kernel_
    assert k.theta.size == reg.result_.kernel.n_params + 1
    sk = k.to_sklearn()
    expect = k.theta.copy()
    for i, s in shift.items():
        expect[i] += s
    np.testing.assert_allclose(sk.theta, expect, rtol=0, atol=1e-12)
    gpr = GaussianProcessRegressor(kernel=sk, normalize_y=True, optimizer=None, alpha=0.0).fit(X, y)
    t = k.theta + 0.2 * np.random.default_rng(1).standard_normal(k.theta.shape)
    t_sk = t.copy()
    for i, s in shift.items():
        t_sk[i] += s
    assert reg.log_marginal_likelihood(t) == pytest.approx(
        gpr.log_marginal_likelihood(t_sk) - len(y) * np.log(y.std()), rel=1e-9, abs=1e-8
    )


STRUCTURES = [
    # (kernel, input columns, parameters before (noise included), after, names that must appear)
    ("SE@0 * PER@1", 2, 6, 5, ["d0.0.SE.variance", "d1.0.PER.period"]),
    ("(SE + PER)@0 * (SE + LIN)@1", 2, 10, 9, ["d0.1.PER.variance", "d1.1.LIN.weight"]),
    ("SE@0 * (SE + PER)@1 * LIN@2", 3, 10, 8, ["d1.1.PER.weight", "d2.0.LIN.offset"]),
]


@pytest.mark.parametrize(
    ("kernel", "d", "before", "after", "names"), STRUCTURES, ids=[s[0] for s in STRUCTURES]
)
def test_folded_hyperparameters_define_the_fitted_kernel(
    kernel: str, d: int, before: int, after: int, names: list[str]
) -> None:
    X, y = _data(d, seed=3)
    reg = AmortizedGPRegressor(kernel=kernel, device="cpu").fit(X, y)
    k, res = reg.kernel_, reg.result_
    assert res.kernel.n_params + 1 == before
    assert k.theta.size == after == before - (d - 1)
    assert set(names) <= set(k.hyperparameter_names)
    assert not any(
        n.startswith(f"d{c}.0.") and n.endswith(".variance")
        for c in range(1, d)
        for n in k.hyperparameter_names
    )
    # the folded values: column 0's variances times every other column's first variance,
    # later addends' variances relative to their column's first
    hyper = reg.hyperparameters_
    firsts = [hyper[f"d{c}.0.{res.kernel.dims[c][0]}.variance"] for c in range(1, d)]
    for name, value in k.get_params().items():
        parts = name.split(".")
        if name.startswith("d0.") and parts[3] == "variance":
            assert value == pytest.approx(hyper[name] * math.prod(firsts), rel=1e-12)
        elif parts[-1] == "weight":
            c = int(parts[0][1:])
            full = hyper[".".join([*parts[:3], "variance"])]
            assert value == pytest.approx(full / firsts[c - 1], rel=1e-12)
    # theta defines the fitted kernel: its full parameters (each later column's first
    # variance 1) through the dense reference equal the fitted kernel matrix
    params, noise = k.params_from_theta(torch.from_numpy(k.theta))
    Xn = res.normalizer.transform_x(X).numpy()
    np.testing.assert_allclose(
        res.kernel.reference(Xn, Xn, params.numpy()),
        res.kernel.reference(Xn, Xn, res.params.numpy()),
        rtol=1e-12,
        atol=1e-14,
    )
    np.testing.assert_allclose(k(X), res.kernel.reference(Xn, Xn, res.params.numpy()), rtol=1e-12)
    assert float(noise) == pytest.approx(res.noise, rel=1e-12)
    assert reg.log_marginal_likelihood(k.theta) == pytest.approx(
        reg.log_marginal_likelihood_value_, rel=1e-9, abs=1e-8
    )
    t = k.theta + 0.3 * np.random.default_rng(4).standard_normal(k.theta.shape)
    clone = k.clone_with_theta(t)
    np.testing.assert_allclose(clone.theta, t, rtol=0, atol=1e-12)
    p2, _ = k.params_from_theta(torch.from_numpy(t))
    np.testing.assert_allclose(clone(X), res.kernel.reference(Xn, Xn, p2.numpy()), rtol=1e-12)


def test_folding_rules_without_a_fit() -> None:
    s = DimWiseStructure.parse("(SE + LIN)@0 * (SE + PER)@1 * LIN@2")
    f = Folding(s)
    assert [str(n) for n in f.names] == [
        "d0.0.SE.variance",
        "d0.0.SE.lengthscale",
        "d0.1.LIN.variance",
        "d0.1.LIN.offset",
        "d1.0.SE.lengthscale",
        "d1.1.PER.weight",
        "d1.1.PER.lengthscale",
        "d1.1.PER.period",
        "d2.0.LIN.offset",
    ]
    # full: SE(v, l), LIN(v, c), | SE(v, l), PER(v, l, p), | LIN(v, c)
    full = [2.0, 0.5, 3.0, 0.25, 4.0, 0.7, 8.0, 0.3, 1.5, 5.0, 10.0]
    assert f.fold(full) == pytest.approx([40.0, 0.5, 60.0, 5.0, 0.7, 2.0, 0.3, 1.5, 2.0])
    # a value without an exact map (None) spoils only what is computed from it
    got = f.fold([*full[:4], None, *full[5:]])
    assert got[:4] == [None, 0.5, None, None]
    assert got[4] == pytest.approx(0.7)
    assert got[5] is None
    assert got[8] == pytest.approx(2.0)
    back = f.unfold_log(torch.log(torch.tensor(f.fold(full), dtype=torch.float64)))
    assert torch.allclose(
        back.exp(),
        torch.tensor(
            [40.0, 0.5, 60.0, 5.0, 1.0, 0.7, 2.0, 0.3, 1.5, 1.0, 2.0], dtype=torch.float64
        ),
    )
    with pytest.raises(ValueError, match="11 parameters"):
        f.fold(full[:3])
    one = Folding(DimWiseStructure.parse("SE + PER", n_dims=1))
    assert one.fold([1.0, 2.0, 3.0, 4.0, 5.0]) == [1.0, 2.0, 3.0, 4.0, 5.0]
