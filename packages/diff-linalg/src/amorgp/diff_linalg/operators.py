"""Differentiable linear-algebra operators of Seeger et al., "Auto-differentiating linear algebra".

Each operator is a :class:`torch.autograd.Function` with an explicit ``backward``
implementing the adjoint formulas of the paper (Murray's formula for the
Cholesky factor), batched over any leading dimensions, for float32 and float64
on CPU and CUDA.  The backward passes are written with differentiable torch
operations, so second derivatives (``gradgradcheck``) are available too.

Notation: ``tril`` keeps the lower triangle with the diagonal,
``Phi(X) = tril(X) - diag(X)/2``, ``sym(X) = (X + X^T)/2``, ``Xbar`` is the
adjoint (gradient of the loss) of ``X``.  Triangular factors ``L`` are lower
triangular; their upper triangles are ignored on input and get zero gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from amorgp.diff_linalg import _adjoints
from amorgp.diff_linalg._validation import check_square, check_tensor

__all__ = [
    "EighResult",
    "LQResult",
    "copyltu",
    "gelqf",
    "gemm2",
    "potrf",
    "potri",
    "sumlogdiag",
    "syevd",
    "syrk",
    "trmm",
    "trsm",
]


# --------------------------------------------------------------------------- potrf
class _Potrf(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor) -> Any:
        L, info = torch.linalg.cholesky_ex(A)
        if bool((info != 0).any()):
            bad = int((info != 0).sum())
            raise ValueError(
                f"potrf: {bad} matrix(ces) in the batch are not positive definite; "
                "use robust_cholesky for per-element jitter"
            )
        ctx.save_for_backward(L)
        return L

    @staticmethod
    def backward(ctx: Any, gL: torch.Tensor) -> Any:
        (L,) = ctx.saved_tensors
        return _adjoints.potrf_backward(L, gL)


def potrf(A: torch.Tensor) -> torch.Tensor:
    """Cholesky factor ``L`` (lower, positive diagonal) with ``A = L L^T``.

    Backward (Murray's formula): ``Abar = sym(L^{-T} Phi(L^T Lbar) L^{-1})``.

    Args:
        A: symmetric positive definite matrices, shape ``(..., n, n)``; only the
            lower triangle is read.

    Returns:
        ``L`` of shape ``(..., n, n)``.

    Raises:
        ValueError: if ``A`` is not square or a matrix is not positive definite.
    """
    return _Potrf.apply(check_square(A, "A"))


# --------------------------------------------------------------------------- trsm
def _check_tri(L: torch.Tensor, B: torch.Tensor, rightside: bool, name: str) -> None:
    check_square(L, "L")
    check_tensor(B, "B", min_dim=2)
    n = L.shape[-1]
    k = B.shape[-1] if rightside else B.shape[-2]
    if k != n:
        side = "columns" if rightside else "rows"
        raise ValueError(
            f"{name}: B must have {n} {side} to match L {tuple(L.shape)}, got {tuple(B.shape)}"
        )
    if L.dtype != B.dtype:
        raise ValueError(f"{name}: L and B must have the same dtype, got {L.dtype} and {B.dtype}")


def _reduce_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum a broadcast gradient back to ``shape``."""
    if grad.shape == shape:
        return grad
    extra = grad.dim() - len(shape)
    if extra > 0:
        grad = grad.sum(dim=tuple(range(extra)))
    dims = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
    if dims:
        grad = grad.sum(dim=dims, keepdim=True)
    return grad


def _factor_adjoint(
    P: torch.Tensor, Q: torch.Tensor, transpose: bool, rightside: bool
) -> torch.Tensor:
    """The adjoint of ``L`` (before ``tril``) in ``op(L) B`` or ``B op(L)`` products.

    ``P Q^T``, ``Q P^T``, ``Q^T P`` or ``P^T Q`` for the four cases (left, left-transposed,
    right, right-transposed), where ``P`` is the adjoint-side factor (``Y`` of a solve,
    ``Xbar`` of a multiply) and ``Q`` the other operand (``X`` of a solve, ``B`` of a
    multiply).
    """
    if rightside:
        return P.mT @ Q if transpose else Q.mT @ P
    return Q @ P.mT if transpose else P @ Q.mT


class _Trsm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, L: torch.Tensor, B: torch.Tensor, transpose: bool, rightside: bool, alpha: float
    ) -> Any:
        Lt = L.tril()
        op = Lt.mT if transpose else Lt
        X = alpha * torch.linalg.solve_triangular(op, B, upper=transpose, left=not rightside)
        ctx.save_for_backward(L, X)
        ctx.opts = (transpose, rightside, alpha, L.shape, B.shape)
        return X

    @staticmethod
    def backward(ctx: Any, gX: torch.Tensor) -> Any:
        L, X = ctx.saved_tensors
        transpose, rightside, alpha, l_shape, b_shape = ctx.opts
        Lt = L.tril()
        # Y = op(L)^{-T} Xbar (left) or Xbar op(L)^{-T} (right)
        op_t = Lt if transpose else Lt.mT
        Y = torch.linalg.solve_triangular(op_t, gX, upper=not transpose, left=not rightside)
        gL = None
        if ctx.needs_input_grad[0]:
            gL = _reduce_to(-_factor_adjoint(Y, X, transpose, rightside).tril(), l_shape)
        gB = _reduce_to(alpha * Y, b_shape) if ctx.needs_input_grad[1] else None
        return gL, gB, None, None, None


