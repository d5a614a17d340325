"""Optimisers over a batch of independent problems.

:func:`batched_adam` minimises ``B`` separable objectives at once: one forward
and backward pass over the padded batch per step, Adam moments per element and
a per-element convergence mask — an element that converged (or failed) stops
changing while the others continue.  Adam is written out here rather than
taken from ``torch.optim`` because the built-in optimiser keeps moving a
parameter with zero gradient through its momentum, so it cannot freeze single
batch elements.

:func:`lbfgs` runs ``torch.optim.LBFGS`` with a strong-Wolfe line search on one
problem.  L-BFGS is deliberately *not* run on the summed batch objective: the
sum is separable, so its minimiser is the tuple of the per-element minimisers,
but the iterates are not — the line-search step and the two-loop recursion's
inner products are shared across elements, so one badly conditioned element
shortens every other element's steps and a single non-finite value aborts the
line search for all.  Per-pair L-BFGS is what a practitioner runs, so it is the
fair baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["BatchedOptimResult", "LBFGSResult", "LBFGSRun", "batched_adam", "lbfgs"]

BatchObjective = Callable[[Sequence[Tensor]], Tensor]


@dataclass(frozen=True)
class BatchedOptimResult:
    """Outcome of :func:`batched_adam`.

    Attributes:
        params: final parameters, same shapes as the inputs (``(B, ...)`` each).
        loss: ``(B,)`` objective at the final parameters (NaN where no finite value was seen).
        iterations: ``(B,)`` optimiser steps taken per element.
        converged: ``(B,)`` met the convergence criterion.
        failed: ``(B,)`` hit a non-finite objective or gradient; the element keeps
            its last finite iterate.
    """

    params: tuple[Tensor, ...]
    loss: Tensor
    iterations: Tensor
    converged: Tensor
    failed: Tensor


def batched_adam(
    params: Sequence[Tensor],
    objective: BatchObjective,
    *,
    lr: float = 0.1,
    max_iters: int = 150,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    rtol: float = 1e-4,
    patience: int = 5,
) -> BatchedOptimResult:
    """Minimise ``B`` independent objectives with Adam and per-element early stopping.

    Adam (Kingma & Ba) per element ``b``: ``m <- b1 m + (1 - b1) g``,
    ``v <- b2 v + (1 - b2) g^2``, ``x <- x - lr m_hat / (sqrt(v_hat) + eps)`` with
    bias-corrected moments, exactly as ``torch.optim.Adam`` (no weight decay).
    An element is converged once its objective changed by less than
    ``rtol * (1 + |f|)`` on ``patience`` consecutive steps; it then stops moving.

    Args:
        params: unconstrained parameter tensors, each ``(B, ...)``; not modified.
        objective: maps the parameter tensors to the ``(B,)`` losses (NaN or inf
            marks a failed element, e.g. a Cholesky failure).
        lr: Adam step size.
        max_iters: maximum number of steps per element.
        betas: Adam moment decay rates.
        eps: Adam denominator offset.
        rtol: relative tolerance of the convergence test.
        patience: consecutive small changes needed to declare convergence.

    Returns:
        A :class:`BatchedOptimResult`.

    Raises:
        ValueError: for empty ``params``, mismatched batch sizes or bad settings.
    """
    if not params:
        raise ValueError("batched_adam needs at least one parameter tensor")
    B = params[0].shape[0]
    if any(p.ndim == 0 or p.shape[0] != B for p in params):
        raise ValueError("every parameter tensor needs the same leading batch size")
    if lr <= 0 or max_iters < 0 or patience < 1:
        raise ValueError(
            f"need lr > 0, max_iters >= 0, patience >= 1 (got {lr}, {max_iters}, {patience})"
        )
    b1, b2 = betas
    x = [p.detach().clone() for p in params]
    m = [torch.zeros_like(p) for p in x]
    v = [torch.zeros_like(p) for p in x]
    device = x[0].device
    steps = torch.zeros(B, dtype=torch.long, device=device)
    active = torch.ones(B, dtype=torch.bool, device=device)
    converged = torch.zeros(B, dtype=torch.bool, device=device)
    failed = torch.zeros(B, dtype=torch.bool, device=device)
    calm = torch.zeros(B, dtype=torch.long, device=device)
    prev = torch.full((B,), float("nan"), dtype=torch.float64, device=device)
    x_prev = [t.clone() for t in x]
    last_loss = torch.full((B,), float("nan"), dtype=torch.float64, device=device)

    def expand(mask: Tensor, like: Tensor) -> Tensor:
        return mask.view(-1, *([1] * (like.ndim - 1)))

    for _ in range(max_iters + 1):
        leaves = [t.clone().requires_grad_(True) for t in x]
        loss = objective(leaves)
        if loss.shape != (B,):
            raise ValueError(f"objective must return shape ({B},), got {tuple(loss.shape)}")
        finite = torch.isfinite(loss.detach())
        total = torch.where(active & finite, loss, torch.zeros_like(loss)).sum()
        grads = (
            torch.autograd.grad(total, leaves, allow_unused=True)
            if total.requires_grad
            else [None] * len(leaves)
        )
        grads_t = [torch.zeros_like(t) if g is None else g for t, g in zip(x, grads, strict=True)]
        grad_ok = torch.stack([torch.isfinite(g).reshape(B, -1).all(1) for g in grads_t]).all(0)
        lossd = loss.detach().to(torch.float64)
        newly_failed = active & ~(finite & grad_ok)
        failed |= newly_failed
        active &= ~newly_failed
        if bool(newly_failed.any()):  # back to the last iterate with a finite objective
            x = [torch.where(expand(newly_failed, t), p, t) for t, p in zip(x, x_prev, strict=True)]
        last_loss = torch.where(active, lossd, last_loss)
        # convergence test on the objective change
        small = (lossd - prev).abs() <= rtol * (1.0 + lossd.abs())
        calm = torch.where(active & small, calm + 1, torch.zeros_like(calm))
        prev = torch.where(active, lossd, prev)
        now_conv = active & (calm >= patience)
        converged |= now_conv
        active &= ~now_conv
        if not bool(active.any()) or int(steps.max()) >= max_iters:
            break
        x_prev = [t.clone() for t in x]
        t = steps + 1
        bc1 = 1.0 - b1 ** t.to(torch.float64)
        bc2 = 1.0 - b2 ** t.to(torch.float64)
        for i, g in enumerate(grads_t):
            a = expand(active, g)
            g = torch.where(a, g, torch.zeros_like(g))
            m_new = b1 * m[i] + (1.0 - b1) * g
            v_new = b2 * v[i] + (1.0 - b2) * g * g
            c1 = expand(bc1, g).to(g.dtype)
            c2 = expand(bc2, g).to(g.dtype)
            step = lr * (m_new / c1) / ((v_new / c2).sqrt() + eps)
            m[i] = torch.where(a, m_new, m[i])
            v[i] = torch.where(a, v_new, v[i])
            x[i] = torch.where(a, x[i] - step, x[i])
        steps = steps + active.long()
    return BatchedOptimResult(tuple(x), last_loss, steps, converged, failed)


@dataclass(frozen=True)
class LBFGSResult:
    """Outcome of :func:`lbfgs` on one problem."""

    params: tuple[Tensor, ...]
    loss: float
    iterations: int
    converged: bool
    failed: bool


def lbfgs(
    params: Sequence[Tensor],
    objective: Callable[[Sequence[Tensor]], Tensor],
    *,
    max_iters: int = 100,
    max_evals: int | None = None,
    lr: float = 1.0,
    history_size: int = 20,
    tolerance_grad: float = 1e-7,
    tolerance_change: float = 1e-10,
) -> LBFGSResult:
    """Minimise one scalar objective with ``torch.optim.LBFGS`` and a strong-Wolfe line search.

    A non-finite objective or gradient ends the run with ``failed=True`` and the
    last finite iterate (never an exception).

    Args:
        params: unconstrained parameter tensors; not modified.
        objective: maps the parameter tensors to a scalar loss.
        max_iters: maximum L-BFGS iterations.
        max_evals: maximum objective evaluations over the run, line searches included
            (default ``torch.optim.LBFGS``'s ``max_iters * 5 // 4``, which can end a run
            after fewer than ``max_iters`` iterations; give ``max_iters`` times the line
            search's own limit of 25 to make the iteration count the budget).
        lr: initial step length of the line search.
        history_size: number of curvature pairs kept.
        tolerance_grad: stop when the max-abs gradient falls below this.
        tolerance_change: stop when the objective or step changes less than this.
    """
    run = LBFGSRun(
        params,
        objective,
        lr=lr,
        history_size=history_size,
        tolerance_grad=tolerance_grad,
        tolerance_change=tolerance_change,
    )
    return run.run(max_iters, max_evals)


class LBFGSRun:
    """An L-BFGS minimisation (:func:`lbfgs`'s) that can be continued: each :meth:`run`
    goes on from the iterate, direction and curvature pairs where the previous one
    stopped, so rounds of ``k`` iterations take the steps of one run of their total (one
    more evaluation per round, at its start), where a fresh run per round would begin
    each with a gradient step and an empty history.

    Args:
        params, objective, lr, history_size, tolerance_grad, tolerance_change: as
            :func:`lbfgs`'s.
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        objective: Callable[[Sequence[Tensor]], Tensor],
        *,
        lr: float = 1.0,
        history_size: int = 20,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-10,
    ) -> None:
        self.x = [p.detach().clone().requires_grad_(True) for p in params]
        self.objective = objective
        self.opt = torch.optim.LBFGS(
            self.x,
            lr=lr,
            history_size=history_size,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            line_search_fn="strong_wolfe",
        )
        self.best: list[Tensor] = [t.detach().clone() for t in self.x]
        self.best_loss = float("inf")

    def run(self, max_iters: int, max_evals: int | None = None) -> LBFGSResult:
        """At most ``max_iters`` more iterations and ``max_evals`` more evaluations
        (:func:`lbfgs`); the result's parameters and loss are the best seen over every
        round, its ``iterations`` and ``converged`` this round's."""
        x, opt = self.x, self.opt
        group = opt.param_groups[0]
        group["max_iter"] = max_iters
        group["max_eval"] = max_evals if max_evals is not None else max_iters * 5 // 4
        state = opt.state[opt._params[0]]
        iters0, evals0 = int(state.get("n_iter", 0)), int(state.get("func_evals", 0))
        bad = False

        def closure() -> Tensor:
            nonlocal bad
            opt.zero_grad()
            loss = self.objective(x)
            if not torch.isfinite(loss):
                bad = True
                # a large finite value steers the line search back; the iterate is discarded
                return torch.tensor(1e30, dtype=loss.dtype, requires_grad=False)
            loss.backward()
            if not all(t.grad is None or bool(torch.isfinite(t.grad).all()) for t in x):
                bad = True
                for t in x:
                    if t.grad is not None:
                        t.grad.zero_()
                return loss.detach().new_tensor(1e30)
            lv = float(loss.detach())
            if lv < self.best_loss:
                self.best_loss = lv
                self.best = [t.detach().clone() for t in x]
            return loss

        try:
            opt.step(closure)
        except RuntimeError:
            bad = True
        state = opt.state[opt._params[0]]
        n_iter = int(state.get("n_iter", 0)) - iters0
        failed = not (self.best_loss < float("inf"))
        # stopped by its own tolerances: neither the iteration nor the evaluation budget ran out
        budget_left = int(state.get("func_evals", 0)) - evals0 < group["max_eval"]
        converged = (not failed) and n_iter < max_iters and budget_left
        best_loss = float("nan") if bad and failed else self.best_loss
        return LBFGSResult(tuple(self.best), best_loss, n_iter, converged, failed)
