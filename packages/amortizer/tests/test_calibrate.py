"""Calibration: exact Type-2 ML of the global scale and the noise after the network."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import multivariate_normal

from amorgp.amortizer import AmortizedGPRegressor
from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.stages import calibrate as calibrate_module
from amorgp.amortizer.stages.spectra import profile_log_likelihood
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import FLOORS, ParamKind


@pytest.fixture(scope="module")
def amz(tiny_checkpoint: Path) -> Amortizer:
    # one start: these tests check the calibration of the network's prediction alone
    return Amortizer.from_pretrained(tiny_checkpoint, device="cpu", starts=1)


def _data(n: int = 40, seed: int = 3, noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 5, size=(n, 2))
    y = np.sin(2 * X[:, 0]) * 3 + 0.5 * X[:, 1] + 10 + noise * rng.normal(size=n)
    return X, y


def _normalised(r: object, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norm = r.normalizer  # type: ignore[attr-defined]
    return norm.transform_x(X).numpy(), norm.transform_y(y).numpy()


def _oracle_lml(K: np.ndarray, noise: float, yn: np.ndarray) -> float:
    return float(multivariate_normal(np.zeros(len(yn)), K + noise * np.eye(len(yn))).logpdf(yn))


@pytest.mark.parametrize("kernel", ["SE", "SE + PER", "LIN*PER + SE", "PER + LIN", "SE*PER + LIN"])
def test_scale_and_noise_are_the_dense_optimum(amz: Amortizer, kernel: str) -> None:
    """The calibrated (scale, noise) maximise the dense float64 likelihood over both (scipy,
    several starts), with every other hyperparameter the network's."""
    X, y = _data()
    r0 = amz.infer(X, y, kernel, calibrate=False, refine=0)
    r = amz.infer(X, y, kernel, calibrate=True, refine=0)
    assert r.calibrated
    assert not r0.calibrated
    Xn, yn = _normalised(r0, X, y)
    K0 = r0.kernel.reference(Xn, Xn, r0.params.numpy())

    def nll(t: np.ndarray) -> float:
        return -_oracle_lml(math.exp(t[0]) * K0, math.exp(t[1]), yn)

    starts = ([0.0, math.log(r0.noise)], [0.0, -1.0], [1.0, -6.0], [-1.0, 0.0])
    best = min((minimize(nll, s, method="L-BFGS-B") for s in starts), key=lambda o: o.fun)
    K = r.kernel.reference(Xn, Xn, r.params.numpy())
    got = _oracle_lml(K, r.noise, yn)
    assert got >= -best.fun - 1e-6
    assert got == pytest.approx(-best.fun, abs=1e-4)
    assert r.log_marginal_likelihood == pytest.approx(got, rel=1e-9)
    assert r.log_marginal_likelihood >= r0.log_marginal_likelihood - 1e-9
    # the calibrated kernel is the network's times one global factor
    scale = K[np.abs(K0) > 1e-12] / K0[np.abs(K0) > 1e-12]
    assert np.allclose(scale, scale[0], rtol=1e-9)
    assert scale[0] == pytest.approx(math.exp(best.x[0]), rel=1e-2)


def test_only_the_variances_move(amz: Amortizer) -> None:
    """Lengthscales, periods and offsets stay the network's; every variance of a kernel is
    multiplied by the same factor ``s^(1/D)``."""
    X, y = _data()
    r0 = amz.infer(X, y, "SE*LIN + PER", calibrate=False, refine=0)
    r = amz.infer(X, y, "SE*LIN + PER", calibrate=True, refine=0)
    t0 = {(h.dim, h.addend, h.name): h.value for h in r0.table}
    t1 = {(h.dim, h.addend, h.name): h.value for h in r.table}
    ratios = [t1[k] / t0[k] for k in t0 if k[2] == "variance"]
    assert len(ratios) == 4
    assert np.allclose(ratios, ratios[0], rtol=1e-12)
    for k in t0:
        if k[2] != "variance":
            assert t1[k] == t0[k]