def trsm(
    L: torch.Tensor,
    B: torch.Tensor,
    *,
    transpose: bool = False,
    rightside: bool = False,
    alpha: float = 1.0,
) -> torch.Tensor:
    """Triangular solve ``X = alpha op(L)^{-1} B`` (or ``alpha B op(L)^{-1}`` with ``rightside``).

    ``op(L) = L^T`` if ``transpose`` else ``L``.  With ``Y = op(L)^{-T} Xbar``
    (left) or ``Y = Xbar op(L)^{-T}`` (right), the adjoints are
    ``Bbar = alpha Y`` and ``Lbar = -tril(Y X^T)``, ``-tril(X Y^T)``,
    ``-tril(X^T Y)``, ``-tril(Y^T X)`` for the four cases
    (left, left-transposed, right, right-transposed).

    Args:
        L: lower triangular, shape ``(..., n, n)``, non-zero diagonal.
        B: right-hand sides, shape ``(..., n, k)`` (left) or ``(..., k, n)`` (right).
        transpose: use ``L^T``.
        rightside: solve ``X op(L) = alpha B``.
        alpha: scalar factor (non-zero).

    Returns:
        ``X`` with the shape of ``B`` (batch dimensions broadcast).
    """
    _check_tri(L, B, rightside, "trsm")
    if alpha == 0:
        raise ValueError("trsm: alpha must be non-zero")
    return _Trsm.apply(L, B, transpose, rightside, float(alpha))


# --------------------------------------------------------------------------- trmm
class _Trmm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, L: torch.Tensor, B: torch.Tensor, transpose: bool, rightside: bool, alpha: float
    ) -> Any:
        Lt = L.tril()
        op = Lt.mT if transpose else Lt
        X = alpha * (B @ op if rightside else op @ B)
        ctx.save_for_backward(L, B)
        ctx.opts = (transpose, rightside, alpha, L.shape, B.shape)
        return X

    @staticmethod
    def backward(ctx: Any, gX: torch.Tensor) -> Any:
        L, B = ctx.saved_tensors
        transpose, rightside, alpha, l_shape, b_shape = ctx.opts
        Lt = L.tril()
        gL = gB = None
        if ctx.needs_input_grad[0]:
            g = _factor_adjoint(gX, B, transpose, rightside)
            gL = _reduce_to(alpha * g.tril(), l_shape)
        if ctx.needs_input_grad[1]:
            op_t = Lt if transpose else Lt.mT
            gB = _reduce_to(alpha * (gX @ op_t if rightside else op_t @ gX), b_shape)
        return gL, gB, None, None, None


