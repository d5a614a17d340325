from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import torch

from amorgp.diff_linalg.optim import LBFGSRun, batched_adam, lbfgs

A = torch.tensor(
    [[[3.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 10.0]], [[2.0, -0.3], [-0.3, 0.7]]],
    dtype=torch.float64,
)
C = torch.tensor([[1.0, -2.0], [0.5, 0.5], [-1.0, 3.0]], dtype=torch.float64)


def quad(p: list[torch.Tensor]) -> torch.Tensor:
    r = p[0] - C
    return 0.5 * torch.einsum("bi,bij,bj->b", r, A, r) + torch.sin(p[0]).sum(1)


def test_batched_adam_matches_torch_adam_per_element() -> None:
    x0 = torch.zeros(3, 2, dtype=torch.float64)
    res = batched_adam([x0], quad, lr=0.05, max_iters=40, rtol=0.0, patience=10**6)
    assert res.iterations.tolist() == [40, 40, 40]
    for b in range(3):
        x = x0[b].clone().requires_grad_(True)
        opt = torch.optim.Adam([x], lr=0.05)
        for _ in range(40):
            opt.zero_grad()
            quad([x.expand(3, 2)])[b].backward()
            opt.step()
        torch.testing.assert_close(res.params[0][b], x.detach(), rtol=1e-12, atol=1e-12)


def test_converged_elements_stop_changing() -> None:
    # element 0 starts at its minimum of a flat objective and converges immediately
    def f(p: list[torch.Tensor]) -> torch.Tensor:
        scale = torch.tensor([0.0, 1.0], dtype=torch.float64)
        return scale * ((p[0] - 1.0) ** 2).sum(1)

    x0 = torch.tensor([[5.0], [5.0]], dtype=torch.float64)
    res = batched_adam([x0], f, lr=0.1, max_iters=100, rtol=1e-6, patience=3)
    assert bool(res.converged[0])
    assert int(res.iterations[0]) <= 3
    assert res.params[0][0].item() == 5.0
    assert int(res.iterations[1]) > int(res.iterations[0])
    assert abs(res.params[0][1].item() - 1.0) < abs(5.0 - 1.0)


def test_failed_element_keeps_last_finite_iterate_and_others_continue() -> None:
    def f(p: list[torch.Tensor]) -> torch.Tensor:
        x = p[0][:, 0]
        value = (x - 3.0) ** 2
        # element 0 becomes undefined once x > 1 (like a Cholesky failure)
        bad = torch.zeros_like(x, dtype=torch.bool)
        bad[0] = bool(x[0] > 1.0)
        return torch.where(bad, torch.full_like(value, math.nan), value)

    x0 = torch.zeros(2, 1, dtype=torch.float64)
    res = batched_adam([x0], f, lr=0.1, max_iters=200, rtol=1e-10, patience=3)
    assert bool(res.failed[0])
    assert not bool(res.failed[1])
    assert 0.8 < res.params[0][0, 0].item() <= 1.0  # the last iterate before crossing 1
    assert math.isfinite(res.loss[0].item())
    assert abs(res.params[0][1, 0].item() - 3.0) < 0.2


def test_batched_adam_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one"):
        batched_adam([], quad)
    with pytest.raises(ValueError, match="batch size"):
        batched_adam([torch.zeros(3, 2), torch.zeros(2)], quad)
    with pytest.raises(ValueError, match="shape"):
        batched_adam([torch.zeros(3, 2, dtype=torch.float64)], lambda p: p[0].sum())


def test_lbfgs_reaches_scipy_minimum() -> None:
    def rosen(p: list[torch.Tensor]) -> torch.Tensor:
        x = p[0]
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    x0 = np.array([-1.2, 1.0, 0.5])
    ref = scipy.optimize.minimize(
        scipy.optimize.rosen, x0, jac=scipy.optimize.rosen_der, method="BFGS", tol=1e-12
    )
    res = lbfgs([torch.tensor(x0)], rosen, max_iters=500)
    assert res.converged
    assert not res.failed
    np.testing.assert_allclose(res.params[0].numpy(), ref.x, atol=1e-5)


