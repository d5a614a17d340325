"""Refinement of a batch of rows by Fisher scoring, stopped on the predicted gain.

A *row* is one dataset with one kernel structure at one point of its hyperparameters.
Rows of the same structure and size (``B`` datasets of ``n`` points and ``d`` inputs, e.g.
a bucket of :func:`~amorgp.amortizer.frontends.many.iter_datasets`) are refined together: every
step is one batched kernel evaluation, one batched Cholesky factorisation and a few
batched products, whatever ``B``.

**The objective** is the exact log marginal likelihood of
:class:`~amorgp.amortizer.stages.objective.LogMarginalLikelihood`, in the same log parameters
``z = log(theta - floor)`` (fixed parameters left out, bounded ones through the logit of
their log-interval): :class:`BatchLogMarginalLikelihood` evaluates it on ``B`` rows at
once, with its gradient and its **Fisher information**

``F_ab = tr(A^-1 dK/dtheta_a A^-1 dK/dtheta_b) / 2``,   ``A = K + sigma^2 I``,

the expected negative Hessian of the log marginal likelihood (Mardia and Marshall,
1984), mapped to ``z`` by the transform's derivatives.  ``F`` is positive
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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.objective import (
    LogMarginalLikelihood,
    dimension_sum,
    sum_products,
)
from amorgp.kernel_grammar import ELEMENTARY, DimWiseStructure, base_symbol

if TYPE_CHECKING:
    from amorgp.amortizer.stages.constraints import KernelConstraints

__all__ = [
    "GAIN_TOL",
    "MAX_DAMPING",
    "MAX_STEP",
    "CHECK_POINTS",
    "MAX_POINTS",
    "PROBES",
    "PROBE_POINTS",
    "SE_ARD",
    "BatchLogMarginalLikelihood",
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

SE_ARD = True
"""Evaluate an ARD SE kernel (one ``SE`` addend per dimension) in its closed form
(:meth:`BatchLogMarginalLikelihood._se_ard_kernel`); ``False``: as any other structure
(the same values, for comparison)."""

PROBE_POINTS = 1000
"""Above this many points the Fisher information is estimated by :data:`PROBES` random
probes (:func:`_probed_fisher`: products of ``n x PROBES`` blocks in place of one
``n x n`` product per hyperparameter); at most, it is exact."""

PROBES = 64
"""Rademacher probes of the estimated Fisher information (above :data:`PROBE_POINTS`)."""

PROBE_SEED = 0
"""Seed of the probes' generator (one fixed draw: deterministic results)."""

CHUNK_BYTES = 2 * 2**20
"""Bytes of derivative matrices evaluated at once (:meth:`BatchLogMarginalLikelihood.
evaluate`): about the size of a core's cache."""