def test_lin_alone_scales_its_constant_with_its_variance(amz: Amortizer) -> None:
    """``LIN`` alone is ``s^2 x x' + c^2``: its constant moves by the variances' factor
    (the kernel is then ``s`` times the network's, exactly); every other offset, in a
    product, stays."""
    X, y = _data()
    r0 = amz.infer(X, y, "SE + LIN + LIN*PER", calibrate=False, refine=0)
    r = amz.infer(X, y, "SE + LIN + LIN*PER", calibrate=True, refine=0)
    t0 = {(h.dim, h.addend, h.name): h.value for h in r0.table}
    t1 = {(h.dim, h.addend, h.name): h.value for h in r.table}
    ratios = {k: t1[k] / t0[k] for k in t0}
    factor = ratios[(0, 0, "variance")]
    assert factor != pytest.approx(1.0, abs=1e-6)
    lin = [
        k for k in t0 if k[2] == "offset" and not any(k2[1] == k[1] and "per" in k2[2] for k2 in t0)
    ]
    assert lin, sorted(t0)
    for k, q in ratios.items():
        moves = k[2] == "variance" or k in lin
        assert q == pytest.approx(factor if moves else 1.0, rel=1e-12), k


def test_never_lowers_the_likelihood(amz: Amortizer) -> None:
    for seed in range(4):
        X, y = _data(n=25 + 10 * seed, seed=seed, noise=0.3 * seed)
        kernels = ["SE", "PER", "SE + LIN", "SE*PER"]
        before = amz.infer_many(X, y, kernels, calibrate=False, refine=0)
        after = amz.infer_many(X, y, kernels, calibrate=True, refine=0)
        for a, b in zip(after, before, strict=True):
            assert a.log_marginal_likelihood >= b.log_marginal_likelihood - 1e-9


def test_noiseless_data_keeps_the_noise_above_its_floor(amz: Amortizer) -> None:
    """Exact targets push the noise to its floor, never below it, and a refinement can
    start from there."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 4, size=(50, 1)), axis=0)
    y = np.sin(3 * X[:, 0])
    r = amz.infer(X, y, "SE", calibrate=True, refine=0)
    assert r.noise >= 2 * FLOORS[ParamKind.NOISE]
    assert r.noise < 1e-3
    mean, var = r.predict(X[:5])
    assert np.isfinite(mean).all()
    assert (var > 0).all()
    refined = amz.infer(X, y, "SE", calibrate=True, refine=3)
    assert refined.log_marginal_likelihood >= r.log_marginal_likelihood - 1e-6


def test_profile_is_the_likelihood_maximised_over_the_scale() -> None:
    """At each ratio the closed-form scale beats any other scale (dense check)."""
    g = torch.Generator().manual_seed(1)
    A = torch.randn(12, 12, generator=g, dtype=torch.float64)
    K = A @ A.T / 12
    y = torch.randn(12, generator=g, dtype=torch.float64)
    lam, Q = torch.linalg.eigh(K)
    z2 = (Q.T @ y) ** 2
    log_r = torch.tensor([[-3.0, 0.0, 2.0]], dtype=torch.float64)
    lml, s = profile_log_likelihood(lam[None], z2[None], log_r)
    for j, lr in enumerate(log_r[0].tolist()):
        for factor in (1.0, 0.7, 1.4):
            sj = float(s[0, j]) * factor
            dense = _oracle_lml(sj * K.numpy(), sj * math.exp(lr), y.numpy())
            if factor == 1.0:
                assert float(lml[0, j]) == pytest.approx(dense, rel=1e-10)
            else:
                assert dense < float(lml[0, j])


def test_large_n_uses_a_seeded_subset(amz: Amortizer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate_module, "MAX_POINTS", 30)
    X, y = _data(n=90)
    a = amz.infer(X, y, "SE + PER", calibrate=True, refine=0)
    b = amz.infer(X, y, "SE + PER", calibrate=True, refine=0)
    assert a.noise == b.noise
    assert np.isfinite(a.noise)
    assert a.noise > 0


def test_calibrate_must_be_a_bool(amz: Amortizer) -> None:
    X, y = _data()
    for bad in ("yes", 1):
        with pytest.raises(OptionError, match="calibrate must be True or False"):
            amz.infer(X, y, "SE", calibrate=bad, refine=0)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="calibrate must be True or False"):
        Amortizer(amz.model, amz.meta, calibrate="no")  # type: ignore[arg-type]


def test_amortizer_wide_default(tiny_checkpoint: Path) -> None:
    """``Amortizer(calibrate=True)`` (the default) calibrates every call that does not say
    otherwise, ``fit_many`` (model averaging, structure search) included; ``False`` keeps
    the network's prediction alone."""
    X, y = _data()
    on = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    off = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", calibrate=False)
    assert on.calibrate
    assert not off.calibrate
    assert "calibrate=False" in repr(off)
    assert "calibrate" not in repr(on)
    (a,) = on.method(refine=0).fit_many(X, y, ["SE + PER"])
    b = off.infer(X, y, "SE + PER", calibrate=True, refine=0)
    assert a.calibrated
    assert a.noise == b.noise
    assert not on.infer(X, y, "SE + PER", calibrate=False, refine=0).calibrated
    assert not off.infer(X, y, "SE + PER", refine=0).calibrated