def _rosen(p: list[torch.Tensor]) -> torch.Tensor:
    x = p[0]
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def test_a_continued_run_takes_the_steps_of_one_run() -> None:
    """Rounds of 5 iterations of one :class:`LBFGSRun` end where one run of their total
    does (its curvature pairs kept), short of the minimum after 15 and at scipy's (the
    closed form: all ones) when left to converge; fresh runs of 5 restart from a gradient
    step each and end elsewhere."""
    x0 = torch.tensor([-1.2, 1.0, 0.5], dtype=torch.float64)
    one = lbfgs([x0], _rosen, max_iters=15, max_evals=15 * 25)
    run = LBFGSRun([x0], _rosen)
    for _ in range(3):
        rounds = run.run(5, 5 * 25)
    assert rounds.iterations == 5
    assert not rounds.converged
    np.testing.assert_allclose(rounds.params[0].numpy(), one.params[0].numpy(), rtol=1e-10)
    assert rounds.loss == pytest.approx(one.loss, rel=1e-10)
    assert one.loss > 1e-6  # not yet at the minimum: the iterates say something
    fresh = x0
    for _ in range(3):
        fresh = lbfgs([fresh], _rosen, max_iters=5, max_evals=5 * 25).params[0]
    assert not np.allclose(fresh.numpy(), one.params[0].numpy(), rtol=1e-6)
    while not (done := run.run(5, 5 * 25)).converged:
        assert not done.failed
    np.testing.assert_allclose(done.params[0].numpy(), np.ones(3), atol=1e-5)


def _logcosh_counted(calls: list[int]):
    # steep walls: the line searches from this start need several evaluations each
    def f(p: list[torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        return torch.log(torch.cosh(10.0 * (p[0] - 1.0))).sum()

    return f


def test_lbfgs_iteration_budget_is_not_cut_by_line_searches() -> None:
    x0 = torch.tensor([0.0, 3.0], dtype=torch.float64)
    # the default evaluation budget (5 // 4 per iteration) ends the run early here ...
    calls = [0]
    short = lbfgs([x0], _logcosh_counted(calls), max_iters=5)
    assert short.iterations < 5
    assert calls[0] <= 6
    # ... and that is not convergence: the objective is far from its minimum of 0
    assert short.loss > 1.0
    assert not short.converged
    # with room for the line searches, the 5 iterations run and get much further
    calls = [0]
    full = lbfgs([x0], _logcosh_counted(calls), max_iters=5, max_evals=5 * 25)
    assert full.iterations == 5
    assert calls[0] > 6
    assert full.loss < 0.1 * short.loss
    # a run that stops on its own tolerances reports convergence, at the minimum
    done = lbfgs([x0], _logcosh_counted([0]), max_iters=500, max_evals=500 * 25)
    assert done.converged
    assert done.iterations < 500
    np.testing.assert_allclose(done.params[0].numpy(), [1.0, 1.0], atol=1e-6)


def test_lbfgs_handles_non_finite_objective() -> None:
    def f(p: list[torch.Tensor]) -> torch.Tensor:
        x = p[0]
        return torch.where(
            x.sum() > 2.0, torch.tensor(math.nan, dtype=x.dtype), ((x - 3.0) ** 2).sum()
        )

    res = lbfgs([torch.zeros(2, dtype=torch.float64)], f, max_iters=50)
    assert not res.failed
    assert math.isfinite(res.loss)
    assert float(res.params[0].sum()) <= 2.0


def test_lbfgs_fails_cleanly_when_nothing_is_finite() -> None:
    res = lbfgs([torch.zeros(2, dtype=torch.float64)], lambda p: p[0].sum() * math.nan, max_iters=5)
    assert res.failed
    assert math.isnan(res.loss)
