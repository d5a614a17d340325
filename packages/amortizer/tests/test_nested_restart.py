"""The restart of a kernel that ended below a kernel nested in it
(:func:`amorgp.amortizer.stages.refine_rows.restart_nested`).  Oracles: the structures'
addends by hand, scipy's L-BFGS-B on the dense float64 likelihood (numpy kernels from
the registry's references, :func:`amorgp.amortizer.testing.oracle_covariance`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import multivariate_normal

from amorgp.amortizer.stages.fisher import GAIN_TOL
from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
from amorgp.amortizer.stages.refine_rows import nested_kernels, restart_nested
from amorgp.amortizer.testing import oracle_covariance
from amorgp.kernel_grammar import DimWiseStructure


def _s(text: str, d: int = 1) -> DimWiseStructure:
    return DimWiseStructure.coerce(text, d)


def test_nested_kernels_are_sums_of_fewer_addends() -> None:
    texts = ["SE", "PER", "SE + PER", "SE*PER", "SE + SE*PER", "LIN + SE + PER"]
    nest = nested_kernels([_s(t, 2) for t in texts])
    found = {texts[k]: sorted(texts[k2] for k2, _ in nest[k]) for k in range(len(texts))}
    assert found == {
        "SE": [],
        "PER": [],
        "SE + PER": ["PER", "SE"],
        "SE*PER": [],  # a product contains SE only in a limit: not nested
        "SE + SE*PER": ["SE", "SE*PER"],
        "LIN + SE + PER": ["PER", "SE", "SE + PER"],
    }
    # different input widths are not compared
    assert nested_kernels([_s("SE", 1), _s("SE + PER", 2)]) == [[], []]


def _dense_lml(X: np.ndarray, y: np.ndarray, s: DimWiseStructure, theta: np.ndarray) -> float:
    K = oracle_covariance(X, s, theta)
    return float(multivariate_normal(np.zeros(len(y)), K).logpdf(y))


def _dense_optimum(X: np.ndarray, y: np.ndarray, s: DimWiseStructure) -> tuple[float, np.ndarray]:
    """scipy's L-BFGS-B on the dense likelihood in ``z = log(theta - floor)``, 3 starts."""
    obj = BatchLogMarginalLikelihood(torch.tensor(X)[None], torch.tensor(y)[None], s)
    floors = obj.floors.numpy()

    def neg(z: np.ndarray) -> float:
        try:
            return -_dense_lml(X, y, s, floors + np.exp(z))
        except (np.linalg.LinAlgError, ValueError):
            return 1e10

    best = None
    for z0 in (-1.0, 0.0, -2.0):
        res = minimize(neg, np.full(floors.size, z0), method="L-BFGS-B",
                       options={"maxiter": 3000, "gtol": 1e-9})  # fmt: skip
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    return -float(best.fun), floors + np.exp(best.x)