def test_estimator_passes_calibrate(tiny_checkpoint: Path) -> None:
    X, y = _data()
    est = AmortizedGPRegressor("SE + PER", refine=0, checkpoint=str(tiny_checkpoint))
    est.fit(X, y)
    assert est.result_.calibrated  # the default
    plain = AmortizedGPRegressor(
        "SE + PER", calibrate=False, refine=0, checkpoint=str(tiny_checkpoint)
    )
    plain.fit(X, y)
    assert not plain.result_.calibrated
    assert est.log_marginal_likelihood_ >= plain.log_marginal_likelihood_ - 1e-9
    assert est.get_params()["calibrate"] is True
    assert plain.get_params()["calibrate"] is False


def test_bundled_network_on_real_data() -> None:
    """The shipped network on a near-noiseless bundled dataset (yacht): calibration raises
    the likelihood of every kernel and lowers the noise the network overestimates."""
    path = Path(__file__).resolve().parents[3] / "data" / "yacht.csv"
    d = np.loadtxt(path, delimiter=",", skiprows=1)
    X, y = d[:120, :-1], d[:120, -1]
    amz = Amortizer.from_pretrained(device="cpu")
    kernels = ["SE", "SE + LIN", "SE*PER"]
    before = amz.infer_many(X, y, kernels, calibrate=False, refine=0)
    after = amz.infer_many(X, y, kernels, calibrate=True, refine=0)
    for a, b in zip(after, before, strict=True):
        assert a.log_marginal_likelihood >= b.log_marginal_likelihood
    assert sum(a.noise < b.noise for a, b in zip(after, before, strict=True)) >= 2


def test_noise_only_mode_is_the_dense_optimum_over_the_noise(amz: Amortizer) -> None:
    """``scale=False`` keeps the kernel and finds the best noise (scipy, bounded)."""
    from scipy.optimize import minimize_scalar

    from amorgp.amortizer.stages.calibrate import calibrate

    X, y = _data(n=35)
    r0 = amz.infer(X, y, "SE + PER", calibrate=False, refine=0)
    Xn, yn = (torch.as_tensor(t) for t in _normalised(r0, X, y))
    cal = calibrate(
        Xn, yn, [r0.kernel], amz.vocabulary, r0.params[None], torch.tensor([r0.noise]), scale=False
    )
    assert float(cal.scale[0]) == 1.0
    torch.testing.assert_close(cal.params[0], r0.params)
    K0 = r0.kernel.reference(Xn.numpy(), Xn.numpy(), r0.params.numpy())
    best = minimize_scalar(
        lambda t: -_oracle_lml(K0, math.exp(t), yn.numpy()), bounds=(-18, 4), method="bounded"
    )
    got = _oracle_lml(K0, float(cal.noise[0]), yn.numpy())
    assert got >= _oracle_lml(K0, r0.noise, yn.numpy())
    assert got == pytest.approx(-best.fun, abs=1e-3)  # a grid of 0.05 decades, refined


