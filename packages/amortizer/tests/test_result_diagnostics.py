"""How a result got there: ``KernelResult.optimality`` / ``at_optimum`` against a dense
finite-difference oracle, ``untouched`` against the start rules' constants, and the
diagnostic columns of ``fit_groups``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.stages.fisher import CHECK_POINTS, GAIN_TOL, predicted_gain
from amorgp.amortizer.stages.results import KernelResult, evaluate_optimality

# floors of the refinement's log parameters z = log(theta - floor), in the flat order
# (variance, lengthscale | variance, lengthscale, period | noise) of "SE + PER"
FLOORS = np.array([1e-6, 1e-4, 1e-6, 1e-4, 1e-4, 1e-6])


def _smooth(n: int = 80, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of a smooth function plus small noise (informative data)."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n))
    return x[:, None], np.sin(x) + 0.05 * rng.standard_normal(n)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return _smooth()


@pytest.fixture(scope="module")
def plain(amz: Amortizer, data: tuple[np.ndarray, np.ndarray]) -> KernelResult:
    """``SE + PER`` without refinement (the periodogram start wins)."""
    return amz.infer(*data, "SE + PER", refine=0)


@pytest.fixture(scope="module")
def refined(amz: Amortizer, data: tuple[np.ndarray, np.ndarray]) -> KernelResult:
    return amz.infer(*data, "SE + PER", refine="auto")


def _covariance(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``K + sigma^2 I`` of ``SE + PER`` in one input (the grammar's formulas)."""
    v1, l1, v2, l2, p, noise = theta
    r = x[:, None] - x[None, :]
    se = v1 * np.exp(-(r**2) / (2.0 * l1**2))
    per = v2 * np.exp(-(np.sin(np.pi * np.abs(r) / p) ** 2) / (2.0 * l2**2))
    return se + per + noise * np.eye(len(x))


