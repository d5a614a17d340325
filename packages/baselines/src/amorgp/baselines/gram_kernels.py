"""Kernels of Gram matrices: the nonlinearities of a deep kernel process.

A deep kernel process transforms Gram matrices, not features.  A kernel whose value
depends on features ``x`` only through inner products can be evaluated from the Gram
matrix ``G_ab = x_a . x_b`` alone:

* squared distances ``R_ab = G_aa - 2 G_ab + G_bb`` (:func:`squared_distances`);
* ``SE``: ``k = s^2 exp(-R / (2 l^2))``;
* ``MAT52``: ``k = s^2 (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``, ``r = sqrt(R) / l``;
* ``RELU``, the arc-cosine kernel of order 1 (Cho & Saul 2009), the covariance of
  ``sqrt(2) relu(w . x)`` for ``w ~ N(0, I)``:
  ``k = s^2 / pi (sqrt(G_aa G_bb - G_ab^2) + (pi - theta) G_ab)``,
  ``cos theta = G_ab / sqrt(G_aa G_bb)``; it keeps the diagonal (``k_aa = s^2 G_aa``)
  and is homogeneous, so it has no lengthscale (``l`` is ignored).  Its first
  derivatives are attached in closed form (the singular terms of the naive expression
  cancel at ``theta = 0``); second derivatives are not supported.

Every kernel is evaluated on blocks, so that only what a sparse method needs is ever
formed: the diagonal of a block is ``diag(G)`` and a cross block needs the two
diagonals ``G_aa (..., A)``, ``G_bb (..., B)`` and the cross Gram ``G_ab (..., A, B)``.
Applying a kernel commutes with taking a submatrix (each entry depends only on
``G_aa``, ``G_ab``, ``G_bb``), which is what lets a deep kernel process condition on an
inducing block.  All functions are batched over leading dimensions and differentiable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from amorgp.core.errors import OptionError

__all__ = [
    "GRAM_KERNELS",
    "GramBlocks",
    "GramKernel",
    "gram_kernel",
    "squared_distances",
    "squared_distances_cross",
]

Scalar = Tensor | float


class GramBlocks(NamedTuple):
    """The blocks of a Gram (or kernel) matrix over inducing points ``i`` and other points ``t``.

    Attributes:
        ii: ``(..., P_i, P_i)`` the inducing block.
        ti: ``(..., P_t, P_i)`` the cross block (one row per point ``t``).
        tt: ``(..., P_t)`` the diagonal of the ``t`` block (never the full block).
    """

    ii: Tensor
    ti: Tensor
    tt: Tensor


def squared_distances_cross(diag_a: Tensor, G_ab: Tensor, diag_b: Tensor) -> Tensor:
    """``R_ab = G_aa - 2 G_ab + G_bb``, clamped at 0 (rounding), shape ``(..., A, B)``.

    Args:
        diag_a: ``(..., A)`` the diagonal ``G_aa``.
        G_ab: ``(..., A, B)`` the cross Gram matrix.
        diag_b: ``(..., B)`` the diagonal ``G_bb``.
    """
    return (diag_a[..., :, None] - 2.0 * G_ab + diag_b[..., None, :]).clamp_min(0.0)


def squared_distances(G: Tensor) -> Tensor:
    """Squared distances ``R_ij = G_ii - 2 G_ij + G_jj`` of a square Gram matrix ``(..., P, P)``."""
    d = G.diagonal(dim1=-2, dim2=-1)
    return squared_distances_cross(d, G, d)


def _col(x: Scalar, like: Tensor) -> Tensor:
    """A scalar or batch tensor ``(...)`` broadcast against matrices ``(..., A, B)``."""
    t = torch.as_tensor(x, dtype=like.dtype, device=like.device)
    return t[..., None, None] if t.ndim else t


def _se(da: Tensor, G: Tensor, db: Tensor, ls: Scalar) -> Tensor:
    R = squared_distances_cross(da, G, db)
    return torch.exp(-0.5 * R / _col(ls, G) ** 2)


class _SECross(torch.autograd.Function):
    """``K = s^2 exp(E)``, ``E = min(c (G_ab - G_aa / 2 - G_bb / 2), 0)``, ``c = l^-2``.

    The SE cross kernel in one buffer (``E = -R / (2 l^2)``, the clamp is that of ``R >= 0``)
    with its first derivatives in closed form: with ``Ebar = Kbar K`` (0 where clamped),
    ``Gbar_ab = c Ebar``, ``G_aa bar = -c/2 sum_b Ebar``, ``G_bb bar = -c/2 sum_a Ebar``,
    ``cbar = sum Ebar (G_ab - G_aa / 2 - G_bb / 2)``, ``lbar = -2 cbar / l^3`` and
    ``(s^2)bar = sum Kbar K / s^2``.  Same values as the composed expression (up to
    rounding, also in where the clamp acts at ``R = 0``) in about half the passes over
    ``(..., A, B)`` forward and backward (the hot path of the DIWP).  First derivatives only.
    """

    @staticmethod
    def forward(ctx: Any, da: Tensor, G: Tensor, db: Tensor, ls: Tensor, var: Tensor) -> Any:
        c = ls.pow(-2)
        E = G * c
        E.sub_((0.5 * c) * da[..., :, None]).sub_((0.5 * c) * db[..., None, :])
        mask = E > 0 if bool(E.amax() > 0) else None  # the rare clamped entries
        K = E.clamp_max_(0.0).exp_().mul_(var)
        ctx.save_for_backward(da, G, db, ls, var, K)
        ctx.mask = mask
        return K

    @staticmethod
    def backward(ctx: Any, gK: Tensor) -> Any:
        da, G, db, ls, var, K = ctx.saved_tensors
        need = ctx.needs_input_grad
        gE = gK * K
        gvar = (gE.sum((-2, -1), keepdim=True) / var).sum_to_size(var.shape) if need[4] else None
        if ctx.mask is not None:
            gE = gE.masked_fill(ctx.mask, 0.0)
        c = ls.pow(-2)
        row, col = gE.sum(-1), gE.sum(-2)  # (..., A), (..., B)
        c_vec = c.squeeze(-1) if c.ndim else c  # against (..., A) and (..., B)
        gda = (-0.5 * c_vec * row).sum_to_size(da.shape) if need[0] else None
        gdb = (-0.5 * c_vec * col).sum_to_size(db.shape) if need[2] else None
        gG = (gE * c).sum_to_size(G.shape) if need[1] else None
        gls = None
        if need[3]:
            gc = (gE * G).sum((-2, -1)) - 0.5 * (row * da).sum(-1) - 0.5 * (col * db).sum(-1)
            gc = gc[..., None, None] if ls.ndim else gc
            gls = (-2.0 * gc / ls.pow(3)).sum_to_size(ls.shape)
        return gda, gG, gdb, gls, gvar


def _se_cross(da: Tensor, G: Tensor, db: Tensor, ls: Scalar, var: Scalar) -> Tensor:
    """``s^2 exp(-R / (2 l^2))`` through :class:`_SECross` (``l``, ``s^2``: ``_col`` shapes)."""
    out: Tensor = _SECross.apply(da, G, db, _col(ls, G), _col(var, G))
    return out


def _mat52(da: Tensor, G: Tensor, db: Tensor, ls: Scalar) -> Tensor:
    R = squared_distances_cross(da, G, db) / _col(ls, G) ** 2
    # sqrt'(0) is infinite but dk/dR is finite (-5/6): keep the argument off 0
    r = torch.sqrt(R.clamp_min(1e-300))
    s5r = math.sqrt(5.0) * r
    return (1.0 + s5r + (5.0 / 3.0) * R) * torch.exp(-s5r)


def _relu(da: Tensor, G: Tensor, db: Tensor, ls: Scalar) -> Tensor:
    # The terms of dk/dG and dk/dP (P = G_aa G_bb) that are singular at theta = 0 or pi
    # cancel: dk/dG = (pi - theta) / pi and dk/dP = sqrt(P - G^2) / (2 pi P).  The value
    # is computed without a graph and these first derivatives are attached to it.
    P = (da[..., :, None] * db[..., None, :]).clamp_min(1e-300)
    with torch.no_grad():
        s = (P - G * G).clamp_min(0.0).sqrt()
        theta = torch.acos((G * P.rsqrt()).clamp(-1.0, 1.0))
        value = (s + (math.pi - theta) * G) / math.pi
        dG = (math.pi - theta) / math.pi
        dP = s / (2.0 * math.pi * P)
    return value + dG * (G - G.detach()) + dP * (P - P.detach())


def _diag_one(da: Tensor) -> Tensor:
    return torch.ones_like(da)


@dataclass(frozen=True)
class GramKernel:
    """A kernel evaluated from Gram matrices (see the module docstring for the formulas).

    Attributes:
        name: ``"SE"``, ``"MAT52"`` or ``"RELU"`` (the kernel-grammar names where one exists).
        formula: the kernel in terms of ``R`` or ``G``.
        has_lengthscale: whether ``l`` enters (``RELU`` ignores it).
    """

    name: str
    formula: str
    has_lengthscale: bool
    _unit: Callable[[Tensor, Tensor, Tensor, Scalar], Tensor]
    _unit_diag: Callable[[Tensor], Tensor]

    def cross(
        self,
        diag_a: Tensor,
        G_ab: Tensor,
        diag_b: Tensor,
        lengthscale: Scalar = 1.0,
        variance: Scalar = 1.0,
    ) -> Tensor:
        """``k(a, b)`` for all pairs, ``(..., A, B)``, from ``G_aa (..., A)``, ``G_ab``, ``G_bb (..., B)``.

        ``lengthscale`` and ``variance`` are numbers or batch tensors ``(...)``.
        """
        if self._unit is _se:
            return _se_cross(diag_a, G_ab, diag_b, lengthscale, variance)
        return _col(variance, G_ab) * self._unit(diag_a, G_ab, diag_b, lengthscale)

    def diag(self, diag_a: Tensor, variance: Scalar = 1.0) -> Tensor:
        """``k(a, a)``, ``(..., A)``, from ``G_aa (..., A)`` (exact, no rounding of ``R_aa``)."""
        v = torch.as_tensor(variance, dtype=diag_a.dtype, device=diag_a.device)
        return (v[..., None] if v.ndim else v) * self._unit_diag(diag_a)

    def matrix(self, G: Tensor, lengthscale: Scalar = 1.0, variance: Scalar = 1.0) -> Tensor:
        """``K(G)`` of a square Gram matrix ``(..., P, P)``, with the exact diagonal."""
        d = G.diagonal(dim1=-2, dim2=-1)
        K = self.cross(d, G, d, lengthscale, variance)
        eye = torch.eye(G.shape[-1], dtype=torch.bool, device=G.device)
        return torch.where(eye, torch.diag_embed(self.diag(d, variance)), K)

    def blocks(
        self, G: GramBlocks, lengthscale: Scalar = 1.0, variance: Scalar = 1.0
    ) -> GramBlocks:
        """The kernel's blocks ``(K_ii, K_ti, diag K_tt)`` from the Gram blocks."""
        d_i = G.ii.diagonal(dim1=-2, dim2=-1)
        return GramBlocks(
            self.matrix(G.ii, lengthscale, variance),
            self.cross(G.tt, G.ti, d_i, lengthscale, variance),
            self.diag(G.tt, variance),
        )


GRAM_KERNELS: dict[str, GramKernel] = {
    k.name: k
    for k in (
        GramKernel("SE", "s^2 exp(-R / (2 l^2))", True, _se, _diag_one),
        GramKernel(
            "MAT52",
            "s^2 (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r), r = sqrt(R) / l",
            True,
            _mat52,
            _diag_one,
        ),
        GramKernel(
            "RELU",
            "s^2 / pi (sqrt(G_aa G_bb - G_ab^2) + (pi - theta) G_ab), "
            "cos theta = G_ab / sqrt(G_aa G_bb)",
            False,
            _relu,
            lambda d: d,
        ),
    )
}
"""The kernels of Gram matrices by name."""


def gram_kernel(name: str) -> GramKernel:
    """The :class:`GramKernel` called ``name`` (case-insensitive).

    Raises:
        OptionError: an unknown name (the message lists the known ones).
    """
    k = GRAM_KERNELS.get(str(name).upper())
    if k is None:
        raise OptionError(
            f"unknown Gram-matrix kernel {name!r}; choose one of {', '.join(GRAM_KERNELS)}"
        )
    return k
