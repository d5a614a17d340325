"""The objective of the refinement: the exact log marginal likelihood of one kernel
structure on fixed data as a function of its log parameters, with its gradient in closed
form (:class:`LogMarginalLikelihood`; see :mod:`amorgp.amortizer.stages.refine` for the
optimiser that maximises it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.constraints import START_GAP
from amorgp.amortizer.stages.kernel_parts import (
    Derivative,
    absorbs,
    dimension_sum,
    sum_products,
    unit_and_grads,
)
from amorgp.kernel_grammar import (
    ELEMENTARY,
    FLOORS,
    NOISE,
    BaseSymbol,
    DimWiseStructure,
    ParamKind,
    base_symbol,
)

if TYPE_CHECKING:
    from amorgp.amortizer.stages.constraints import KernelConstraints
    from amorgp.diff_linalg.optim import LBFGSRun

__all__ = [
    "EVALS_PER_ITERATION",
    "Derivative",
    "START_GAP",
    "LogMarginalLikelihood",
    "dimension_sum",
    "sum_products",
]

EVALS_PER_ITERATION = 25
"""Objective evaluations allowed per L-BFGS iteration (the strong-Wolfe line search's own
limit); ``torch.optim.LBFGS``'s default budget of ``1.25 x`` the iterations would end a
short refinement after two or three iterations whose line searches needed several."""


class LogMarginalLikelihood:
    """The exact log marginal likelihood of one kernel structure on fixed data, as a
    function of its log parameters ``z = log(theta - floor)`` (the transform's floors), for
    L-BFGS.

    With ``constraints`` (:class:`~amorgp.amortizer.stages.constraints.KernelConstraints`) the
    noise's floor is their ``noise_floor``, a fixed parameter is not among ``z`` (its value
    is inserted as given) and a parameter bounded by ``(low, high)`` moves as
    ``theta = exp(log low + (log high - log low) sigmoid(z))`` (GPyTorch's ``Interval``,
    in log space).

    The same objective as :func:`amorgp.baselines.fit_type2ml_batch` with ``space="log"``
    (which :func:`refine` used before), evaluated with less work per step: the pairwise
    differences of every input dimension are computed once, each addend's kernel and its
    derivatives are a few element-wise operations on them (each elementary kernel's
    ``unit_and_grads`` in its lazy-kernels registration, forward-mode differentiation of
    its torch form where it has none), and the gradient is in closed form
    (:meth:`value_and_grad`), one Cholesky and one inverse per evaluation.  The matrices
    of an evaluation are symmetric: their element-wise work runs on the pairs' values of
    the lower triangle only (:meth:`_pairwise`), half the numbers and half the memory.

    Args:
        X: ``(n, d)`` normalised inputs (float64).
        y: ``(n,)`` targets.
        structure: the kernel structure.
        constraints: its fixed values, bounds and noise floor (``None``: none).
    """

    def __init__(
        self,
        X: Tensor,
        y: Tensor,
        structure: DimWiseStructure,
        constraints: KernelConstraints | None = None,
        share: LogMarginalLikelihood | None = None,
    ) -> None:
        self.X, self.y, self.structure = X, y, structure
        self.terms: list[tuple[int, int, BaseSymbol]] = [
            (j, l, base_symbol(sym))
            for j, dim in enumerate(structure.dims)
            for l, sym in enumerate(dim)  # noqa: E741
        ]
        self.floors = torch.tensor(
            [FLOORS[kind] for _, _, b in self.terms for kind in b.param_kinds]
            + [FLOORS[ParamKind.NOISE]],
            dtype=torch.float64,
        )
        self.plain = constraints is None or (not constraints.fixed and not constraints.bounds)
        # MAP: the grammar's prior of every parameter, in the flat order of ``theta``
        self.priors = (
            [p.prior for _, _, b in self.terms for p in b.params] + [NOISE.prior]
            if constraints is not None and constraints.priors
            else None
        )
        if constraints is not None:
            self.floors, fixed, low, high = constraints.vectors()
            self.fixed = fixed
            self.free = torch.isnan(fixed)
            self.bounded = ~torch.isnan(low)
            self.log_low, self.log_width = low.log(), high.log() - low.log()
        self.pairs: tuple[Tensor, Tensor]
        dims = sorted({j for j, _, _ in self.terms})
        self.points: dict[int, tuple[Tensor, Tensor]] = {}
        self.r: dict[int, Tensor] = {}
        self.xx: dict[int, Tensor] = {}
        self.r2: dict[int, Tensor] = {}
        if share is None:
            self._pairwise(X, dims)
        else:
            self._share(share, dims)

    def _pairwise(self, X: Tensor, dims: list[int]) -> None:
        """The pairs' values of every input column in ``dims``, packed: each matrix of an
        evaluation is symmetric (``r`` antisymmetric, and used only through even functions
        of it), so only its lower triangle with the diagonal is formed, ``(P,)`` with ``P =
        n (n + 1) / 2`` in row-major order (:attr:`pairs`): the element-wise work and the
        memory of the pairwise values halve.  ``K`` is written into the lower triangle of
        one ``n x n`` buffer kept for the objective's life (the part the factorisation
        reads; sequential positions), and ``W``'s pairs are gathered from the same
        positions."""
        n = X.shape[-2]
        rows, cols = torch.tril_indices(n, n)
        self.pairs = (rows, cols)
        self.lower = rows * n + cols  # increasing: each row's pairs are consecutive
        # the diagonal's pairs: the last of each row (row i ends at i (i + 3) / 2)
        i = torch.arange(n)
        self.diagonal = i * (i + 3) // 2
        self._buffers: dict[str, Tensor] = {}
        self._column_pairs(X[rows], X[cols], {j: (X[:, j], X[:, j]) for j in dims})

    def _share(self, other: LogMarginalLikelihood, dims: list[int]) -> None:
        """The packed pairs of ``other``, an objective of the same inputs ``X``: its
        indices, its covariance buffer (objectives of one fit are evaluated one at a time)
        and its columns' pairwise values, those of ``dims`` it lacks added for both (the
        kernels of one call refined together keep one set, not one each)."""
        if other.X is not self.X:
            raise ValueError("share: the objectives' inputs must be the same tensor")
        self.pairs, self.lower, self.diagonal = other.pairs, other.lower, other.diagonal
        self._buffers = other._buffers
        self.points, self.r, self.xx, self.r2 = other.points, other.r, other.xx, other.r2
        missing = {j: (self.X[:, j], self.X[:, j]) for j in dims if j not in self.r}
        if missing:
            rows, cols = self.pairs
            self._column_pairs(self.X[rows], self.X[cols], missing)

    def _column_pairs(
        self, xi: Tensor, xj: Tensor, points: dict[int, tuple[Tensor, Tensor]]
    ) -> None:
        """``r``, ``xx`` and ``r2`` of the columns of ``points`` (its keys) from the first
        and second points of each pair, ``xi`` and ``xj``, broadcasting to the pairs'
        shape; ``points``: each column's points as PER's form takes them."""
        for j in points:  # into the dictionaries, which a shared objective holds too
            self.points[j] = points[j]
            self.r[j] = xi[..., j] - xj[..., j]
            self.xx[j] = xi[..., j] * xj[..., j]
            self.r2[j] = self.r[j].square()

    def flat(self, params: Tensor, noise: Tensor) -> Tensor:
        """``theta (..., m)``: ``params (..., D, L, P)`` (the structure's slots) and
        ``noise (...)`` (leading dimensions: rows of a batch, or none)."""
        theta = [params[..., j, a, : len(b.params)] for j, a, b in self.terms]
        return torch.cat([*theta, noise.reshape(*params.shape[:-3], 1)], dim=-1)

    def to_log(self, params: Tensor, noise: Tensor) -> Tensor:
        """``z`` of ``params (..., D, L, P)`` (the structure's slots) and ``noise (...)``:
        ``(..., m)``, or the free parameters' only with fixed ones (see the class
        docstring; a start within :data:`START_GAP` of a floor or bound is moved that far
        inside)."""
        flat = self.flat(params, noise)
        z = (flat - self.floors).clamp_min(START_GAP * self.floors).log()
        if self.plain:
            return z
        u = ((flat.log() - self.log_low) / self.log_width).clamp(START_GAP, 1.0 - START_GAP)
        z = torch.where(self.bounded, u.logit(), z)
        return z[..., self.free]

    def theta(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """``(theta (..., m), d theta / d z)`` of ``z (..., m_free)``: every parameter,
        the fixed ones included, and the derivative of the free ones (in the order of
        ``z``)."""
        if self.plain:
            theta = self.floors + z.exp()
            return theta, theta - self.floors
        free = self.floors[self.free] + z.exp()
        dfree = free - self.floors[self.free]
        u = torch.sigmoid(z)
        log_low, width = self.log_low[self.free], self.log_width[self.free]
        boxed = (log_low + width * u).exp()
        bounded = self.bounded[self.free]
        free = torch.where(bounded, boxed, free)
        dfree = torch.where(bounded, boxed * width * u * (1.0 - u), dfree)
        theta = self.fixed.expand(*z.shape[:-1], -1).clone()
        theta[..., self.free] = free
        return theta, dfree

    def from_log(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """``(params (..., D, L, P), noise (...))`` of ``z (..., m_free)`` (unused slots
        1)."""
        theta = self.theta(z.detach())[0]
        D, L = self.structure.n_dims, self.structure.max_addends
        P = max(len(b.params) for _, _, b in self.terms)
        params = torch.ones(*theta.shape[:-1], D, L, P, dtype=torch.float64)
        i = 0
        for j, a, b in self.terms:  # a few addends
            params[..., j, a, : len(b.params)] = theta[..., i : i + len(b.params)]
            i += len(b.params)
        return params, theta[..., -1]

    def value(self, z: Tensor) -> Tensor:
        """The objective (the log marginal likelihood, plus the log prior with ``priors``)
        at ``z (m,)``, differentiable with respect to ``z``
        (gradient in closed form, see :meth:`value_and_grad`; NaN on failure)."""
        return _LogMarginalLikelihoodFn.apply(z, self)

    def value_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """The log marginal likelihood at ``z (m,)`` and its gradient ``(m,)``.

        With ``A = K + sigma^2 I``, ``alpha = A^-1 y`` and ``W = (alpha alpha^T - A^-1) / 2``,
        ``d LML / d theta = sum(W * dK / d theta)`` (``trace W`` for the noise); ``K`` is
        the product over dimensions of the sums ``S_j`` of their addends, so an addend of
        dimension ``j`` contributes ``sum(W * prod_{i != j} S_i * dk / d theta)``; each
        ``dk / d theta`` is element-wise (``SE``: ``k r^2 / l^3``; ``PER``: ``k s^2 / l^3``
        and ``k s cos(pi r / p) pi r / (p^2 l^2)`` with ``s = sin(pi r / p)``...).
        ``d theta / d z = theta - floor`` (bounded and fixed parameters: see the class
        docstring).  Float64; one Cholesky and one inverse.
        """
        with torch.no_grad():
            theta, dtheta = self.theta(z.detach())
            lml, grad = self.value_and_theta_grad(theta)
            if self.priors is not None:
                lp, dlp = self.log_prior(theta)
                lml, grad = lml + lp, grad + dlp
            return lml, (grad if self.plain else grad[self.free]) * dtheta

    def log_prior(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The log density of the grammar's priors at ``theta (m,)`` and its gradient
        (with ``priors``; autograd through each prior's ``log_prob``)."""
        assert self.priors is not None
        with torch.enable_grad():
            t = theta.detach().clone().requires_grad_(True)
            lp = torch.stack([p.log_prob(t[i]) for i, p in enumerate(self.priors)]).sum()
            (g,) = torch.autograd.grad(lp, t)
        return lp.detach(), g

    def value_and_theta_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The log marginal likelihood at ``theta (m,)`` and its gradient with respect to
        ``theta`` (see :meth:`value_and_grad`; NaN on failure)."""
        with torch.no_grad():
            parts: dict[int, list[tuple[Tensor, list[Derivative]]]] = {}
            i = 0
            for j, _, b in self.terms:  # a few addends
                k, derivs = self._addend_relative(j, b, theta[i : i + len(b.params)], i)
                parts.setdefault(j, []).append((k, derivs))
                i += len(b.params)
            sums = {j: dimension_sum([k for k, _ in lst]) for j, lst in parts.items()}
            K, other = sum_products(sums)  # the pairs' values
            nan = torch.full_like(theta, math.nan)
            A = self._covariance(K, theta[-1])
            Lc, alpha, lml, ok = exact_solve(A, self.y)
            if not bool(ok):
                return theta.new_tensor(math.nan), nan
            W = torch.cholesky_inverse(Lc).mul_(-0.5).addr_(alpha, alpha, alpha=0.5)
            del Lc
            # W's pairs, weighted so that a sum over the pairs is the sum over the matrix
            # (W is symmetric: its transpose where the inverse came in column-major order)
            Wc = W if W.is_contiguous() else W.mT
            Wp = Wc.reshape(-1).index_select(0, self.lower).mul_(2.0)
            Wp[self.diagonal] = W.diagonal()
            g_noise = W.diagonal().sum()
            del W, Wc
            grad = torch.zeros_like(theta)
            for j, lst in parts.items():  # dimensions
                o = other[j]
                Wj = Wp if o is None else Wp * o
                for k_a, derivs in lst:
                    # relative derivatives: <Wj, s k M> = s <Wj k, M>
                    G = Wj * k_a if any(d.scale is not None for d in derivs) else Wj
                    for d in derivs:
                        if d.scale is None:
                            assert d.matrix is not None
                            dk = d.matrix.expand_as(Wj)
                            grad[d.param] = torch.dot(Wj, dk)
                        elif d.matrix is None:
                            grad[d.param] = d.scale * G.sum()
                        else:
                            dot = torch.dot(G, d.matrix.expand_as(G))
                            grad[d.param] = d.scale * dot
            grad[-1] = g_noise
            return lml, grad

    def _covariance(self, K: Tensor, noise: Tensor) -> Tensor:
        """``A = K + noise I`` from the pairs' values ``K (P,)``: its lower triangle, the part
        the factorisation reads, in a buffer reused by every evaluation (a new ``n x n``
        matrix above glibc's mmap threshold, about 2,900 points, is faulted in afresh each
        time); the upper triangle is never written (zeros)."""
        n = self.X.shape[-2]
        A = self._buffers.get("A")
        if A is None:
            A = self._buffers["A"] = K.new_zeros(n, n)
        A.view(-1).index_copy_(0, self.lower, K.expand(self.lower.shape))
        A.diagonal().add_(noise)
        return A

    def _addend_relative(
        self,
        j: int,
        b: BaseSymbol,
        v: Tensor,
        first: int,
        rows: Tensor | slice | None = None,
    ) -> tuple[Tensor, list[Derivative]]:
        """One addend's kernel ``k`` and its derivatives (:class:`Derivative`), relative to
        ``k`` where the factors allow (the variance's ``k / s^2``, and each factor's with a
        ``unit_and_log_grads``): then a gradient needs no derivative matrix, ``<W, scale k
        M> = scale <W k, M>``.  LIN alone, and the factors without ``unit_and_log_grads``,
        give dense ones.  ``v``: its parameters, ``(k,)`` or ``(k, B, 1, 1)`` for a batch of
        datasets; ``rows``: which datasets of a batch (an index, or a slice of consecutive
        ones)."""
        from amorgp.lazy_kernels import torch_elementary

        names = list(b.param_names)
        values = dict(zip(names, v, strict=True))
        at = {name: first + i for i, name in enumerate(names)}
        r, r2, xx = self.r[j], self.r2[j], self.xx[j]
        if rows is not None:
            r, r2, xx = r[rows], r2[rows], xx[rows]
        var = values["variance"]
        if len(b.factors) == 1 and not ELEMENTARY[b.factors[0]].variance_scales_all:
            # alone: s^2 g + c, whose unit factor is kt = g + c with c its first parameter
            # (LIN: s^2 x x' + c^2; the registry's variance_scales_all); g = kt at c = 0
            f = b.factors[0]
            full = b.factor_param_names(f)
            p = {name: values[fn] for name, fn in full.items()}
            lead = ELEMENTARY[f].params[0].name
            p[lead] = torch.zeros_like(p[lead])
            g, grads = unit_and_grads(f, p, r, r2, xx)
            plain = [
                Derivative(at["variance"], None, g),
                Derivative(at[full[lead]], None, torch.ones_like(g)),
            ]
            plain.extend(
                Derivative(at[full[name]], None, var * dt) for name, dt in grads if name != lead
            )
            return var * g + values[full[lead]], plain
        units: list[Tensor] = []
        exponent: Tensor | None = None  # the summed exponents of the exponential factors
        derivs = [Derivative(at["variance"], 1.0 / var, None)]
        dense: list[tuple[int, list[tuple[int, Tensor]]]] = []
        for f in b.factors:
            full = b.factor_param_names(f)
            p = {name: values[fn] for name, fn in full.items()}
            form = torch_elementary(f)
            if form.points_exponent_grads is not None or form.exponent_grads is not None:
                if form.points_exponent_grads is not None:
                    x1, x2 = self.points[j]
                    if rows is not None:
                        x1, x2 = x1[rows], x2[rows]
                    e, logs = form.points_exponent_grads(p, x1, x2, r, pairs=self.pairs)
                else:
                    assert form.exponent_grads is not None
                    e, logs = form.exponent_grads(p, r, r2, xx)
                if exponent is None:  # summed in place: a tensor the form gave away
                    exponent = e if form.owns_output else e.clone()
                elif absorbs(exponent.shape, e.shape):
                    exponent.add_(e)
                else:
                    exponent = exponent + e
                derivs.extend(Derivative(at[full[name]], s, m) for name, s, m in logs)
                continue
            if form.unit_and_log_grads is not None:
                t, logs = form.unit_and_log_grads(p, r, r2, xx)
                derivs.extend(Derivative(at[full[name]], s, m) for name, s, m in logs)
            else:
                t, grads = unit_and_grads(f, p, r, r2, xx)
                dense.append((len(units), [(at[full[name]], dt) for name, dt in grads]))
            units.append(t)
        if exponent is not None:  # one exponential for all of them
            units.append(exponent.exp_())
        unit = units[0]
        for t in units[1:]:
            unit = unit * t
        for fi, own in dense:  # the other factors times the variance, times each derivative
            rest = var
            for other, t in enumerate(units):
                if other != fi:
                    rest = rest * t
            derivs.extend(Derivative(a, None, rest * dt) for a, dt in own)
        return var * unit, derivs

    def lbfgs_run(self, z: Tensor) -> LBFGSRun:
        """An L-BFGS run of the objective from ``z`` that :meth:`maximise` continues round
        after round (:class:`~amorgp.diff_linalg.optim.LBFGSRun`)."""
        from amorgp.diff_linalg.optim import LBFGSRun

        return LBFGSRun([z], lambda p: -self.value(p[0]))

    def maximise(
        self, z: Tensor, iterations: int, run: LBFGSRun | None = None
    ) -> tuple[Tensor, float, int, str, float]:
        """At most ``iterations`` L-BFGS iterations (strong Wolfe, up to
        :data:`EVALS_PER_ITERATION` evaluations each) from ``z``, or with ``run``
        (:meth:`lbfgs_run`) from where that run stopped, its direction and curvature pairs
        kept: ``(z, lml, iterations run, status, gradient norm)``, status ``"converged"``,
        ``"max_iters"`` or ``"failed"`` (the best finite iterate is kept, ``z`` where
        there is none); the norm of the objective's gradient in ``z`` there (NaN where it
        is not finite)."""
        if z.numel() == 0:  # every parameter fixed: nothing to optimise
            with torch.no_grad():
                lml = float(self.value(z))
            return z, lml, 0, "converged" if math.isfinite(lml) else "failed", 0.0
        run = self.lbfgs_run(z) if run is None else run
        res = run.run(iterations, iterations * EVALS_PER_ITERATION)
        z_new = res.params[0].detach()
        value, grad = self.value_and_grad(z_new)
        lml = float(value)
        failed = res.failed or not math.isfinite(lml)
        if failed and not math.isfinite(lml):
            z_new = z
            value, grad = self.value_and_grad(z)
            lml = float(value)
        status = "failed" if failed else ("converged" if res.converged else "max_iters")
        return z_new, lml, int(res.iterations), status, float(grad.norm())


class _LogMarginalLikelihoodFn(torch.autograd.Function):
    """:meth:`LogMarginalLikelihood.value_and_grad` as an autograd function of ``z``."""

    @staticmethod
    def forward(ctx: Any, z: Tensor, objective: LogMarginalLikelihood) -> Tensor:
        value, grad = objective.value_and_grad(z)
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, None]:
        (grad,) = ctx.saved_tensors
        return grad_out * grad, None
