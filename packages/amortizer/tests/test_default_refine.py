"""The default refinement (``refine=None``): every kernel not at its optimum refined by
Fisher scoring until the predicted gain is below ``GAIN_TOL``, where Fisher scoring
applies; above its size by L-BFGS up to ``DEFAULT_POINTS``; above that on a seeded subset
(``"subset"``); elsewhere nothing, and the result says ``"skipped"``.  Oracles: scipy's L-BFGS-B
on the dense float64 likelihood (numpy kernels from the registry's references), and the
explicit options the default stands for."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import multivariate_normal
from torch import Tensor

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.networks.forward import encoder_subset
from amorgp.amortizer.stages.fisher import GAIN_TOL, MAX_POINTS, fisher_bytes
from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
from amorgp.amortizer.stages.refine import (
    SKIPPED,
    SUBSET,
    SUBSET_POINTS,
    default_refines,
    default_subset,
    halving_round,
    resolve_refine,
)
from amorgp.amortizer.testing import oracle_covariance


def _data(n: int = 40, d: int = 2, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 3.0, size=(n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, -1] + 0.1 * rng.standard_normal(n)
    return X, y


def _dense_lml(r: object, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None):
    """The dense float64 log marginal likelihood of the result's kernel on its normalised
    data (:func:`amorgp.amortizer.testing.oracle_covariance`, the registry's numpy
    references, then scipy) as a function of the refinement's variables ``z = log(theta -
    floor)``, and ``z`` at the result; on the points ``rows`` alone if given (normalised
    as all points are)."""
    norm = r.normalizer  # type: ignore[attr-defined]
    Xn, yn = norm.transform_x(X).to(torch.float64), norm.transform_y(y).to(torch.float64)
    if rows is not None:
        Xn, yn = Xn[rows], yn[rows]
    obj = BatchLogMarginalLikelihood(Xn[None], yn[None], r.kernel)  # type: ignore[attr-defined]
    floors = obj.floors.numpy()
    z0 = obj.to_log_rows(r.params[None], torch.tensor([r.noise]))[0].numpy()  # type: ignore[attr-defined]

    def lml(z: np.ndarray) -> float:
        K = oracle_covariance(Xn.numpy(), r.kernel, floors + np.exp(z))  # type: ignore[attr-defined]
        try:
            return float(multivariate_normal(np.zeros(len(yn)), K).logpdf(yn.numpy()))
        except np.linalg.LinAlgError:  # a trial point whose covariance is singular
            return -1e10

    return lml, z0


def _dense_optimum(
    r: object, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None
) -> float:
    """The Type-2 ML optimum near the result: scipy's L-BFGS-B on the dense likelihood
    (:func:`_dense_lml`, so within the same floors; of the points ``rows`` if given),
    from the result, to tight tolerances."""
    lml, z0 = _dense_lml(r, X, y, rows)
    res = minimize(
        lambda z: -lml(z), z0, method="L-BFGS-B", options={"maxiter": 3000, "gtol": 1e-9}
    )
    return -float(res.fun)


def _dense_grad_norm(r: object, X: np.ndarray, y: np.ndarray) -> float:
    """The norm of the dense likelihood's gradient (:func:`_dense_lml`) in ``z`` at the
    result, by central differences."""
    lml, z0 = _dense_lml(r, X, y)
    h = 1e-5
    g = [(lml(z0 + h * e) - lml(z0 - h * e)) / (2 * h) for e in np.eye(len(z0))]
    return float(np.linalg.norm(g))


@pytest.mark.parametrize("kernel", ["SE", "SE + LIN"])
def test_the_default_ends_at_the_dense_optimum(amz: Amortizer, kernel: str) -> None:
    """Not refining (``refine=0``) leaves likelihood to gain; the default ends near the
    optimum that scipy reaches from its answer, says it converged, and equals an explicit
    refinement of the same budget."""
    X, y = _data()
    fast = amz.infer(X, y, kernel, refine=0)
    r = amz.infer(X, y, kernel)
    assert r.refine_status == "converged"
    assert r.at_optimum
    assert r.refine_gain < GAIN_TOL
    assert r.untouched() == ()
    best = _dense_optimum(r, X, y)
    # a predicted gain below 0.01 nats; on a curved ridge (SE + LIN) tenths of a nat may
    # remain: within the 1-nat resolution of model comparisons
    assert best - r.log_marginal_likelihood < 1.0, (best, r.log_marginal_likelihood)
    assert best - fast.log_marginal_likelihood > 3 * GAIN_TOL  # there was work to do
    assert r.log_marginal_likelihood > fast.log_marginal_likelihood
    explicit = amz.infer(X, y, kernel, refine="auto")
    torch.testing.assert_close(r.params, explicit.params, rtol=0.0, atol=0.0)
    assert r.refine_steps == explicit.refine_steps


def test_one_kept_start_refines_the_winner_to_the_dense_optimum(
    amz: Amortizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one start kept for the refinement (``REFINE_STARTS = 1``: no successive
    halving), a periodic kernel's default fit refines the multi-start's winner alone and
    ends at the optimum scipy reaches from it (it raised an IndexError before)."""
    import amorgp.amortizer.stages.pipeline as pipeline

    monkeypatch.setattr(pipeline, "REFINE_STARTS", 1)
    X, y = _data(n=40, d=1)
    r = amz.infer(X, y, "SE + PER")
    assert r.refine_status == "converged"
    assert _dense_optimum(r, X, y) - r.log_marginal_likelihood < 1.0