def test_method_fixes_refine_and_calibrate(tiny_checkpoint: Path) -> None:
    """``Amortizer.method`` is ``infer_many`` with fixed options, as an inference method."""
    X, y = _data()
    amz = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", calibrate=False)
    kernels = ["SE", "SE + PER"]
    for refine, calibrate in ((0, True), (3, None), (2, False)):
        got = amz.method(refine=refine, calibrate=calibrate).fit_many(X, y, kernels)
        want = amz.infer_many(X, y, kernels, refine=refine, calibrate=calibrate)
        for g, w in zip(got, want, strict=True):
            assert g.calibrated is (calibrate is True)
            torch.testing.assert_close(g.params, w.params)
            assert g.noise == w.noise
    with pytest.raises(OptionError, match="calibrate must be True or False"):
        amz.method(calibrate="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["tridiagonal", "eigh"])
def test_a_non_finite_matrix_keeps_its_prediction(method: str) -> None:
    """A kernel matrix with a NaN or an infinity keeps the given scale and noise (and a
    likelihood of -inf) by either method, while the finite ones beside it are calibrated
    to the same values as alone."""
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V
    from amorgp.kernel_grammar import DimWiseStructure

    st = [DimWiseStructure.parse(k, 1, V) for k in ("SE", "SE", "SE")]
    g = torch.Generator().manual_seed(0)
    X = torch.rand(25, 1, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(25, generator=g, dtype=torch.float64)
    params = torch.full((3, 1, 1, V.max_params), 0.3, dtype=torch.float64)
    noise = torch.full((3,), 0.05, dtype=torch.float64)
    d2 = (X - X.T) ** 2
    Km = torch.exp(-d2 / (2 * 0.3**2)).expand(3, 25, 25).clone() * 0.3
    Km[1, 3, 4] = math.nan
    Km[2, 0, 0] = math.inf
    cal = calibrate_module.calibrate(X, y, st, V, params, noise, matrices=Km, method=method)
    alone = calibrate_module.calibrate(
        X, y, st[:1], V, params[:1], noise[:1], matrices=Km[:1], method=method
    )
    for k in (1, 2):
        assert cal.noise[k] == noise[k]
        assert cal.scale[k] == 1.0
        assert cal.log_marginal_likelihood[k] == -math.inf
        torch.testing.assert_close(cal.params[k], params[k], rtol=0, atol=0)
    assert cal.scale[0] != 1.0
    torch.testing.assert_close(cal.params[0], alone.params[0], rtol=1e-12, atol=0)
    assert cal.noise[0] == pytest.approx(float(alone.noise[0]), rel=1e-12)


def test_given_matrices_are_read_unless_they_may_be_overwritten() -> None:
    """``matrices`` are left as they were (the default), or used as workspace with
    ``overwrite_matrices=True``; the calibration is the same either way."""
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V
    from amorgp.kernel_grammar import DimWiseStructure

    st = [DimWiseStructure.parse(k, 1, V) for k in ("SE", "SE + PER")]
    g = torch.Generator().manual_seed(1)
    X = torch.rand(30, 1, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(30, generator=g, dtype=torch.float64)
    params = 0.3 + torch.rand(2, 1, 2, V.max_params, generator=g, dtype=torch.float64)
    noise = torch.full((2,), 0.05, dtype=torch.float64)
    from amorgp.amortizer.stages.batched import kernel_matrices

    Km = kernel_matrices(X, st, V, params)
    before = Km.clone()
    read = calibrate_module.calibrate(X, y, st, V, params, noise, matrices=Km)
    torch.testing.assert_close(Km, before, rtol=0, atol=0)
    work = calibrate_module.calibrate(
        X, y, st, V, params, noise, matrices=Km, overwrite_matrices=True
    )
    assert not torch.equal(Km, before)  # its memory held the tridiagonal reduction
    torch.testing.assert_close(work.params, read.params, rtol=1e-12, atol=0)
    torch.testing.assert_close(work.noise, read.noise, rtol=1e-12, atol=0)