def test_a_sum_below_its_addend_restarts_from_the_addends_optimum() -> None:
    """``SE + PER`` left at a poor point below ``SE``'s optimum restarts from ``SE``'s
    point and ends at least as high as ``SE``'s dense optimum (the sum contains it);
    ``SE``, not below anything nested in it, is left alone."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0.0, 1.0, (40, 1)), 0)
    y = np.sin(5.0 * X[:, 0]) + 0.1 * rng.standard_normal(40)
    y = (y - y.mean()) / y.std()
    se, both = _s("SE"), _s("SE + PER")
    best_se, theta_se = _dense_optimum(X, y, se)
    params = torch.ones(2, 1, 2, 3, dtype=torch.float64)
    params[0, 0, 0, :2] = torch.tensor(theta_se[:2])  # SE: variance, lengthscale
    noise = torch.tensor([theta_se[2], 0.5], dtype=torch.float64)
    # SE + PER: a short SE lengthscale and a large noise, far below SE's optimum
    params[1, 0, 0, :2] = torch.tensor([0.2, 0.02])
    params[1, 0, 1, :3] = torch.tensor([0.5, 1.0, 0.3])
    obj = BatchLogMarginalLikelihood(torch.tensor(X)[None], torch.tensor(y)[None], both)
    poor = float(obj.evaluate(obj.to_log_rows(params[1:], noise[1:]), with_fisher=False)[0])
    assert poor < best_se - 5.0
    got = restart_nested(
        torch.tensor(X)[None], torch.tensor(y)[None], [se, both], params, noise,
        [best_se, poor], "auto",
    )  # fmt: skip
    assert got is not None
    assert got.rows == [1]
    assert got.start == ["nested: SE"]
    theta = obj.flat_rows(got.params[:, :1, :2], got.noise)[0].numpy()
    value = _dense_lml(X, y, both, theta)
    assert math.isclose(value, got.log_marginal_likelihood[0], rel_tol=0.0, abs_tol=1e-6)
    # within the refinement's stopping tolerance (a predicted gain below GAIN_TOL nats)
    assert value >= best_se - GAIN_TOL, (value, best_se)
    assert got.status == ["converged"]


def test_nothing_restarts_where_every_sum_is_above_its_addends() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(0.0, 1.0, (30, 1))
    y = rng.standard_normal(30)
    params = torch.ones(2, 1, 2, 3, dtype=torch.float64)
    noise = torch.ones(2, dtype=torch.float64)
    got = restart_nested(
        torch.tensor(X)[None], torch.tensor(y)[None], [_s("SE"), _s("SE + PER")], params,
        noise, [-10.0, -9.95], "auto",
    )  # fmt: skip
    assert got is None  # 0.05 nats below: within the margin


def test_the_restart_starts_where_the_nested_kernel_is_despite_a_large_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The added addend's own values may be anything (here a ``LIN`` offset of 10^4 and a
    huge lengthscale, as a failed refinement leaves them): the restart's start has the
    nested kernel's dense likelihood, within the variance floor's effect."""
    from amorgp.amortizer.stages import refine_rows

    rng = np.random.default_rng(2)
    X = np.sort(rng.uniform(0.0, 1.0, (60, 1)), 0)
    y = np.sin(2 * np.pi * X[:, 0] / 0.3) + 0.05 * rng.standard_normal(60)
    y = (y - y.mean()) / y.std()
    per, both = _s("PER"), _s("PER + SE*LIN")
    best_per, theta_per = _dense_optimum(X, y, per)
    params = torch.ones(2, 1, 2, 3, dtype=torch.float64)
    params[0, 0, 0, :3] = torch.tensor(theta_per[:3])
    noise = torch.tensor([theta_per[3], 0.5], dtype=torch.float64)
    params[1, 0, 1, :3] = torch.tensor([1.0, 1e6, 1e4])  # SE*LIN: variance, lengthscale, offset
    seen: list[float] = []
    real = refine_rows.fisher_refine

    def spy(obj, starts, nz, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.extend(obj.evaluate(obj.to_log_rows(starts, nz), with_fisher=False)[0].tolist())
        return real(obj, starts, nz, *args, **kwargs)

    monkeypatch.setattr(refine_rows, "fisher_refine", spy)
    got = restart_nested(
        torch.tensor(X)[None], torch.tensor(y)[None], [per, both], params, noise,
        [best_per, best_per - 50.0], "auto",
    )  # fmt: skip
    assert got is not None
    assert got.rows == [1]
    assert abs(seen[0] - best_per) < 0.05, (seen, best_per)
    assert got.log_marginal_likelihood[0] >= best_per - GAIN_TOL


def test_a_later_pass_restarts_only_from_the_rows_the_previous_one_improved() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(0.0, 1.0, (30, 1))
    y = np.sin(4.0 * X[:, 0]) + 0.1 * rng.standard_normal(30)
    params = torch.ones(2, 1, 2, 3, dtype=torch.float64)
    noise = torch.full((2,), 0.1, dtype=torch.float64)
    args = (torch.tensor(X)[None], torch.tensor(y)[None], [_s("SE"), _s("SE + PER")])
    lml = [-10.0, -20.0]  # the sum 10 nats below SE
    assert restart_nested(*args, params, noise, lml, 5, sources={1}) is None
    got = restart_nested(*args, params, noise, lml, 5, sources={0})
    assert got is not None
    assert got.rows == [1]