def test_above_fisher_scorings_size_the_default_refines_by_lbfgs(
    amz: Amortizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above Fisher scoring's size (lowered to 30 points here) the default runs L-BFGS as
    ``refine="auto"`` does, to the optimum scipy reaches from its answer; above
    ``DEFAULT_POINTS`` (lowered to 35) it refines nothing and every result says so."""
    import amorgp.amortizer.stages.fisher as fisher
    import amorgp.amortizer.stages.refine as refine

    monkeypatch.setattr(fisher, "MAX_POINTS", 30)
    X, y = _data(n=40, d=2)
    fast = amz.infer(X, y, "SE", refine=0)
    r = amz.infer(X, y, "SE")
    assert r.refine_status == "converged"
    assert r.refine_steps > 0
    best = _dense_optimum(r, X, y)
    assert best - r.log_marginal_likelihood < 0.05, (best, r.log_marginal_likelihood)
    assert best - fast.log_marginal_likelihood > 3 * GAIN_TOL  # there was work to do
    explicit = amz.infer(X, y, "SE", refine="auto")
    torch.testing.assert_close(r.params, explicit.params, rtol=0.0, atol=0.0)
    assert r.refine_steps == explicit.refine_steps
    # the gradient norm where L-BFGS stopped, reported where the predicted gain is not
    # evaluated (more points than CHECK_POINTS, lowered here too)
    assert r.grad_norm == pytest.approx(_dense_grad_norm(r, X, y), rel=1e-3, abs=1e-5)
    short = amz.infer(X, y, "SE", refine=2)  # stopped short of the optimum: it shows
    assert short.refine_status == "max_iters"
    assert short.grad_norm == pytest.approx(_dense_grad_norm(short, X, y), rel=1e-5)
    assert short.grad_norm > 1e3 * r.grad_norm
    monkeypatch.setattr(fisher, "CHECK_POINTS", 30)
    opt = amz.infer(X, y, "SE").optimality()
    assert opt.at_optimum is None
    assert opt.grad_norm == pytest.approx(r.grad_norm, rel=1e-9)
    assert "not evaluated" in opt.source
    monkeypatch.setattr(refine, "DEFAULT_POINTS", 35)
    left = amz.infer(X, y, "SE")
    assert left.refine_status == SKIPPED
    assert left.refine_steps == 0
    (fit,) = amz.infer_datasets([(X, y)], ["SE"])
    assert fit.results[0].refine_status == SKIPPED


def test_above_default_points_the_default_refines_on_a_subset(
    amz: Amortizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``DEFAULT_POINTS`` (lowered to 35) the default refines on the seeded subset of
    ``SUBSET_POINTS`` points (lowered to 30): it ends at the subset's dense optimum
    (scipy, on those points), reports the likelihood of all points (the dense oracle on
    all 40) and says ``"subset"``, with no optimality claimed for all points; batched
    over datasets it gives the same answer; an explicit ``refine="auto"`` still refines
    on all points."""
    import amorgp.amortizer.stages.fisher as fisher
    import amorgp.amortizer.stages.refine as refine

    monkeypatch.setattr(fisher, "MAX_POINTS", 30)
    monkeypatch.setattr(fisher, "CHECK_POINTS", 30)
    monkeypatch.setattr(refine, "DEFAULT_POINTS", 35)
    monkeypatch.setattr(refine, "SUBSET_POINTS", 30)
    X, y = _data(n=40, d=2)
    r = amz.infer(X, y, "SE")
    assert r.refine_status == SUBSET
    assert r.refine_steps > 0
    sub = encoder_subset(40, 30, amz.seed)
    assert sub is not None
    rows = sub.numpy()
    on_subset, z = _dense_lml(r, X, y, rows)
    best = _dense_optimum(r, X, y, rows)
    assert best - on_subset(z) < 0.05, (best, on_subset(z))
    on_all, _ = _dense_lml(r, X, y)
    assert r.log_marginal_likelihood == pytest.approx(on_all(z), abs=1e-6)
    assert _dense_optimum(r, X, y) - on_all(z) > 3 * GAIN_TOL  # not all points' optimum
    opt = r.optimality()
    assert opt.at_optimum is None
    assert math.isnan(opt.gain)
    assert "subset" in opt.source
    assert math.isnan(r.refine_gain)
    (fit,) = amz.infer_datasets([(X, y)], ["SE"])
    assert fit.results[0].refine_status == SUBSET
    torch.testing.assert_close(fit.results[0].params, r.params, rtol=1e-6, atol=1e-9)
    explicit = amz.infer(X, y, "SE", refine="auto")  # asked for: all points, by L-BFGS
    assert explicit.refine_status == "converged"
    assert _dense_optimum(explicit, X, y) - explicit.log_marginal_likelihood < 0.05


def test_float32_algebra_is_not_refined_and_says_so(tiny_checkpoint: Path) -> None:
    amz32 = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", dtype=torch.float32)
    X, y = _data(30, 1)
    r = amz32.infer(X, y, "SE")
    assert r.refine_status == SKIPPED
    assert r.refine_steps == 0
    asked = amz32.infer(X, y, "SE", refine="auto")  # an explicit refinement runs L-BFGS
    assert asked.refine_status in ("converged", "max_iters")
    assert asked.refine_steps > 0


def test_beyond_the_memory_budget_it_is_skipped(tiny_checkpoint: Path) -> None:
    """A budget below one row's Fisher evaluation but within the dense limit: the default
    refines by L-BFGS; below the dense limit too: no refinement, and every result of the
    call, in one dataset or many, says so."""
    X, y = _data(60, 1)
    budget = fisher_bytes(60, 1) / 2
    small = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", memory_budget=budget)
    assert small.fits_dense(60, 1)
    (r,) = small.infer_many(X, y, ["SE"])
    assert r.refine_status in ("converged", "max_iters")
    assert r.refine_steps > 0
    budget = 8.0 * 60 * 60 * 4  # four 60 x 60 matrices: below the dense limit
    tiny = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", memory_budget=budget)
    assert not tiny.fits_dense(60, 1)
    (r,) = tiny.infer_many(X, y, ["SE"])
    assert r.refine_status == SKIPPED
    (fit,) = tiny.infer_datasets([(X, y)], ["SE"])
    assert fit.results[0].refine_status == SKIPPED


def test_default_refines() -> None:
    assert default_refines(True, 10**6, False, False)  # where Fisher scoring applies
    assert default_refines(False, 3000, True, True)
    assert not default_refines(False, 3000, False, True)  # float32
    assert not default_refines(False, 3000, True, False)  # beyond the dense limit
    assert not default_refines(False, 10**6, True, True)  # above DEFAULT_POINTS


def test_default_subset() -> None:
    assert default_subset(False, 10**6, True) == SUBSET_POINTS  # above DEFAULT_POINTS
    assert default_subset(True, 10**6, True) == 0  # refined whole
    assert default_subset(False, SUBSET_POINTS, True) == 0  # no larger than the subset
    assert default_subset(False, 10**6, False) == 0  # no Fisher scoring on the subset


def test_halving_rounds_are_longer_on_larger_datasets(
    amz: Amortizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The successive halving runs rounds of ``STARTS_ROUND`` Fisher evaluations up to
    ``LONG_ROUND_POINTS`` points and of ``LONG_ROUND`` above (lowered to 30 here), on the
    points it refines."""
    import amorgp.amortizer.stages.pipeline as pipeline
    import amorgp.amortizer.stages.refine as refine

    assert halving_round(refine.LONG_ROUND_POINTS) == refine.STARTS_ROUND
    assert halving_round(refine.LONG_ROUND_POINTS + 1) == refine.LONG_ROUND
    seen: list[int] = []
    real = pipeline.halve_rows

    def spy(*args: object) -> object:
        seen.append(int(args[-1]))  # type: ignore[call-overload]
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "halve_rows", spy)
    monkeypatch.setattr(refine, "LONG_ROUND_POINTS", 30)
    for n in (30, 40):
        X, y = _data(n=n, d=1)
        amz.infer(X, y, "SE + PER")
    assert seen == [refine.STARTS_ROUND, refine.LONG_ROUND]


def test_halving_runs_on_a_subset_of_larger_datasets(
    amz: Amortizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``HALVING_POINTS`` set (30 here; ``None`` by default: all points) the
    successive halving's rounds run on the seeded subset of that many points
    (``encoder_subset``, the amortizer's seed) of larger datasets; the winner is refined on
    all points, to the dense optimum of all points."""
    import amorgp.amortizer.stages.pipeline as pipeline
    import amorgp.amortizer.stages.refine as refine

    assert refine.HALVING_POINTS is None

    seen: list[Tensor] = []
    real = pipeline.halve_rows

    def spy(X: Tensor, *args: object) -> object:
        seen.append(X.clone())
        return real(X, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "halve_rows", spy)
    monkeypatch.setattr(pipeline, "HALVING_POINTS", 30)
    X, y = _data(n=40, d=1)
    r = amz.infer(X, y, "SE + PER")
    assert len(seen) == 1
    assert seen[0].shape[1] == 30
    sub = encoder_subset(40, 30, amz.seed)
    assert sub is not None
    Xn = r.normalizer.transform_x(X).to(seen[0].dtype)
    assert torch.equal(seen[0][0], Xn[sub])
    lml, z = _dense_lml(r, X, y)
    assert _dense_optimum(r, X, y) - lml(z) < 0.05
    assert r.refine_status == "converged"


def test_resolve_refine() -> None:
    assert resolve_refine(None, True) == ("auto", "none")
    assert resolve_refine(None, False) == (0, SKIPPED)
    assert resolve_refine("auto", False) == ("auto", "none")
    assert resolve_refine(0, True) == (0, "none")
    assert resolve_refine(7, False) == (7, "none")
    assert MAX_POINTS == 2000