def trmm(
    L: torch.Tensor,
    B: torch.Tensor,
    *,
    transpose: bool = False,
    rightside: bool = False,
    alpha: float = 1.0,
) -> torch.Tensor:
    """Triangular multiply ``X = alpha op(L) B`` (or ``alpha B op(L)`` with ``rightside``).

    Adjoints: ``Bbar = alpha op(L)^T Xbar`` (left) or ``alpha Xbar op(L)^T``
    (right); ``Lbar = alpha tril(Xbar B^T)``, ``alpha tril(B Xbar^T)``,
    ``alpha tril(B^T Xbar)``, ``alpha tril(Xbar^T B)`` for the four cases
    (left, left-transposed, right, right-transposed).

    Args:
        L: lower triangular, shape ``(..., n, n)``.
        B: shape ``(..., n, k)`` (left) or ``(..., k, n)`` (right).
        transpose: use ``L^T``.
        rightside: multiply from the right.
        alpha: scalar factor.

    Returns:
        ``X`` with the shape of ``B`` (batch dimensions broadcast).
    """
    _check_tri(L, B, rightside, "trmm")
    return _Trmm.apply(L, B, transpose, rightside, float(alpha))


# --------------------------------------------------------------------------- gemm2
class _Gemm2(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, A: torch.Tensor, B: torch.Tensor, ta: bool, tb: bool, alpha: float
    ) -> Any:
        opA = A.mT if ta else A
        opB = B.mT if tb else B
        ctx.save_for_backward(A, B)
        ctx.opts = (ta, tb, alpha)
        return alpha * (opA @ opB)

    @staticmethod
    def backward(ctx: Any, gC: torch.Tensor) -> Any:
        A, B = ctx.saved_tensors
        ta, tb, alpha = ctx.opts
        opA = A.mT if ta else A
        opB = B.mT if tb else B
        gA = gB = None
        if ctx.needs_input_grad[0]:
            g = alpha * (gC @ opB.mT)  # adjoint of op(A)
            gA = _reduce_to(g.mT if ta else g, A.shape)
        if ctx.needs_input_grad[1]:
            g = alpha * (opA.mT @ gC)
            gB = _reduce_to(g.mT if tb else g, B.shape)
        return gA, gB, None, None, None


def gemm2(
    A: torch.Tensor,
    B: torch.Tensor,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    alpha: float = 1.0,
) -> torch.Tensor:
    """General matrix product ``C = alpha op(A) op(B)``.

    Adjoints: ``op(A)bar = alpha Cbar op(B)^T``, ``op(B)bar = alpha op(A)^T Cbar``.

    Args:
        A: shape ``(..., m, k)`` (``(..., k, m)`` if ``transpose_a``).
        B: shape ``(..., k, n)`` (``(..., n, k)`` if ``transpose_b``).
        transpose_a, transpose_b: transpose the operand.
        alpha: scalar factor.

    Returns:
        ``C`` of shape ``(..., m, n)``.
    """
    check_tensor(A, "A", min_dim=2)
    check_tensor(B, "B", min_dim=2)
    ka = A.shape[-2] if transpose_a else A.shape[-1]
    kb = B.shape[-1] if transpose_b else B.shape[-2]
    if ka != kb:
        raise ValueError(
            f"gemm2: inner dimensions differ ({ka} and {kb}) for A {tuple(A.shape)}, B {tuple(B.shape)}"
        )
    return _Gemm2.apply(A, B, transpose_a, transpose_b, float(alpha))


# --------------------------------------------------------------------------- syrk
class _Syrk(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor, transpose: bool, alpha: float) -> Any:
        ctx.save_for_backward(A)
        ctx.opts = (transpose, alpha)
        return alpha * (A.mT @ A if transpose else A @ A.mT)

    @staticmethod
    def backward(ctx: Any, gB: torch.Tensor) -> Any:
        (A,) = ctx.saved_tensors
        transpose, alpha = ctx.opts
        s = gB + gB.mT
        return alpha * (A @ s if transpose else s @ A), None, None


