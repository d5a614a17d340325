"""Preconditioned conjugate gradients for ``A = K + sigma^2 I``, the building blocks of
:class:`~amorgp.lazy_kernels.solvers.CGSolver` and the lazy solvers.

With ``A = K + sigma^2 I``, batched preconditioned conjugate
gradients (:func:`pcg`) solve ``A X = B`` using only matvecs; the preconditioner
``P = L_r L_r^T + sigma^2 I`` (:class:`PivotedCholeskyPreconditioner`) comes from a
rank-``r`` pivoted Cholesky of ``K`` (:func:`pivoted_cholesky`) and is applied by
Woodbury; stochastic Lanczos quadrature (:func:`slq_logdet`) estimates ``log det A`` from
the same CG run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "PivotedCholeskyPreconditioner",
    "pcg",
    "pcg_residual",
    "pivoted_cholesky",
    "slq_logdet",
]


def pivoted_cholesky(
    diag: Tensor, column: Callable[[int], Tensor], rank: int, tol: float = 1e-8
) -> Tensor:
    """Rank-``r`` partial pivoted Cholesky ``K ~ L L^T`` (Harbrecht et al. 2012).

    Args:
        diag: ``(n,)`` diagonal of ``K``.
        column: ``i -> K[:, i]`` ``(n,)``.
        rank: maximal rank ``r``.
        tol: stop when the trace of the remainder falls below ``tol * trace(K)``.

    Returns:
        ``L (n, r')`` with ``r' <= rank``.
    """
    n = diag.shape[0]
    d = diag.clone()
    L = torch.zeros(n, min(rank, n), dtype=diag.dtype, device=diag.device)
    total = float(d.sum())
    m = 0
    for m in range(min(rank, n)):
        i = int(torch.argmax(d))
        if float(d[i]) <= 0 or float(d.clamp_min(0).sum()) <= tol * total:
            break
        col = column(i) - L[:, :m] @ L[i, :m]
        L[:, m] = col / math.sqrt(float(d[i]))
        d = d - L[:, m] ** 2
        d[i] = 0.0
    else:
        m = min(rank, n)
    return L[:, :m]


@dataclass
class PivotedCholeskyPreconditioner:
    """``P = L L^T + D`` with ``L (n, r)`` and the diagonal ``D = sigma^2 + residual``;
    solves, log-determinant and probes by Woodbury.

    ``residual`` (``(n,)``, non-negative; default none) is the diagonal of ``K - L L^T``
    the rank-``r`` factor leaves out.  Putting it back keeps ``P^{-1} A`` near the
    identity where ``K``'s spectrum decays slowly (many inputs, short lengthscales) and
    the noise is small: there ``sigma^2`` alone leaves the unexplained directions scaled
    by ``lambda / sigma^2``, so CG needs many iterations and the SLQ log-determinant a
    large variance (measured in docs/benchmarks/lazy-kernels.md, section 9).
    """

    L: Tensor
    noise: Tensor
    residual: Tensor | None = None

    def __post_init__(self) -> None:
        n, r = self.L.shape
        d = self.noise.expand(n)
        if self.residual is not None:
            d = d + self.residual.clamp_min(0.0)
        self._d = d
        inner = torch.eye(r, dtype=self.L.dtype, device=self.L.device)
        inner = inner + self.L.T @ (self.L / d[:, None])
        self._chol = torch.linalg.cholesky(inner)

    @property
    def diagonal(self) -> Tensor:
        """``D`` (``(n,)``)."""
        return self._d

    def solve(self, V: Tensor) -> Tensor:
        """``P^{-1} V`` for ``V (n, k)``: ``D^-1 (V - L (I + L^T D^-1 L)^{-1} L^T D^-1 V)``."""
        Vd = V / self._d[:, None]
        if self.L.shape[1] == 0:
            return Vd
        w = torch.cholesky_solve(self.L.T @ Vd, self._chol)
        return Vd - (self.L @ w) / self._d[:, None]

    def quad(self, V: Tensor) -> Tensor:
        """``diag(V^T P^{-1} V)`` ``(k,)`` for ``V (n, k)``, with one ``(n, k)`` temporary:
        ``sum V^2 / D - ||C^{-1} L^T D^-1 V||^2`` (``C C^T = I + L^T D^-1 L``)."""
        Vd = V / self._d[:, None]
        U = self.L.T @ Vd
        out = Vd.mul_(V).sum(0)
        if self.L.shape[1] == 0:
            return out
        S = torch.linalg.solve_triangular(self._chol, U, upper=False)
        return out - (S * S).sum(0)

    def logdet(self) -> Tensor:
        """``log det P = sum log D + log det(I + L^T D^-1 L)``."""
        return torch.log(self._d).sum() + 2.0 * torch.log(torch.diagonal(self._chol)).sum()

    def sample(self, t: int, generator: torch.Generator) -> Tensor:
        """``t`` probes ``z ~ N(0, P)``, ``(n, t)``: ``L e1 + D^1/2 e2``."""
        n, r = self.L.shape
        e1 = torch.randn(r, t, generator=generator, dtype=self.L.dtype).to(self.L.device)
        e2 = torch.randn(n, t, generator=generator, dtype=self.L.dtype).to(self.L.device)
        return self.L @ e1 + torch.sqrt(self._d)[:, None] * e2


def pcg(
    matvec: Callable[[Tensor], Tensor],
    B: Tensor,
    precond: Callable[[Tensor], Tensor],
    tol: float = 1e-8,
    max_iter: int = 1000,
) -> tuple[Tensor, Tensor, Tensor, int]:
    """Batched preconditioned conjugate gradients for ``A X = B`` (``A`` s.p.d.).

    All columns iterate together; converged columns are frozen.

    Args:
        matvec: ``V (n, k) -> A V``.
        B: right-hand sides ``(n, k)``.
        precond: ``V -> P^{-1} V``.
        tol: stop when every ``||r_j|| <= tol ||b_j||``.
        max_iter: iteration cap.

    Returns:
        ``(X (n, k), alphas (it, k), betas (it, k), it)``: CG step sizes and
        direction coefficients of every iteration (0 once a column has converged),
        from which :func:`slq_logdet` rebuilds the Lanczos tridiagonal matrices.
    """
    X, _, alphas, betas = _pcg(matvec, B, precond, tol, max_iter)
    return X, torch.stack(alphas), torch.stack(betas), len(alphas)


def pcg_residual(
    matvec: Callable[[Tensor], Tensor],
    B: Tensor,
    precond: Callable[[Tensor], Tensor],
    tol: float = 1e-8,
    max_iter: int = 1000,
) -> tuple[Tensor, Tensor, int]:
    """:func:`pcg`'s solution with its residual: ``(X (n, k), R = B - A X (n, k), it)``.

    The residual is CG's own recurrence (no extra matvec); with it a symmetric form
    ``B^T A^{-1} B`` is estimated to second order in the error of ``X``:
    ``B^T X + X^T R`` (``= X^T B + B^T X - X^T A X``)."""
    X, R, alphas, _ = _pcg(matvec, B, precond, tol, max_iter)
    return X, R, len(alphas)


def _pcg(
    matvec: Callable[[Tensor], Tensor],
    B: Tensor,
    precond: Callable[[Tensor], Tensor],
    tol: float,
    max_iter: int,
) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
    """The CG iteration of :func:`pcg`: ``(X, R, alphas, betas)``."""
    X = torch.zeros_like(B)
    R = B.clone()
    Z = precond(R)
    Pd = Z.clone()
    rz = (R * Z).sum(0)
    bnorm = B.norm(dim=0).clamp_min(torch.finfo(B.dtype).tiny)
    active = torch.ones(B.shape[1], dtype=torch.bool, device=B.device)
    alphas: list[Tensor] = []
    betas: list[Tensor] = []
    for _ in range(max_iter):
        AP = matvec(Pd)
        pap = (Pd * AP).sum(0)
        alpha = torch.where(active, rz / pap, torch.zeros_like(rz))
        X = X + alpha * Pd
        R = R - alpha * AP
        Z = precond(R)
        rz_new = (R * Z).sum(0)
        beta = torch.where(active, rz_new / rz, torch.zeros_like(rz))
        alphas.append(alpha)
        betas.append(beta)
        Pd = Z + beta * Pd
        rz = torch.where(active, rz_new, rz)
        active = active & (R.norm(dim=0) > tol * bnorm)
        if not bool(active.any()):
            break
    return X, R, alphas, betas


def slq_logdet(alphas: Tensor, betas: Tensor, weights: Tensor) -> Tensor:
    """Stochastic Lanczos quadrature estimate of ``log det`` of the preconditioned matrix.

    Rebuilds, per probe, the Lanczos tridiagonal ``T`` from CG coefficients
    (``T_jj = 1/a_j + b_{j-1}/a_{j-1}``, ``T_{j,j+1} = sqrt(b_j)/a_j``) and returns
    ``mean_i weights_i e_1^T log(T_i) e_1``.

    Args:
        alphas: ``(it, t)`` CG step sizes (0 after convergence).
        betas: ``(it, t)`` CG direction coefficients.
        weights: ``(t,)`` squared probe norms in the preconditioned metric ``z^T P^{-1} z``.
    """
    out = []
    for j in range(alphas.shape[1]):
        a = alphas[:, j]
        m = int((a != 0).sum())
        a, b = a[:m], betas[:m, j]
        diag = 1.0 / a
        diag[1:] = diag[1:] + b[:-1] / a[:-1]
        off = torch.sqrt(b[:-1].clamp_min(0)) / a[:-1]
        T = torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1)
        evals, evecs = torch.linalg.eigh(T)
        out.append(weights[j] * (evecs[0] ** 2 * torch.log(evals.clamp_min(1e-300))).sum())
    return torch.stack(out).mean()