def _oracle(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> tuple[float, float]:
    """Predicted gain and gradient norm in ``z = log(theta - floor)`` by central finite
    differences of scipy's Gaussian log density (gradient) and of the covariance
    (Fisher information ``tr(A^-1 dA_a A^-1 dA_b) / 2``)."""
    z0 = np.log(theta - FLOORS)
    h = 1e-5

    def at(z: np.ndarray) -> np.ndarray:
        return _covariance(x, FLOORS + np.exp(z))

    def logpdf(z: np.ndarray) -> float:
        return float(multivariate_normal(np.zeros(len(y)), at(z)).logpdf(y))

    m = len(z0)
    grad = np.zeros(m)
    dA = []
    for a in range(m):
        e = np.zeros(m)
        e[a] = h
        grad[a] = (logpdf(z0 + e) - logpdf(z0 - e)) / (2 * h)
        dA.append((at(z0 + e) - at(z0 - e)) / (2 * h))
    Ainv = np.linalg.inv(at(z0))
    M = [Ainv @ d for d in dA]
    fisher = np.array([[0.5 * np.trace(M[a] @ M[b]) for b in range(m)] for a in range(m)])
    g = torch.tensor(grad)[None]
    gain = float(predicted_gain(torch.tensor(fisher)[None], g)[0])
    return gain, float(np.linalg.norm(grad))


def _theta(r: KernelResult) -> np.ndarray:
    h = r.hyperparameters
    names = [(0, 0, "variance"), (0, 0, "lengthscale"), (0, 1, "variance")]
    names += [(0, 1, "lengthscale"), (0, 1, "period")]
    return np.array([h[n] for n in names] + [r.noise])


def _normalised(r: KernelResult, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xn = r.normalizer.transform_x(torch.as_tensor(X, dtype=torch.float64))[:, 0].numpy()
    return xn, (y - r.normalizer.y_mean) / r.normalizer.y_std


# -- optimality -------------------------------------------------------------------------------
def test_unrefined_result_is_not_at_an_optimum_and_its_gain_is_the_oracles(
    plain: KernelResult, data: tuple[np.ndarray, np.ndarray]
) -> None:
    assert plain.refine_steps == 0
    assert math.isnan(plain.refine_gain)
    opt = plain.optimality()
    assert opt.source == "evaluated"
    assert plain.at_optimum is False
    gain, norm = _oracle(*_normalised(plain, *data), _theta(plain))
    assert gain > 10 * GAIN_TOL
    assert opt.gain == pytest.approx(gain, rel=1e-5)
    assert opt.grad_norm == pytest.approx(norm, rel=1e-5)
    assert plain.optimality() is opt  # computed once, kept


def test_refined_result_is_at_an_optimum(
    refined: KernelResult, data: tuple[np.ndarray, np.ndarray]
) -> None:
    assert refined.refine_status == "converged"
    assert refined.optimality().source == "refinement"
    assert refined.at_optimum is True
    # the gain evaluated on demand at the refined point is the refinement's
    again = dataclasses.replace(refined, refine_gain=math.nan, grad_norm=math.nan)
    opt = again.optimality()
    assert opt.source == "evaluated"
    assert opt.gain == pytest.approx(refined.refine_gain, rel=1e-6, abs=1e-9)
    assert opt.at_optimum is True
    gain, _ = _oracle(*_normalised(refined, *data), _theta(refined))
    assert gain < GAIN_TOL


def test_optimality_is_unknown_above_the_dense_limit(plain: KernelResult) -> None:
    big = dataclasses.replace(plain, n_points=CHECK_POINTS + 1)
    opt = big.optimality()
    assert math.isnan(opt.gain)
    assert math.isnan(opt.grad_norm)
    assert big.at_optimum is None
    assert f"> {CHECK_POINTS} points" in opt.source
    d = big.to_dict()
    assert d["at_optimum"] is None
    assert d["refine_gain"] is None
    assert d["grad_norm"] is None


def test_batched_evaluation_equals_one_at_a_time(amz: Amortizer) -> None:
    """evaluate_optimality batches results of one structure and size: each gets what it
    gets alone."""
    sets = [_smooth(40, seed) for seed in range(3)]
    many = [fits.results for fits in amz.infer_datasets(sets, ["SE + PER", "SE"])]
    flat = [r for rs in many for r in rs]
    evaluate_optimality(flat)
    for r in flat:
        alone = dataclasses.replace(r).optimality()
        assert r.optimality().gain == pytest.approx(alone.gain, rel=1e-9, abs=1e-12)
        assert r.optimality().grad_norm == pytest.approx(alone.grad_norm, rel=1e-9, abs=1e-12)


# -- untouched constants --------------------------------------------------------------------
def test_a_periodogram_starts_constants_are_untouched(plain: KernelResult) -> None:
    """The periodogram start sets the periodic lengthscale to 1.0 and raises the trend
    lengthscale to half the input range: without refinement both stay."""
    assert plain.start == "periodogram"
    h = plain.hyperparameters
    assert h[(0, 1, "lengthscale")] == pytest.approx(1.0, rel=1e-7)
    assert h[(0, 0, "lengthscale")] == pytest.approx(0.5, rel=1e-7)
    assert set(plain.untouched()) == {(0, 0, "lengthscale"), (0, 1, "lengthscale")}
    d = plain.to_dict()
    assert d["untouched"] == ["d0.0.lengthscale", "d0.1.lengthscale"]
    assert d["at_optimum"] is False
    assert d["refine_gain"] == pytest.approx(plain.optimality().gain)
    assert d["start"] == "periodogram"
    assert d["refine_steps"] == 0


def test_a_refined_result_has_no_untouched_hyperparameter(refined: KernelResult) -> None:
    assert refined.refine_steps > 0
    assert refined.untouched() == ()
    assert refined.to_dict()["untouched"] == []


def _with(r: KernelResult, values: dict[tuple[int, int, str], float], **kw: Any) -> KernelResult:
    """``r`` with some hyperparameters set (normalised units)."""
    params = r.params.clone()
    for pn in r.kernel.param_names():
        key = (pn.dim, pn.addend, pn.param)
        if key in values:
            params[pn.dim, pn.addend, pn.slot] = values[key]
    return dataclasses.replace(r, params=params, **kw)


# the null rules' constants, as null_starts.py documents them: every variance and period
# 2/3, every lengthscale 0.4 (rounded to float32 as the network's output)
PRIOR_MEAN = {
    (0, 0, "variance"): 2 / 3,
    (0, 0, "lengthscale"): 0.4,
    (0, 1, "variance"): 2 / 3,
    (0, 1, "lengthscale"): 0.4,
    (0, 1, "period"): 2 / 3,
}


def _f32(values: dict[tuple[int, int, str], float]) -> dict[tuple[int, int, str], float]:
    return {k: float(np.float32(v)) for k, v in values.items()}


def test_prior_mean_start_every_uncalibrated_hyperparameter_is_untouched(
    plain: KernelResult,
) -> None:
    scale = 1.7  # the calibration multiplies every variance by the scale
    values = _f32(PRIOR_MEAN)
    values[(0, 0, "variance")] *= scale
    values[(0, 1, "variance")] *= scale
    r = _with(plain, values, start="prior-mean")
    assert set(r.untouched()) == {(0, 0, "lengthscale"), (0, 1, "lengthscale"), (0, 1, "period")}
    # a value the data moved, even a little, is not the constant
    moved = _with(r, {(0, 1, "period"): (2 / 3) * 1.001})
    assert (0, 1, "period") not in moved.untouched()
    # a variance the calibration left at its prior mean (scale 1 kept) is untouched too
    kept = _with(plain, _f32(PRIOR_MEAN), start="prior-mean")
    assert set(kept.untouched()) == set(PRIOR_MEAN)
    # a hyperparameter the user fixed is "fixed", not untouched
    fixed = dataclasses.replace(r, fixed={(0, 1, "period"): float(np.float32(2 / 3))})
    assert set(fixed.untouched()) == {(0, 0, "lengthscale"), (0, 1, "lengthscale")}
    # refined, or found at an optimum by the refinement: none
    assert dataclasses.replace(r, refine_steps=3, refine_status="max_iters").untouched() == ()
    assert dataclasses.replace(r, refine_status="converged").untouched() == ()
    # the same values won by the network's start: fitted by the network
    assert dataclasses.replace(r, start="network").untouched() == ()
    assert dataclasses.replace(r, start="harmonic x2").untouched() == ()


def test_heuristic_start_data_derived_values_are_not_untouched(plain: KernelResult) -> None:
    """The median heuristic sets the SE lengthscale (input units) from the data: even at
    0.4 (a regular grid's median distance can be) it is not the prior mean's constant;
    PER's lengthscale (unit-free) stays at its prior mean, and so does a period where the
    periodogram found no peak."""
    values = _f32(PRIOR_MEAN)
    values[(0, 0, "variance")] *= 2.5
    values[(0, 1, "variance")] *= 2.5
    r = _with(plain, values, start="heuristic")
    assert set(r.untouched()) == {(0, 1, "lengthscale"), (0, 1, "period")}
    peak = _with(r, {(0, 1, "period"): 0.2137}, start="heuristic")  # a periodogram peak
    assert set(peak.untouched()) == {(0, 1, "lengthscale")}
    assert set(_with(r, {}, start="prior-mean").untouched()) == {
        (0, 0, "lengthscale"),
        (0, 1, "lengthscale"),
        (0, 1, "period"),
    }


def test_rescaled_periodogram_starts_and_the_decay_lengthscale(
    amz: Amortizer, data: tuple[np.ndarray, np.ndarray]
) -> None:
    """``"periodogram, lengthscale x2"`` sets the periodic lengthscale to 2; an ``SE*PER``
    decay lengthscale raised to two periods (at least 0.5) is the start's too."""
    r = amz.infer(*data, "SE*PER")
    period = r.hyperparameters[(0, 0, "per_period")]
    values = {(0, 0, "per_lengthscale"): 2.0, (0, 0, "se_lengthscale"): max(2 * period, 0.5)}
    x2 = _with(r, values, start="periodogram, lengthscale x2", refine_steps=0)
    x2 = dataclasses.replace(x2, refine_status="none")
    assert set(x2.untouched()) == {(0, 0, "per_lengthscale"), (0, 0, "se_lengthscale")}
    x05 = dataclasses.replace(x2, start="periodogram, lengthscale x0.5")
    assert set(x05.untouched()) == {(0, 0, "se_lengthscale")}  # 2.0 is not its 0.5


# -- grouped tables -------------------------------------------------------------------------
def test_fit_groups_diagnostic_columns(amz: Amortizer) -> None:
    pd = pytest.importorskip("pandas")
    from amorgp.amortizer.frontends.tables import DIAGNOSTIC_COLUMNS, FIXED_COLUMNS, fit_groups

    parts = []
    sets = {"a": _smooth(60, 1), "c": _smooth(), "bad": _smooth(2, 3)}
    for g, (X, y) in sets.items():
        parts.append(pd.DataFrame({"id": g, "t": X[:, 0], "y": y}))
    df = pd.concat(parts, ignore_index=True)
    out = fit_groups(df, "id", ["SE + PER", "SE"], amortizer=amz, exact_network=True, refine=0)
    assert DIAGNOSTIC_COLUMNS == (
        "refine_steps",
        "refine_status",
        "at_optimum",
        "refine_gain",
        "untouched",
    )
    n = 1 + len(FIXED_COLUMNS) + len(DIAGNOSTIC_COLUMNS)
    assert list(out.columns[:n]) == ["id", *FIXED_COLUMNS, *DIAGNOSTIC_COLUMNS]
    assert str(out["at_optimum"].dtype) == "boolean"
    assert out["refine_steps"].dtype == np.int64
    for g in ("a", "c"):
        want = amz.infer_many(*sets[g], ["SE + PER", "SE"], refine=0)
        rows = out[out["id"] == g]
        for (_, row), r in zip(rows.iterrows(), want, strict=True):
            assert row["start"] == r.start
            assert row["refine_steps"] == 0
            assert row["refine_status"] == "none"
            assert row["refine_gain"] == pytest.approx(r.optimality().gain, rel=1e-6)
            assert bool(row["at_optimum"]) is (r.optimality().gain < GAIN_TOL)
            names = [f"{'SE' if a == 0 else 'PER'}@{d}[{a}].{p}" for d, a, p in r.untouched()]
            assert row["untouched"] == ";".join(names)
    periodogram = out[(out["kernel"] == "SE + PER") & (out["start"] == "periodogram")]
    assert len(periodogram)  # the constants of the periodogram start, named as columns
    for text in periodogram["untouched"]:
        assert "PER@0[1].lengthscale" in text.split(";")
    bad = out[out["id"] == "bad"]
    assert bad["at_optimum"].isna().all()
    assert bad["untouched"].isna().all()
    assert (bad["refine_steps"] == 0).all()
    for refine in ("auto", None):  # None: the default refinement
        refined = fit_groups(df, "id", ["SE + PER"], amortizer=amz, refine=refine)
        ok = refined[refined["error"].isna()]
        assert ok["at_optimum"].all()
        assert (ok["refine_gain"] < GAIN_TOL).all()
        assert (ok["untouched"] == "").all()
        assert (ok["refine_status"] == "converged").all()
