"""Refinement: iterations actually run, why they stopped, integral and "auto" budgets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.stages.fisher import GAIN_TOL
from amorgp.amortizer.stages.refine import AUTO_MAX_ITERS, check_refine, dense_groups
from amorgp.core.errors import OptionError
from amorgp.lazy_kernels import EVALUATOR_MATRICES_PER_TERM


def _data(n: int = 30, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 5, size=(n, 1))
    return X, np.sin(X[:, 0]) * 3 + 10 + 0.1 * rng.normal(size=n)


def _oracle_lml(r: object, X: np.ndarray, y: np.ndarray) -> float:
    norm = r.normalizer  # type: ignore[attr-defined]
    Xn, yn = norm.transform_x(X).numpy(), norm.transform_y(y).numpy()
    K = r.kernel.reference(Xn, Xn, r.params.numpy()) + r.noise * np.eye(len(y))  # type: ignore[attr-defined]
    return float(multivariate_normal(np.zeros(len(y)), K).logpdf(yn))


def test_reports_the_iterations_actually_run(amz: Amortizer) -> None:
    """A huge budget stops when L-BFGS converges and says so, with the true count."""
    X, y = _data()
    r0 = amz.infer(X, y, "SE", refine=0)
    r = amz.infer(X, y, "SE", refine=100000)
    assert r.refine_status == "converged"
    assert 1 <= r.refine_steps < 100000
    assert r.log_marginal_likelihood >= r0.log_marginal_likelihood
    assert r.log_marginal_likelihood == pytest.approx(_oracle_lml(r, X, y), rel=1e-9)
    short = amz.infer(X, y, "SE + PER", refine=2)
    assert short.refine_steps <= 2
    assert short.refine_status in ("max_iters", "converged")
    assert r0.refine_steps == 0
    assert r0.refine_status == "none"
    assert r.to_dict()["refine_steps"] == r.refine_steps


def test_integral_budgets_are_accepted(amz: Amortizer) -> None:
    X, y = _data()
    a = amz.infer(X, y, "SE", refine=np.int64(3))
    b = amz.infer(X, y, "SE", refine=3)
    assert a.refine_steps == b.refine_steps
    assert a.log_marginal_likelihood == b.log_marginal_likelihood
    assert check_refine(np.uint8(4)) == 4
    assert check_refine(None) is None  # the default
    for bad in (True, 2.0, -1, "3", "always", "default"):
        with pytest.raises(OptionError, match="refine must be"):
            check_refine(bad)


def test_auto_stops_when_the_objective_stops_improving(amz: Amortizer) -> None:
    X, y = _data(40, seed=1)
    calls: list[tuple[str, int, int]] = []
    kernels = ["SE", "SE + PER"]
    auto = amz.infer_many(X, y, kernels, refine="auto", progress=lambda *a: calls.append(a))
    long = amz.infer_many(X, y, kernels, refine=AUTO_MAX_ITERS)
    for ra, rl in zip(auto, long, strict=True):
        assert ra.refine_status in ("converged", "failed")
        # Fisher scoring (n <= 1000): no step where the calibrated start is at an optimum
        assert 0 <= ra.refine_steps < AUTO_MAX_ITERS
        assert ra.refine_gain < GAIN_TOL
        # close to the optimum a long run reaches (relative tolerance of the stop rule)
        gap = rl.log_marginal_likelihood - ra.log_marginal_likelihood
        assert gap <= 1e-2 * max(1.0, abs(rl.log_marginal_likelihood))
    stages = [c[0] for c in calls]
    assert stages[0] == "network"
    assert "refine" in stages
    assert calls[-1] == ("likelihood", 2, 2)
    budgets = [c for c in calls if c[0] == "refine"]  # kernels refined of all
    assert budgets[-1] == ("refine", 2, 2)
    assert all(done <= total == 2 for _, done, total in budgets)


def test_many_kernels_beyond_one_dense_batch_are_refined_in_groups(
    tiny_checkpoint: Path,
) -> None:
    """A budget for the Cholesky of three addends at a time (every kernel alone fits, all
    five addends do not): four kernels are refined in groups, each exactly as when refined
    alone (oracle: one call per kernel)."""
    X, y = _data(120)
    dense = 8 * 120**2
    budget = (EVALUATOR_MATRICES_PER_TERM * 3 + 1) * dense + 2 * dense
    a = Amortizer.from_pretrained(tiny_checkpoint, memory_budget=budget)
    kernels = ["SE", "SE + PER", "LIN", "PER"]
    terms = [len(a.structure(k, X.shape[1]).dims[0]) * X.shape[1] for k in kernels]
    groups = a.refine_groups(len(y), terms)
    assert len(groups) > 1
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3]
    assert not a.fits_dense(len(y), sum(terms))  # refused before: all at once
    got = a.infer_many(X, y, kernels, refine=3)
    for k, r in zip(kernels, got, strict=True):
        alone = a.infer(X, y, k, refine=3)
        assert r.refine_steps == alone.refine_steps
        assert r.refine_status == alone.refine_status != "none"
        torch.testing.assert_close(r.params, alone.params, rtol=1e-6, atol=1e-9)
        assert r.noise == pytest.approx(alone.noise, rel=1e-6)


def test_refine_above_the_dense_limit_is_refused(tiny_checkpoint: Path) -> None:
    X, y = _data(300)
    dense = 8 * 300**2  # a budget for dense CG (evaluator + K) but not the Cholesky workspace
    budget = (EVALUATOR_MATRICES_PER_TERM + 1) * dense + dense
    a = Amortizer.from_pretrained(tiny_checkpoint, memory_budget=budget)
    with pytest.raises(OptionError, match="refine=auto runs dense Type-2 ML"):
        a.infer(X, y, "SE", refine="auto")


@pytest.mark.parametrize(
    ("terms", "limit"), [([2, 2, 2, 5], 5), ([1] * 7, 3), ([4, 1, 1, 4], 6), ([3], 3)]
)
def test_dense_groups_partition_in_order_and_fit(terms: list[int], limit: int) -> None:
    groups = dense_groups(terms, lambda t: t <= limit)
    assert groups is not None
    assert [i for g in groups for i in g] == list(range(len(terms)))  # every kernel, in order
    sums = [sum(terms[i] for i in g) for g in groups]
    assert all(s <= limit for s in sums)
    # greedy: the next group's first kernel would not have fitted into the previous group
    assert all(sums[j] + terms[groups[j + 1][0]] > limit for j in range(len(groups) - 1))


def test_dense_groups_refuse_a_kernel_that_does_not_fit_alone() -> None:
    assert dense_groups([1, 6, 1], lambda t: t <= 5) is None
