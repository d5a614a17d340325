"""Refinement of a batch of rows by Fisher scoring, stopped on the predicted gain.

A *row* is one dataset with one kernel structure at one point of its hyperparameters.
Rows of the same structure and size (``B`` datasets of ``n`` points and ``d`` inputs, e.g.
a bucket of :func:`~amorgp.amortizer.frontends.many.iter_datasets`) are refined together: every
step is one batched kernel evaluation, one batched Cholesky factorisation and a few
batched products, whatever ``B``.

**The objective** is the exact log marginal likelihood in the log parameters ``z =
log(theta - floor)``, evaluated on ``B`` rows at once with its gradient and its **Fisher
information** ``F`` (the expected negative Hessian) by
:class:`~amorgp.amortizer.stages.fisher_objective.BatchLogMarginalLikelihood`.  ``F`` is positive
semi-definite, so the quadratic model ``l(z + delta) ~ l(z) + g^T delta - delta^T F
delta / 2`` has its maximum at ``delta = F^-1 g`` with the

**predicted gain** ``g^T F^-1 g / 2`` (nats), taken within a box of one unit of every
log parameter (:func:`predicted_gain`: a parameter on its way to a floor or to infinity
keeps a Fisher step that does not shrink, so the unconstrained prediction would not fall).

A row whose predicted gain is below the tolerance is at an optimum to that resolution:
the refinement stops there, row by row.  That test costs one factorisation and ``m``
products of ``n x n`` matrices (``m`` free parameters) at the point reached, so it also
tells, at no extra cost of a separate check, which rows of an amortized answer are
already at their optimum and which are not.

**The step** is Levenberg-Marquardt damped Fisher scoring,
``delta = (F + lambda diag F)^-1 g``, each component clipped to
:data:`MAX_STEP` (a factor ``e^3`` on any parameter; ``F`` corrected by one BFGS update
along the last step, which brings in the curvature observed there): a step that raises the log marginal
likelihood is accepted and ``lambda`` divided by 3, one that does not is rejected and
``lambda`` multiplied by 4; a row whose ``lambda`` exceeds :data:`MAX_DAMPING` has
stalled (no step along the model's direction helps) and stops, marked so.  Each
*iteration* is one evaluation of every active row (at its trial point): ``refine=k``
bounds the evaluations, not only the accepted steps.

Rows are independent: the result of a row does not depend on the other rows of its
batch (the tests compare a batch with its rows one at a time).  Where it applies
(:func:`fisher_applies`) and how the pipeline's rows are formed:
:mod:`amorgp.amortizer.stages.refine_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood

__all__ = [
    "GAIN_TOL",
    "MAX_DAMPING",
    "MAX_STEP",
    "CHECK_POINTS",
    "MAX_POINTS",
    "FisherRefinement",
    "fisher_applies",
    "fisher_bytes",
    "fisher_refine",
    "predicted_gain",
]

GAIN_TOL = 0.01
"""Predicted gain (nats) below which a row is at its optimum.  A hundredth of a nat,
not the tenth that the 1-nat resolution of model comparisons would suggest: the local
quadratic model does not see a curved ridge of the likelihood, along which the
gradient grows as the parameters move (a scale and a lengthscale growing together),
and there a predicted 0.1 nats left 2 nats to gain where 0.01 left 0.01."""

MAX_STEP = 3.0
"""Largest change of any log parameter in one step (a factor ``e^3``, about 20)."""

MAX_DAMPING = 1e8
"""Damping above which a row has stalled: its steps keep failing to improve."""

_INITIAL_DAMPING = 1e-3

_REJECTED_DAMPING = 0.25


def _solve(fisher: Tensor, grad: Tensor, damping: Tensor) -> Tensor:
    """``(F + damping diag F + ridge)^-1 g`` per row (a tiny ridge keeps directions that
    the data do not inform finite)."""
    diag = fisher.diagonal(dim1=-2, dim2=-1)
    ridge = 1e-10 * diag.amax(-1, keepdim=True).clamp_min(1e-300) + 1e-12
    M = fisher + torch.diag_embed(damping[:, None] * diag + ridge)
    sol, info = torch.linalg.solve_ex(M, grad[..., None])
    bad = (info != 0) | ~torch.isfinite(sol[..., 0]).all(-1)
    return torch.where(bad[:, None], torch.zeros_like(grad), sol[..., 0])


def _model_gain(fisher: Tensor, grad: Tensor, delta: Tensor) -> Tensor:
    """``g^T delta - delta^T F delta / 2`` per row."""
    return (grad * delta).sum(-1) - 0.5 * (delta * (fisher @ delta[..., None])[..., 0]).sum(-1)


def predicted_gain(fisher: Tensor, grad: Tensor, radius: float = 1.0) -> Tensor:
    """The gain of the quadratic model ``g^T delta - delta^T F delta / 2`` per row
    (nats) at its best of three steps that change no log parameter by more than
    ``radius``: the Fisher (Newton) step scaled into that box, the gradient step
    scaled into it, and the Newton step with the components beyond the box held at its
    faces (an active set, a few passes), clipped into it.  Each is feasible, so the
    result is a lower bound of the model's maximum over the box, and it equals the
    unconstrained ``g^T F^-1 g / 2`` near an interior optimum.

    The box keeps the model where it holds: a parameter whose optimum is its floor (a
    variance that vanishes) or infinity (an irrelevant input's lengthscale) has a
    log-parameter gradient that decays as it approaches, but a Fisher step that does not
    shrink with it, so without the box the predicted gain of such a row would never
    fall.
    """
    B, m = grad.shape
    if m == 0:
        return grad.new_zeros(B)
    zero = torch.zeros(B, dtype=grad.dtype)
    newton = _solve(fisher, grad, zero)

    def into_box(d: Tensor) -> Tensor:
        big = d.abs().amax(-1, keepdim=True)
        return d * (radius / big.clamp_min(radius))

    gFg = (grad * (fisher @ grad[..., None])[..., 0]).sum(-1)
    alpha = (grad * grad).sum(-1) / gFg.clamp_min(1e-300)
    cauchy = into_box(alpha[:, None] * grad)
    delta = newton
    low = torch.zeros_like(grad, dtype=torch.bool)
    high = torch.zeros_like(low)
    eye = torch.eye(m, dtype=grad.dtype).expand_as(fisher)
    for _ in range(m):  # the active set
        new_low, new_high = low | (delta < -radius), high | (delta > radius)
        if bool((new_low == low).all() and (new_high == high).all()):
            break
        low, high = new_low, new_high
        held = low | high
        face = torch.where(low, -radius, torch.where(high, radius, 0.0)).to(grad.dtype)
        rhs = torch.where(held, face, grad - (fisher @ face[..., None])[..., 0])
        both = held[:, :, None] | held[:, None, :]
        delta = torch.where(held, face, _solve(torch.where(both, eye, fisher), rhs, zero))
    gains = torch.stack(
        [
            _model_gain(fisher, grad, into_box(newton)),
            _model_gain(fisher, grad, cauchy),
            _model_gain(fisher, grad, delta.clamp(-radius, radius)),
        ]
    )
    return gains.amax(0).clamp_min(0.0)


@dataclass(frozen=True)
class FisherRefinement:
    """The refinement of ``B`` rows (:func:`fisher_refine`).

    Attributes:
        params: ``(B, D, L, P)`` refined parameters.
        noise: ``(B,)`` refined noise variances.
        log_marginal_likelihood: ``(B,)`` at the refined point (the start's where no step
            was accepted; NaN where even the start failed).
        start_lml: ``(B,)`` at the start.
        start_gain: ``(B,)`` predicted gain at the start (nats).
        gain: ``(B,)`` predicted gain at the refined point (nats).
        grad_norm: ``(B,)`` Euclidean norm of the gradient in log parameters there.
        iterations: ``(B,)`` evaluations run (accepted or not).
        status: per row ``"converged"`` (predicted gain below the tolerance),
            ``"max_iters"`` (the budget ran out first), ``"stalled"`` (steps kept failing
            before the gain fell below the tolerance) or ``"failed"`` (the start's
            covariance could not be factored).
    """

    params: Tensor
    noise: Tensor
    log_marginal_likelihood: Tensor
    start_lml: Tensor
    start_gain: Tensor
    gain: Tensor
    grad_norm: Tensor
    iterations: Tensor
    status: list[str]

    @property
    def converged(self) -> Tensor:
        """``(B,)`` whether each row ended at an optimum (predicted gain below tolerance)."""
        return torch.tensor([s == "converged" for s in self.status], dtype=torch.bool)


def _secant(fisher: Tensor, step: Tensor, dgrad: Tensor) -> Tensor:
    """``fisher`` corrected by one BFGS update with the step ``s`` and the gradient's
    change ``y = g_old - g_new`` (the observed curvature along ``s``; rows whose
    ``s^T y`` is not positive keep ``fisher``)."""
    Hs = (fisher @ step[..., None])[..., 0]
    sHs = (step * Hs).sum(-1)
    sy = (step * dgrad).sum(-1)
    ok = (sy > 1e-12 * sHs.abs().clamp_min(1e-300)) & (sHs > 0) & torch.isfinite(sy)
    upd = (
        fisher
        - Hs[:, :, None] * Hs[:, None, :] / sHs.clamp_min(1e-300)[:, None, None]
        + dgrad[:, :, None] * dgrad[:, None, :] / sy.clamp_min(1e-300)[:, None, None]
    )
    return torch.where(ok[:, None, None], upd, fisher)


def fisher_refine(
    objective: BatchLogMarginalLikelihood,
    params: Tensor,
    noise: Tensor,
    max_iters: int,
    tol: float = GAIN_TOL,
    final_check: bool = True,
) -> FisherRefinement:
    """Damped quasi-Newton ascent of every row from ``params (B, D, L, P)`` and
    ``noise (B,)`` (module docstring), each row until its predicted gain is below ``tol``
    nats, it stalls, or ``max_iters`` evaluations have run (``max_iters = 0``: only the
    test at the start).

    The curvature model starts as the Fisher information and takes a BFGS update at
    every accepted step (evaluations without the Fisher information cost a third);
    when the model predicts less than ``tol``, the point is evaluated again with the
    Fisher information, and the row stops only if that confirms it.  A row that ends
    for another reason is evaluated with the Fisher information once more, so that every
    reported gain is the Fisher information's (``final_check=False``: not, for a round
    whose gains are not reported, e.g. of the successive halving; its ``gain`` and
    ``status`` may then be the curvature model's).
    """
    z = objective.to_log_rows(params.detach().to(torch.float64), noise.detach().to(torch.float64))
    B = z.shape[0]
    lml, grad, fisher = objective.evaluate_gauged(z)
    curv = fisher.clone()  # the curvature model: the Fisher information, BFGS-updated
    start_lml = lml.clone()
    ok = torch.isfinite(lml)
    gain = predicted_gain(fisher, grad)
    start_gain = gain.clone()
    checked = torch.ones(B, dtype=torch.bool)  # ``gain`` is the Fisher information's
    done = ~ok | (gain < tol)
    stalled = torch.zeros(B, dtype=torch.bool)
    damping = torch.full((B,), _INITIAL_DAMPING, dtype=torch.float64)
    iterations = torch.zeros(B, dtype=torch.long)

    def confirm(rows: Tensor) -> None:
        """The Fisher information at the current point of ``rows``: the gain it predicts
        (and the curvature model restarted from it)."""
        _, g2, f2 = objective.evaluate_gauged(z[rows], rows)
        grad[rows], curv[rows] = g2, f2
        g_f = predicted_gain(f2, g2)
        gain[rows] = g_f
        checked[rows] = True
        done[rows] |= g_f < tol

    for _ in range(max_iters):
        check = torch.nonzero(~done & ~checked & (gain < tol)).flatten()
        if check.numel():
            iterations[check] += 1
            confirm(check)
        act = torch.nonzero(~done & ~torch.isin(torch.arange(B), check)).flatten()
        if act.numel() == 0:
            if bool(done.all()):
                break
            continue
        delta = _solve(curv[act], grad[act], damping[act]).clamp(-MAX_STEP, MAX_STEP)
        z_try = z[act] + delta
        l2, g2, _ = objective.evaluate_gauged(z_try, act, with_fisher=False)
        iterations[act] += 1
        better = torch.isfinite(l2) & (l2 > lml[act])
        acc, rej = act[better], act[~better]
        h2 = _secant(curv[acc], delta[better], grad[acc] - g2[better])
        z[acc], lml[acc], grad[acc], curv[acc] = z_try[better], l2[better], g2[better], h2
        gain[acc] = predicted_gain(h2, g2[better])
        checked[acc] = False
        damping[acc] = (damping[acc] / 3.0).clamp_min(1e-9)
        damping[rej] = (damping[rej] * 4.0).clamp_min(_REJECTED_DAMPING)
        stalled[rej] = damping[rej] > MAX_DAMPING
        done |= stalled
    last = torch.nonzero(ok & ~checked).flatten()
    if last.numel() and final_check:  # every reported gain is the Fisher information's
        confirm(last)
    p, nz = objective.from_log_rows(z)
    status = [
        "failed" if not bool(ok[b])
        else "converged" if float(gain[b]) < tol
        else "stalled" if bool(stalled[b])
        else "max_iters"
        for b in range(B)
    ]  # fmt: skip
    return FisherRefinement(
        params=p,
        noise=nz,
        log_marginal_likelihood=lml,
        start_lml=start_lml,
        start_gain=start_gain,
        gain=gain,
        grad_norm=grad.norm(dim=-1),
        iterations=iterations,
        status=status,
    )


MAX_POINTS = 2000
"""Most points of a dataset refined by Fisher scoring (:func:`fisher_applies`).  Its
evaluations with the Fisher information cost ``m`` products of ``n x n`` matrices on top
of the factorisation (probes above
:data:`~amorgp.amortizer.stages.fisher_objective.PROBE_POINTS`), the others about an L-BFGS
evaluation, and it stops on the predicted gain: measured in
``docs/benchmarks/refine-stop.md``.  Larger datasets refine by L-BFGS
(:mod:`amorgp.amortizer.stages.refine`)."""


CHECK_POINTS = 1000
"""Most points at which a result's optimality is evaluated on demand, after the fit
(:meth:`amorgp.amortizer.stages.results.KernelResult.optimality`): one evaluation with the
Fisher information, about a second or two at this size for a few hyperparameters."""


def fisher_bytes(n: int, terms: int) -> float:
    """Peak bytes of one row's evaluation with the Fisher information on ``n`` points, for
    a kernel of ``terms`` addends: the pairwise differences of each input (three ``n x n``
    matrices per input), a derivative matrix and its product with ``A^-1`` (and that
    product's transpose) per hyperparameter (at most four per addend and the noise), and
    about ten more for the covariance, its factor and inverse and the kernel's parts."""
    m = 4 * terms + 1
    return 8.0 * n * n * (3 * terms + 3 * m + 10)


def fisher_applies(n: int, terms: Sequence[int], dtype: torch.dtype, budget: float) -> bool:
    """Whether datasets of ``n`` points with kernels of ``terms`` addends are refined by
    Fisher scoring: float64, at most :data:`MAX_POINTS` points, and one row's evaluation
    (:func:`fisher_bytes`) within the memory ``budget`` (bytes)."""
    need = fisher_bytes(n, max(terms, default=1))
    return dtype == torch.float64 and n <= MAX_POINTS and need <= budget
