"""The batched objective of Fisher scoring: the exact log marginal likelihood of one kernel
structure on ``B`` rows at once, with its gradient and its **Fisher information**.

A *row* is one dataset with one kernel structure at one point of its hyperparameters.
:class:`BatchLogMarginalLikelihood` evaluates the log marginal likelihood of
:class:`~amorgp.amortizer.stages.objective.LogMarginalLikelihood`, in the same log
parameters ``z = log(theta - floor)`` (fixed parameters left out, bounded ones through the
logit of their log-interval), on ``B`` rows of the same structure and size: one batched
kernel evaluation, one batched Cholesky factorisation and a few batched products, with
the gradient in closed form and the Fisher information

``F_ab = tr(A^-1 dK/dtheta_a A^-1 dK/dtheta_b) / 2``,   ``A = K + sigma^2 I``,

the expected negative Hessian of the log marginal likelihood (Mardia and Marshall,
1984), mapped to ``z`` by the transform's derivatives (above :data:`PROBE_POINTS` points
estimated from :data:`PROBES` fixed random probes).  An ARD ``SE`` kernel is evaluated in
its closed form (:data:`SE_ARD`).  Every matrix of an evaluation is symmetric, so its
element-wise work runs on the pairs' values only, the upper triangle with the diagonal
packed (``n (n + 1) / 2`` numbers, :mod:`amorgp.amortizer.stages.packed`); the
full matrices are formed for the factorisation and, with the Fisher information, for
each derivative.  The refinement that uses it: :mod:`amorgp.amortizer.stages.fisher`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.objective import (
    Derivative,
    LogMarginalLikelihood,
    dimension_sum,
    sum_products,
)
from amorgp.amortizer.stages.packed import pair_indices, unpack
from amorgp.kernel_grammar import ELEMENTARY, DimWiseStructure, base_symbol

if TYPE_CHECKING:
    from amorgp.amortizer.stages.constraints import KernelConstraints

__all__ = [
    "CHUNK_BYTES",
    "PLAIN_CHUNK_BYTES",
    "PROBES",
    "PROBE_POINTS",
    "PROBE_SEED",
    "SE_ARD",
    "BatchLogMarginalLikelihood",
]

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

PLAIN_CHUNK_BYTES = 8 * 2**20
""":data:`CHUNK_BYTES` of an evaluation without the Fisher information, which forms no
derivative matrix: its chunks of small rows are larger, the per-call overhead shared by
more rows (a fleet of 300 series of 80 points: 8 to 16 MiB fit 10 to 20 % faster than
2 MiB, the same results)."""


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
        self.upper, self.pair_of, self.weights = (
            self.packed.upper,
            self.packed.pair_of,
            self.packed.weights,
        )
        self._work: dict[str, Tensor] = {}
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
            self.R2 = torch.stack([self.r2[j] for j in order], 1)  # (B, D, P)
            self.r2 = {j: self.R2[:, t] for t, j in enumerate(order)}
            names = base_symbol("SE").param_names
            self.ls_at = [2 * t + names.index("lengthscale") for t in range(len(order))]
            self.var_at = [2 * t + names.index("variance") for t in range(len(order))]

    def _pairwise(self, X: Tensor, dims: list[int]) -> None:
        """The pairs' values of every input column in ``dims``, packed: each matrix is
        symmetric (or, ``r``, antisymmetric, and used only through even functions of it),
        so only its upper triangle with the diagonal is formed, ``(B, P)`` with ``P = n (n
        + 1) / 2`` (:attr:`pairs`): the element-wise work of an evaluation, most of it,
        halves.  The full matrices are formed once per evaluation, for the factorisation
        (``K``) and, with the Fisher information, the derivative matrices."""
        self.packed = pair_indices(X.shape[-2])
        self.pairs = (self.packed.rows, self.packed.cols)
        # (B, P, d) each; PER's form takes the points themselves and gathers by pairs
        xi, xj = X[:, self.packed.rows], X[:, self.packed.cols]
        self._column_pairs(xi, xj, {j: (X[..., j], X[..., j]) for j in dims})

    def _unpack(self, out: Tensor, packed: Tensor) -> Tensor:
        """Write the symmetric matrices of the pairs' values ``packed (..., P)`` into
        ``out (..., n, n)``; returns ``out``."""
        return unpack(out, packed, self.pair_of)

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
        matrices, which stay in cache (:data:`PLAIN_CHUNK_BYTES` of packed ones without
        the Fisher information).
        """
        if rows is None:
            rows = torch.arange(z.shape[0])
        cells = self.n * self.n if with_fisher else self.upper.numel()
        per = 8 * (self.index.numel() + 2) * cells
        size = max(1, (CHUNK_BYTES if with_fisher else PLAIN_CHUNK_BYTES) // per)
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
            parts: dict[int, list[tuple[Tensor, list[Derivative]]]] = {}
            if self.se_ard:
                K = self._se_ard_kernel(theta, sel)
                other: dict[int, Tensor | None] = {}
            else:
                i = 0
                for j, _, b in self.terms:  # a few addends
                    k = len(b.params)
                    v = theta[:, i : i + k].T[..., None]  # (k, B, 1)
                    parts.setdefault(j, []).append(self._addend_relative(j, b, v, i, sel))
                    i += k
                K, other = sum_products(
                    {j: dimension_sum([k for k, _ in lst]) for j, lst in parts.items()}
                )
            K = K.expand(B, -1)  # (B, P): the pairs' values
            A = self._unpack(K.new_empty(B, n, n), K)
            A.diagonal(dim1=-2, dim2=-1).add_(theta[:, -1, None])
            Lc, alpha, lml, ok = exact_solve(A, y)
            Ainv = torch.cholesky_inverse(Lc)
            # W = (alpha alpha^T - A^-1) / 2 in one pass; Wp its pairs, weighted so that
            # <Wp, M> over the pairs is <W, M> over the matrix for a symmetric M
            W = torch.baddbmm(Ainv, alpha[:, :, None], alpha[:, None, :], beta=-0.5, alpha=0.5)
            Wp = W.view(B, n * n).index_select(1, self.upper).mul_(self.weights)
            g_general = theta.new_zeros(B, len(general))
            U = self._workspace("U", (B, len(general), n, n)) if with_fisher else None
            if self.se_ard and general:
                g_general, U = self._se_ard_grads(theta, sel, K, Wp, general, U)
            for j, lst in parts.items():  # dimensions: <W prod_{i != j} S_i, dk / d theta>
                oj = other[j]
                Wj = Wp if oj is None else Wp * oj
                for k_a, derivs in lst:
                    used = [d for d in derivs if d.param in slot]
                    if not used:
                        continue
                    relative = any(d.scale is not None for d in used)
                    # relative derivatives: <Wj, s k M> = s <Wj k, M>, and the Fisher
                    # information's matrix s (k prod_{i != j} S_i) M
                    G = Wj * k_a if relative else None
                    Pk = k_a if U is None or oj is None else k_a * oj
                    for d in used:
                        at = slot[d.param]
                        if d.scale is None:
                            assert d.matrix is not None
                            dkb = d.matrix.expand_as(Wj)
                            g_general[:, at] = _dots(Wj, dkb)
                            if U is None:
                                continue
                            self._unpack(U[:, at], dkb if oj is None else dkb * oj)
                            continue
                        assert G is not None
                        sc = d.scale.expand(B, 1)
                        dot = G.sum(-1) if d.matrix is None else _dots(G, d.matrix)
                        g_general[:, at] = sc.reshape(B) * dot
                        if U is None:
                            continue
                        if d.matrix is None:
                            self._unpack(U[:, at], Pk * sc)
                        else:
                            self._unpack(U[:, at], (Pk * d.matrix).mul_(sc))
            g_k = _dots(Wp, K)
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
                    # (B, u + 2, n, n): A^-1 times each distinct derivative; A^-1 K =
                    # I - noise A^-1 (A = K + noise I): no product for the scales
                    u = U.shape[1]
                    M = self._workspace("M", (B, u + 2, n, n))
                    torch.matmul(Ainv[:, None], U, out=M[:, :u])
                    torch.mul(Ainv, -theta[:, -1, None, None], out=M[:, u])
                    M[:, u].diagonal(dim1=-2, dim2=-1).add_(1.0)
                    M[:, u + 1] = Ainv
                    Mt = self._workspace("Mt", M.shape)
                    Mt.copy_(M.transpose(-2, -1))
                    Fu = 0.5 * (M.flatten(2) @ Mt.flatten(2).transpose(1, 2))
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

    def _workspace(self, name: str, shape: tuple[int, ...]) -> Tensor:
        """A float64 buffer of ``shape`` kept for the next evaluation: the derivative
        matrices of the Fisher information and their products with ``A^-1`` are the
        largest temporaries of an evaluation (``3 (u + 2) n^2`` numbers), and allocated
        afresh each time they come from the system zeroed, a page fault per 4 KiB (above
        glibc's mmap threshold: every time).  Its content is overwritten by each use."""
        need = math.prod(shape)
        buf = self._work.get(name)
        if buf is None or buf.numel() < need:
            buf = torch.empty(need, dtype=torch.float64)
            self._work[name] = buf
        return buf[:need].view(shape)

    def _se_ard_kernel(self, theta: Tensor, sel: Tensor | slice) -> Tensor:
        """``K`` of an ARD SE kernel, the pairs' values ``(B, P)``: ``prod_j s_j^2
        exp(-sum_j r_j^2 / 2 l_j^2)``, the sum one batched product over the stacked
        squared differences."""
        R2 = self.R2[sel]  # (B, D, P)
        coef = -0.5 / theta[:, self.ls_at].square()  # (B, D)
        E = (coef[:, None, :] @ R2)[:, 0]
        return E.exp_().mul_(theta[:, self.var_at].prod(1)[:, None])

    def _se_ard_grads(
        self,
        theta: Tensor,
        sel: Tensor | slice,
        K: Tensor,
        Wp: Tensor,
        general: list[int],
        U: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        """The lengthscales' gradient ``<W, K r_j^2> / l_j^3`` (``(B, u)``, in the order of
        ``general``, all lengthscales; ``K`` and the weighted ``Wp`` the pairs' values) and,
        written into ``U`` (``(B, u, n, n)``) where given, their derivative matrices ``K
        r_j^2 / l_j^3``."""
        R2 = self.R2[sel]
        D = R2.shape[1]
        pos = [self.ls_at.index(a) for a in general]
        inv3 = theta[:, general].pow(-3)  # (B, u)
        R2u = R2 if pos == list(range(D)) else R2[:, pos]
        g = (R2u @ (Wp * K)[:, :, None])[..., 0] * inv3
        if U is None:
            return g, None
        self._unpack(U, (R2u * K[:, None]).mul_(inv3[:, :, None]))
        return g, U

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


def _dots(a: Tensor, b: Tensor) -> Tensor:
    """``sum(a * b)`` over the trailing axes of ``a`` (``(B, P)`` packed pairs, or ``(B,
    n, n)``) and ``b`` (broadcast): one BLAS dot for one row, else a batched dot (a
    batched matrix product of ``1 x P`` by ``P x 1`` pays a call per row)."""
    B = a.shape[0]
    bb = b.expand_as(a)
    if B == 1:
        return (a.reshape(1, 1, -1) @ bb.reshape(1, -1, 1)).reshape(1)
    return torch.linalg.vecdot(a.reshape(B, -1), bb.reshape(B, -1))


def _probed_fisher(Lc: Tensor, U: Tensor, noise: Tensor) -> Tensor:
    """The Fisher information of the distinct derivative matrices ``[U_1..U_u, K, I]``
    (``(B, u + 2, u + 2)``) by :data:`PROBES` Rademacher probes ``z``, in the symmetric
    form: with ``A = L L^T`` (``Lc`` the factor) and ``V_p = L^-1 D_p L^-T`` (symmetric),
    ``tr(A^-1 D_p A^-1 D_q) = tr(V_p V_q) ~ mean_z (V_p z)^T (V_q z)`` (Hutchinson).  The
    estimate is a Gram matrix, so positive semi-definite like the exact information, and
    costs one product of each ``U`` with an ``n x PROBES`` block and one triangular solve
    of all of them, against ``u`` products of ``n x n`` matrices exactly.  The probes are
    drawn from a generator of fixed seed: the same rows give the same estimate.  ``K`` and
    ``I`` need no product (``L^-1 K L^-T = I - noise L^-1 L^-T``)."""
    B, u, n, _ = U.shape
    gen = torch.Generator().manual_seed(PROBE_SEED)
    Z = torch.randint(0, 2, (n, PROBES), generator=gen).to(U) * 2.0 - 1.0
    Z = Z.expand(B, n, PROBES)
    Y = torch.linalg.solve_triangular(Lc.transpose(-2, -1), Z, upper=True)  # L^-T z
    VI = torch.linalg.solve_triangular(Lc, Y, upper=False)  # V_I z
    VK = Z - noise[:, None, None] * VI  # V_K z
    UY = (U @ Y[:, None]).permute(0, 2, 1, 3).reshape(B, n, u * PROBES)
    Vg = torch.linalg.solve_triangular(Lc, UY, upper=False)
    V = torch.cat(
        [Vg.reshape(B, n, u, PROBES).permute(0, 2, 1, 3), VK[:, None], VI[:, None]], 1
    ).flatten(2)
    Fu = (0.5 / PROBES) * (V @ V.transpose(1, 2))
    return 0.5 * (Fu + Fu.transpose(1, 2))