def syrk(A: torch.Tensor, *, transpose: bool = False, alpha: float = 1.0) -> torch.Tensor:
    """Symmetric rank-k update ``B = alpha A A^T`` (``alpha A^T A`` with ``transpose``).

    Adjoint: ``Abar = alpha (Bbar + Bbar^T) A`` (``alpha A (Bbar + Bbar^T)``).

    Args:
        A: shape ``(..., m, k)``.
        transpose: compute ``A^T A``.
        alpha: scalar factor.

    Returns:
        ``B`` of shape ``(..., m, m)`` (``(..., k, k)`` with ``transpose``).
    """
    check_tensor(A, "A", min_dim=2)
    return _Syrk.apply(A, transpose, float(alpha))


# --------------------------------------------------------------------------- potri
class _Potri(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, L: torch.Tensor) -> Any:
        C = torch.cholesky_inverse(L.tril())
        ctx.save_for_backward(L, C)
        return C

    @staticmethod
    def backward(ctx: Any, gC: torch.Tensor) -> Any:
        L, C = ctx.saved_tensors
        Lt = L.tril()
        # -C (Cbar + Cbar^T) L^{-T}
        M = C @ (gC + gC.mT)
        gL = -torch.linalg.solve_triangular(Lt.mT, M, upper=True, left=False)
        return gL.tril()


def potri(L: torch.Tensor) -> torch.Tensor:
    """Inverse ``A^{-1} = L^{-T} L^{-1}`` of ``A = L L^T`` from its Cholesky factor.

    Adjoint: ``Lbar = -tril(A^{-1} (Cbar + Cbar^T) L^{-T})`` with ``C = A^{-1}``.

    Args:
        L: lower Cholesky factors, shape ``(..., n, n)``, non-zero diagonal.

    Returns:
        ``A^{-1}`` of shape ``(..., n, n)``.
    """
    return _Potri.apply(check_square(L, "L"))


# --------------------------------------------------------------------------- sumlogdiag
class _SumLogDiag(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor) -> Any:
        ctx.save_for_backward(A)
        return A.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        (A,) = ctx.saved_tensors
        return torch.diag_embed(g.unsqueeze(-1) / A.diagonal(dim1=-2, dim2=-1))


def sumlogdiag(A: torch.Tensor) -> torch.Tensor:
    """``sum_i log A_ii`` (half the log-determinant of ``L L^T`` for a Cholesky factor ``L``).

    Adjoint: ``Abar = diag(gbar / diag(A))``.

    Args:
        A: square matrices with positive diagonal, shape ``(..., n, n)``.

    Returns:
        Shape ``(...)``.
    """
    return _SumLogDiag.apply(check_square(A, "A"))


# --------------------------------------------------------------------------- copyltu
class _CopyLTU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor) -> Any:
        return _adjoints.copyltu(A)

    @staticmethod
    def backward(ctx: Any, gB: torch.Tensor) -> Any:
        return gB.tril() + gB.triu(1).mT


def copyltu(A: torch.Tensor) -> torch.Tensor:
    """Symmetric matrix ``B`` with ``B_ij = A_max(i,j),min(i,j)`` (lower triangle copied up).

    Adjoint: ``Abar = tril(Bbar) + triu(Bbar, 1)^T``.

    Args:
        A: square matrices, shape ``(..., n, n)``.

    Returns:
        ``B`` of shape ``(..., n, n)``.
    """
    return _CopyLTU.apply(check_square(A, "A"))


# --------------------------------------------------------------------------- gelqf


# the decompositions live in their own module; re-exported here (one operator namespace)
from amorgp.diff_linalg.decompositions import EighResult, LQResult, gelqf, syevd  # noqa: E402