class BatchLogMarginalLikelihood(LogMarginalLikelihood):
    """:class:`~amorgp.amortizer.stages.objective.LogMarginalLikelihood` of one structure on
    ``B`` datasets of equal size at once, with the Fisher information.

    Args:
        X: ``(B, n, d)`` normalised inputs (float64).
        y: ``(B, n)`` targets.
        structure: the kernel structure of every row.
        constraints: its fixed values, bounds and noise floor (``None``: none).  With
            ``priors`` the log prior is added, with its gradient, and its curvature where
            it curves down (the diagonal: the priors are independent) to the Fisher
            information.
    """

    def __init__(
        self,
        X: Tensor,
        y: Tensor,
        structure: DimWiseStructure,
        constraints: KernelConstraints | None = None,
    ) -> None:
        super().__init__(X, y, structure, constraints)
        self.n = X.shape[-2]
        self.index = (
            torch.arange(self.floors.numel()) if self.plain else torch.nonzero(self.free).flatten()
        )
        # the variances whose derivative is K / variance: an addend alone in its dimension
        # whose variance scales all of it (not LIN alone, s^2 x x' + c^2); their Fisher
        # terms share one product A^-1 K (an ARD kernel's d variances cost one product)
        alone = {j for j, dim in enumerate(structure.dims) if len(dim) == 1}
        self.scales_k: set[int] = set()
        i = 0
        for j, _, b in self.terms:
            lin_alone = len(b.factors) == 1 and not ELEMENTARY[b.factors[0]].variance_scales_all
            if j in alone and not lin_alone and "variance" in b.param_names:
                self.scales_k.add(i + list(b.param_names).index("variance"))
            i += len(b.params)
        # K depends on those variances through their product alone: without fixed values,
        # bounds or priors, the refinement holds every one but the first where it starts
        # (a gauge, :meth:`evaluate_gauged`: the likelihood's optimum is the same, and no
        # step goes along the flat directions, where the curvature is zero)
        tied = sorted(self.scales_k)[1:] if self.plain and self.priors is None else []
        self.gauge = torch.tensor(tied, dtype=torch.long)
        # an ARD SE kernel (one SE addend per dimension), the commonest: K = prod(s^2)
        # exp(-sum_j r_j^2 / 2 l_j^2) in one exponential, and each lengthscale's derivative
        # K r_j^2 / l_j^3 (:meth:`_se_ard`); the squared differences stacked (B, D, n, n)
        # once, the per-dimension ones views of them
        self.se_ard = (
            SE_ARD
            and len(self.terms) == len(structure.dims)
            and all(b.name == "SE" for _, _, b in self.terms)
        )
        if self.se_ard:
            order = [j for j, _, _ in self.terms]
            self.R2 = torch.stack([self.r2[j] for j in order], -3)
            self.r2 = {j: self.R2[..., t, :, :] for t, j in enumerate(order)}
            names = base_symbol("SE").param_names
            self.ls_at = [2 * t + names.index("lengthscale") for t in range(len(order))]
            self.var_at = [2 * t + names.index("variance") for t in range(len(order))]

    def flat_rows(self, params: Tensor, noise: Tensor) -> Tensor:
        """``theta (B, m)`` of ``params (B, D, L, P)`` and ``noise (B,)``."""
        return self.flat(params, noise)

    def to_log_rows(self, params: Tensor, noise: Tensor) -> Tensor:
        """``z (B, m_free)`` of ``params (B, D, L, P)`` and ``noise (B,)`` (as
        :meth:`~amorgp.amortizer.stages.objective.LogMarginalLikelihood.to_log`, row by row)."""
        return self.to_log(params, noise)

    def theta_rows(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """``(theta (B, m), d theta / d z (B, m_free))`` of ``z (B, m_free)``."""
        return self.theta(z)

    def from_log_rows(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """``(params (B, D, L, P), noise (B,))`` of ``z (B, m_free)`` (unused slots 1)."""
        return self.from_log(z)

    def evaluate(
        self, z: Tensor, rows: Tensor | None = None, with_fisher: bool = True
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The log marginal likelihood ``(B,)``, its gradient ``(B, m_free)`` and the
        Fisher information ``(B, m_free, m_free)`` with respect to ``z (B, m_free)``
        (``with_fisher=False``: an empty ``(B, 0, 0)`` in its place, for a third of the
        cost).

        ``rows``: the rows of the batch that ``z`` belongs to (default: all, in order).
        A row whose covariance is not finite or not positive definite has a NaN
        likelihood, a zero gradient and the identity as its Fisher information.  The
        rows are evaluated in chunks of about :data:`CHUNK_BYTES` of derivative
        matrices, which stay in cache.
        """
        if rows is None:
            rows = torch.arange(z.shape[0])
        per = 8 * (self.index.numel() + 2) * self.n * self.n
        size = max(1, CHUNK_BYTES // per)
        if z.shape[0] <= size:
            return self._evaluate(z, rows, with_fisher)
        outs = [
            self._evaluate(z[i : i + size], rows[i : i + size], with_fisher)
            for i in range(0, z.shape[0], size)
        ]
        return tuple(torch.cat([o[k] for o in outs]) for k in range(3))  # type: ignore[return-value]

    def _evaluate(
        self, z: Tensor, rows: Tensor, with_fisher: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`evaluate` of one chunk of rows."""
        with torch.no_grad():
            theta, dtheta = self.theta_rows(z.detach())
            B, n = theta.shape[0], self.n
            y = self.y[rows]
            # the pairwise differences of these rows: a view where they are consecutive
            first = int(rows[0]) if rows.numel() else 0
            consecutive = bool(
                rows.numel() and torch.equal(rows, torch.arange(first, first + rows.numel()))
            )
            sel: Tensor | slice = slice(first, first + rows.numel()) if consecutive else rows
            m = theta.shape[1]
            free = self.index.tolist()
            # each free parameter's dK / d theta is a matrix of its own ("general"), K
            # divided by it (self.scales_k) or the identity (the noise)
            general = [a for a in free if a != m - 1 and a not in self.scales_k]
            slot = {a: i for i, a in enumerate(general)}
            parts: dict[int, list[tuple[Tensor, list[tuple[int, Tensor]]]]] = {}
            if self.se_ard:
                K = self._se_ard_kernel(theta, sel)
                other: dict[int, Tensor | None] = {}
            else:
                i = 0
                for j, _, b in self.terms:  # a few addends
                    k = len(b.params)
                    v = theta[:, i : i + k].T[..., None, None]  # (k, B, 1, 1)
                    parts.setdefault(j, []).append(self._addend_and_grads(j, b, v, i, sel))
                    i += k
                K, other = sum_products(_addend_sums(parts))
            eye = torch.eye(n, dtype=torch.float64)
            A = K.expand(B, n, n) + theta[:, -1, None, None] * eye
            Lc, alpha, lml, ok = exact_solve(A, y)
            Ainv = torch.cholesky_inverse(Lc)
            W = 0.5 * (alpha[:, :, None] * alpha[:, None, :] - Ainv)
            g_general = theta.new_zeros(B, len(general))
            U = theta.new_empty(B, len(general), n, n) if with_fisher else None
            Wf = W.reshape(B, n * n, 1)
            if self.se_ard and general:
                g_general, U = self._se_ard_grads(theta, sel, K, W, general, with_fisher)
            for j, lst in parts.items():  # dimensions: <W prod_{i != j} S_i, dk / d theta>
                oj = other[j]
                Wj = Wf if oj is None else (W * oj).reshape(B, n * n, 1)
                for _, grads in lst:
                    for idx, dk in grads:
                        if idx not in slot:
                            continue
                        dkb = dk.expand(B, n, n)
                        g_general[:, slot[idx]] = (dkb.reshape(B, 1, n * n) @ Wj)[:, 0, 0]
                        if U is None:
                            continue
                        if oj is None:
                            U[:, slot[idx]] = dkb
                        else:
                            torch.mul(dkb, oj, out=U[:, slot[idx]])
            Kb = K.expand(B, n, n)
            g_k = (Kb.reshape(B, 1, n * n) @ Wf)[:, 0, 0]
            g_noise = W.diagonal(dim1=-2, dim2=-1).sum(-1)
            # per free parameter: its column among the distinct matrices and its factor
            u_k, u_noise = len(general), len(general) + 1
            col, coef = [], []
            for a in free:
                if a == m - 1:
                    col.append(u_noise)
                    coef.append(torch.ones_like(theta[:, a]))
                elif a in self.scales_k:
                    col.append(u_k)
                    coef.append(1.0 / theta[:, a])
                else:
                    col.append(slot[a])
                    coef.append(torch.ones_like(theta[:, a]))
            c = torch.stack(coef, 1) if free else theta.new_zeros(B, 0)
            g_all = torch.cat([g_general, g_k[:, None], g_noise[:, None]], 1)
            grad = g_all[:, col] * c
            if U is not None and free:
                if n > PROBE_POINTS:
                    Fu = _probed_fisher(Lc, U, theta[:, -1])
                else:
                    # A^-1 K = I - noise A^-1 (A = K + noise I): no product for the scales
                    AK = eye - theta[:, -1, None, None] * Ainv
                    M = torch.cat(
                        [Ainv[:, None] @ U, AK[:, None], Ainv[:, None]], 1
                    )  # (B, u + 2, n, n): A^-1 times each distinct derivative
                    Mt = M.transpose(-2, -1).flatten(2)
                    Fu = 0.5 * (M.flatten(2) @ Mt.transpose(1, 2))
                    Fu = 0.5 * (Fu + Fu.transpose(1, 2))
                fisher = Fu[:, col][:, :, col] * c[:, :, None] * c[:, None, :]
            else:
                fisher = theta.new_zeros(B, len(free), len(free))
            prior_curv = None
            if self.priors is not None:
                with torch.enable_grad():
                    t = theta.detach().clone().requires_grad_(True)
                    lp = torch.stack([p.log_prob(t[:, i]) for i, p in enumerate(self.priors)])
                    (dlp,) = torch.autograd.grad(lp.sum(), t, create_graph=with_fisher)
                    if with_fisher:  # independent priors: the second derivatives' diagonal
                        (d2,) = torch.autograd.grad(dlp.sum(), t)
                        prior_curv = (-d2[:, self.index]).clamp_min(0.0).detach()
                lml = lml + lp.detach().sum(0)
                grad = grad + dlp.detach()[:, self.index]
            grad = grad * dtheta
            good = ok & torch.isfinite(lml) & torch.isfinite(grad).all(1)
            lml = torch.where(good, lml, torch.full_like(lml, math.nan))
            grad = torch.where(good[:, None], grad, torch.zeros_like(grad))
            if not with_fisher:
                return lml, grad, theta.new_zeros(B, 0, 0)
            if prior_curv is not None:  # the log prior's curvature, where it curves down
                fisher = fisher + torch.diag_embed(prior_curv)
            fisher = fisher * dtheta[:, :, None] * dtheta[:, None, :]
            good &= torch.isfinite(fisher).flatten(1).all(1)
            lml = torch.where(good, lml, torch.full_like(lml, math.nan))
            grad = torch.where(good[:, None], grad, torch.zeros_like(grad))
            ident = torch.eye(len(free), dtype=torch.float64).expand_as(fisher)
            fisher = torch.where(good[:, None, None], fisher, ident)
            return lml, grad, fisher

    def _se_ard_kernel(self, theta: Tensor, sel: Tensor | slice) -> Tensor:
        """``K (B, n, n)`` of an ARD SE kernel: ``prod_j s_j^2 exp(-sum_j r_j^2 / 2
        l_j^2)``, the sum one batched product over the stacked squared differences."""
        R2 = self.R2[sel]  # (B, D, n, n)
        B, D, n = R2.shape[0], R2.shape[1], R2.shape[-1]
        coef = -0.5 / theta[:, self.ls_at].square()  # (B, D)
        E = (coef[:, None, :] @ R2.reshape(B, D, n * n)).reshape(B, n, n)
        return E.exp_().mul_(theta[:, self.var_at].prod(1)[:, None, None])

    def _se_ard_grads(
        self,
        theta: Tensor,
        sel: Tensor | slice,
        K: Tensor,
        W: Tensor,
        general: list[int],
        with_fisher: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """The lengthscales' gradient ``<W, K r_j^2> / l_j^3`` (``(B, u)``, in the order of
        ``general``, all lengthscales) and with ``with_fisher`` their derivative matrices
        ``K r_j^2 / l_j^3`` (``(B, u, n, n)``)."""
        R2 = self.R2[sel]
        B, D, n = R2.shape[0], R2.shape[1], R2.shape[-1]
        pos = [self.ls_at.index(a) for a in general]
        inv3 = theta[:, general].pow(-3)  # (B, u)
        R2u = R2 if pos == list(range(D)) else R2[:, pos]
        WK = (W * K).reshape(B, n * n, 1)
        g = (R2u.reshape(B, len(pos), n * n) @ WK)[..., 0] * inv3
        if not with_fisher:
            return g, None
        U = R2u * K[:, None]
        return g, U.mul_(inv3[:, :, None, None])

    def evaluate_gauged(
        self, z: Tensor, rows: Tensor | None = None, with_fisher: bool = True
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`evaluate` with the gauge's directions (:attr:`gauge`) removed: their
        gradient zero, their Fisher rows and columns those of the identity, so that a step
        leaves them where they are."""
        lml, grad, fisher = self.evaluate(z, rows, with_fisher)
        if self.gauge.numel():
            grad[:, self.gauge] = 0.0
            if with_fisher:
                fisher[:, self.gauge, :] = 0.0
                fisher[:, :, self.gauge] = 0.0
                fisher[:, self.gauge, self.gauge] = 1.0
        return lml, grad, fisher


def _addend_sums(parts: dict[int, list[tuple[Tensor, Any]]]) -> dict[int, Tensor]:
    """Each dimension's sum of its addends' kernels (the addend itself where it is
    alone: no copy)."""
    return {j: dimension_sum([k for k, _ in lst]) for j, lst in parts.items()}


def _probed_fisher(Lc: Tensor, U: Tensor, noise: Tensor) -> Tensor:
    """The Fisher information of the distinct derivative matrices ``[U_1..U_u, K, I]``
    (``(B, u + 2, u + 2)``) by :data:`PROBES` Rademacher probes ``z``:
    ``tr(A^-1 D_p A^-1 D_q) ~ mean_z (D_p A^-1 z)^T (A^-1 D_q z)`` (Hutchinson), from the
    factor ``Lc`` of ``A = K + noise I``: two products of each ``U`` with ``n x PROBES``
    blocks and one solve, against ``u`` products of ``n x n`` matrices exactly.  The
    probes are drawn from a generator of fixed seed: the same rows give the same
    estimate.  ``K`` and ``I`` need no product (``K z = A z - noise z``)."""
    B, u, n, _ = U.shape
    gen = torch.Generator().manual_seed(PROBE_SEED)
    Z = torch.randint(0, 2, (n, PROBES), generator=gen).to(U) * 2.0 - 1.0
    Z = Z.expand(B, n, PROBES)
    P = torch.cholesky_solve(Z, Lc)  # A^-1 z
    QK = Z - noise[:, None, None] * P  # K A^-1 z = A^-1 K z
    Qg = U @ P[:, None]  # (B, u, n, s): U_p A^-1 z
    UZ = (U @ Z[:, None]).permute(0, 2, 1, 3).reshape(B, n, u * PROBES)
    Rg = torch.cholesky_solve(UZ, Lc).reshape(B, n, u, PROBES).permute(0, 2, 1, 3)
    Q = torch.cat([Qg, QK[:, None], P[:, None]], 1).flatten(2)
    R = torch.cat([Rg, QK[:, None], P[:, None]], 1).flatten(2)
    Fu = (0.5 / PROBES) * (Q @ R.transpose(1, 2))
    return 0.5 * (Fu + Fu.transpose(1, 2))


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
of the factorisation (probes above :data:`PROBE_POINTS`), the others about an L-BFGS
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
