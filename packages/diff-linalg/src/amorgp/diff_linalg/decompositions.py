"""The decomposition operators of :mod:`amorgp.diff_linalg.operators`: LQ (``gelqf``) and the
symmetric eigendecomposition (``syevd``), with explicit backward formulas (Seeger et al.).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from amorgp.diff_linalg import _adjoints
from amorgp.diff_linalg._validation import check_square, check_tensor

__all__ = ["EighResult", "LQResult", "gelqf", "syevd"]


class LQResult(NamedTuple):
    """``A = L Q`` with ``L (..., m, m)`` lower triangular (positive diagonal), ``Q (..., m, n)``."""

    L: torch.Tensor
    Q: torch.Tensor


class _Gelqf(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor) -> Any:
        q, r = torch.linalg.qr(A.mT, mode="reduced")  # A^T = q r, A = r^T q^T
        s = torch.sign(r.diagonal(dim1=-2, dim2=-1))
        s = torch.where(s == 0, torch.ones_like(s), s)
        L = r.mT * s.unsqueeze(-2)
        Q = q.mT * s.unsqueeze(-1)
        ctx.save_for_backward(L, Q)
        return L, Q

    @staticmethod
    def backward(ctx: Any, gL: torch.Tensor, gQ: torch.Tensor) -> Any:
        L, Q = ctx.saved_tensors
        M = L.mT @ gL.tril() - gQ @ Q.mT
        rhs = gQ + _adjoints.copyltu(M) @ Q
        return torch.linalg.solve_triangular(L.mT, rhs, upper=True)


def gelqf(A: torch.Tensor) -> LQResult:
    """LQ factorisation ``A = L Q`` of full-rank ``A`` with ``m <= n``.

    ``L`` is lower triangular with a positive diagonal and ``Q Q^T = I``.
    Adjoint: ``Abar = L^{-T} (Qbar + copyltu(M) Q)`` with
    ``M = L^T Lbar - Qbar Q^T``.

    Args:
        A: shape ``(..., m, n)``, ``m <= n``, full row rank.

    Returns:
        :class:`LQResult` ``(L (..., m, m), Q (..., m, n))``.

    Raises:
        ValueError: if ``m > n``.
    """
    check_tensor(A, "A", min_dim=2)
    if A.shape[-2] > A.shape[-1]:
        raise ValueError(f"gelqf needs m <= n, got A of shape {tuple(A.shape)}")
    L, Q = _Gelqf.apply(A)
    return LQResult(L, Q)


# --------------------------------------------------------------------------- syevd
class EighResult(NamedTuple):
    """``A = U diag(lam) U^T``: eigenvectors ``U (..., n, n)`` as columns, ``lam (..., n)`` ascending."""

    U: torch.Tensor
    lam: torch.Tensor


class _Syevd(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor, gap_tol: float) -> Any:
        lam, U = torch.linalg.eigh(A)
        # sign rule: the entry of largest magnitude of each eigenvector is positive
        idx = U.abs().argmax(dim=-2, keepdim=True)
        s = torch.sign(torch.gather(U, -2, idx))
        s = torch.where(s == 0, torch.ones_like(s), s)
        U = U * s
        ctx.save_for_backward(U, lam)
        ctx.gap_tol = gap_tol
        return U, lam

    @staticmethod
    def backward(ctx: Any, gU: torch.Tensor, glam: torch.Tensor) -> Any:
        U, lam = ctx.saved_tensors
        gap = lam.unsqueeze(-2) - lam.unsqueeze(-1)  # gap_ij = lam_j - lam_i
        tol = ctx.gap_tol * lam.abs().amax(-1, keepdim=True).clamp_min(1.0).unsqueeze(-1)
        F = torch.sign(gap) / torch.maximum(gap.abs(), tol)
        inner = torch.diag_embed(glam) + F * (U.mT @ gU)
        return _adjoints.sym(U @ inner @ U.mT), None


def syevd(A: torch.Tensor, *, gap_tol: float | None = None) -> EighResult:
    """Symmetric eigendecomposition ``A = U diag(lam) U^T`` with a deterministic sign.

    Eigenvalues are ascending; each eigenvector (column of ``U``) has its entry
    of largest magnitude positive.  Adjoint::

        Abar = sym(U (diag(lambar) + F o (U^T Ubar)) U^T),
        F_ij = sign(lam_j - lam_i) / max(|lam_j - lam_i|, tau),

    with ``tau = gap_tol * max(1, max_i |lam_i|)`` (``F_ii = 0``).  The
    clamp keeps the gradient finite when eigenvalues are (nearly) repeated;
    exactly repeated eigenvalues contribute no eigenvector term.

    Args:
        A: symmetric matrices, shape ``(..., n, n)`` (lower triangle read).
        gap_tol: relative gap clamp (default ``sqrt(machine epsilon)`` of the dtype).

    Returns:
        :class:`EighResult` ``(U (..., n, n), lam (..., n))``.
    """
    A = check_square(A, "A")
    tol = float(torch.finfo(A.dtype).eps) ** 0.5 if gap_tol is None else float(gap_tol)
    if tol < 0:
        raise ValueError(f"gap_tol must be non-negative, got {gap_tol}")
    U, lam = _Syevd.apply(A, tol)
    return EighResult(U, lam)
