"""Closed-form derivatives of the elementary unit factors, for the amortizer's refinement
(the ``unit_and_grads`` and ``unit_and_log_grads`` of
:class:`amorgp.lazy_kernels.elementary.TorchElementary`).

A kernel positive everywhere gives its derivatives relative to it (``*_log_grads``:
``(kt, [(name, s, M)])`` with ``dkt / d name = s kt M``); its plain derivatives are those
times ``kt`` (:func:`plain_grads`), so each closed form is written once.  LIN, which can be
zero, has plain ones only.  Every function takes the elementary parameters ``p`` (tensors
by name, broadcasting against the matrices) and the ``(..., n, n)`` differences ``r``,
their squares ``r2`` and the products ``xx`` of one input column.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

UnitGrads = tuple[Tensor, list[tuple[str, Tensor]]]
UnitLogGrads = tuple[Tensor, list[tuple[str, Tensor, Tensor]]]


def plain_grads(
    log_grads: Callable[[dict[str, Tensor], Tensor, Tensor, Tensor], UnitLogGrads],
) -> Callable[[dict[str, Tensor], Tensor, Tensor, Tensor], UnitGrads]:
    """The plain derivatives ``dkt / d name = s kt M`` of relative ones."""

    def grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitGrads:
        t, logs = log_grads(p, r, r2, xx)
        return t, [(name, s * t * m) for name, s, m in logs]

    return grads


def se_exponent_grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitLogGrads:
    """SE's ``log kt`` (its exponent) and its relative derivatives."""
    ell = p["lengthscale"]
    return r2 * (-0.5 / ell.square()), [("lengthscale", ell.pow(-3), r2)]


def se_log_grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitLogGrads:
    e, logs = se_exponent_grads(p, r, r2, xx)
    return e.exp_(), logs


def lin_grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitGrads:
    t = xx + p["offset"]
    return t, [("offset", torch.ones_like(t))]


def per_log_grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitLogGrads:
    ell, per = p["lengthscale"], p["period"]
    w = r * (math.pi / per)
    sn = torch.sin(w)
    sn2 = sn.square()
    t = (sn2 * (-0.5 / ell.square())).exp()
    # d log kt / d p = sin(w) cos(w) w / (p l^2)
    return t, [
        ("lengthscale", ell.pow(-3), sn2),
        ("period", 1.0 / (per * ell.square()), sn.mul_(torch.cos(w)).mul_(w)),
    ]


def per_points_exponent_grads(
    p: dict[str, Tensor],
    x1: Tensor,
    x2: Tensor,
    r: Tensor,
    pairs: tuple[Tensor, Tensor] | None = None,
) -> UnitLogGrads:
    """PER's ``log kt`` (its exponent) and its relative derivatives (those of
    :func:`per_log_grads`) from the column's points ``x1 (..., n, 1)`` and ``x2 (..., 1,
    m)`` as well (``r = x1 - x2``): the sine and cosine of ``w = pi r / p`` by angle
    addition, ``sin(a - b) = sin a cos b - cos a sin b`` with ``a = pi x1 / p``, ``b = pi
    x2 / p``: ``n + m`` of each transcendental function instead of ``n m``, which were
    most of the cost of the matrices.  The same values to rounding (absolute errors of a
    few ulps of the angles ``a`` and ``b``; on the diagonal ``x1 = x2`` the sine is exactly
    zero).  ``pairs = (i, j)``: ``x1``, ``x2`` are ``(..., n)`` and the matrices the
    pairs' values ``(..., P)`` (:class:`~amorgp.lazy_kernels.forms.PointsLogGradsFn`), the
    per-point sines and cosines gathered."""
    ell, per = p["lengthscale"], p["period"]
    c = math.pi / per
    a, b = x1 * c, x2 * c
    sa, ca, sb, cb = a.sin(), a.cos(), b.sin(), b.cos()
    if pairs is not None:
        i, j = pairs
        sa, ca, sb, cb = sa[..., i], ca[..., i], sb[..., j], cb[..., j]
    sn = sa * cb
    sn.sub_(ca * sb)  # both products rounded alike (no fused multiply-add): 0 where x1 = x2
    cw = ca * cb
    cw.addcmul_(sa, sb)
    sn2 = sn * sn
    return sn2 * (-0.5 / ell.square()), [
        ("lengthscale", ell.pow(-3), sn2),
        ("period", 1.0 / (per * ell.square()), sn.mul_(cw).mul_(r * c)),
    ]


def mat52_log_grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitLogGrads:
    ell = p["lengthscale"]
    a = r.abs() * (math.sqrt(5.0) / ell)
    q = 1.0 + a + a.square() / 3.0  # at least 1
    t = q * (-a).exp()
    return t, [("lengthscale", 1.0 / (3.0 * ell), a.square() * (1.0 + a) / q)]


def rq_log_grads(p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor) -> UnitLogGrads:
    ell, al = p["lengthscale"], p["alpha"]
    q = r2 * (1.0 / (2.0 * al * ell.square()))
    frac = q / (1.0 + q)
    t = (1.0 + q).pow(-al)
    return t, [
        ("lengthscale", 2.0 * al / ell, frac),
        ("alpha", torch.ones_like(al), frac - torch.log1p(q)),
    ]
