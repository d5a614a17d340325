"""Adjoint (backward) formulas shared by several operators.

All formulas follow Seeger et al., "Auto-differentiating linear algebra" (2017),
written with differentiable torch operations so that second derivatives
(``gradgradcheck``) are available by differentiating the backward itself.
"""

from __future__ import annotations

import torch


def phi(x: torch.Tensor) -> torch.Tensor:
    """``Phi(X)``: lower triangle of ``X`` with the diagonal halved, shape ``(..., n, n)``."""
    return x.tril() - 0.5 * torch.diag_embed(x.diagonal(dim1=-2, dim2=-1))


def sym(x: torch.Tensor) -> torch.Tensor:
    """``sym(X) = (X + X^T) / 2``."""
    return 0.5 * (x + x.mT)


def copyltu(x: torch.Tensor) -> torch.Tensor:
    """Symmetric matrix whose lower triangle (with diagonal) is that of ``x``."""
    low = x.tril()
    return low + low.mT.triu(1)


def potrf_backward(L: torch.Tensor, gL: torch.Tensor) -> torch.Tensor:
    """Murray's formula for the Cholesky adjoint.

    With ``A = L L^T``::

        Abar = sym(L^{-T} Phi(L^T tril(Lbar)) L^{-1})

    Args:
        L: lower Cholesky factor, shape ``(..., n, n)``.
        gL: adjoint of ``L``, shape ``(..., n, n)`` (its upper triangle is ignored).

    Returns:
        The symmetric adjoint ``Abar`` of shape ``(..., n, n)``.
    """
    p = phi(L.mT @ gL.tril())
    z = torch.linalg.solve_triangular(L.mT, p, upper=True)  # L^{-T} P
    ga = torch.linalg.solve_triangular(L, z, upper=False, left=False)  # (L^{-T} P) L^{-1}
    return sym(ga)
