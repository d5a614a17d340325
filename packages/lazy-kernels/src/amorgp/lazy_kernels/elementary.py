"""Torch (and KeOps) implementations of the unit-variance elementary kernels.

Every elementary kernel registered in :mod:`amorgp.kernel_grammar.registry`
needs a torch counterpart here (the registry holds the numpy float64 reference
formulas, which the tests use as the oracle); its KeOps formula, if it has one, is
registered in the same entry (:class:`KeOpsFormula`), so a kernel registered by a
user runs on the KeOps backend too.  A kernel is given either in log
form, ``log kt(x, x')`` (all stationary kernels, so that the factors of a
product symbol and its variance fuse into a single ``exp``), or directly as
``kt(x, x')`` (LIN, which can be negative):

======  =============================================================  ==================
name    unit factor with ``r = x - x'``                                 ``theta`` columns
======  =============================================================  ==================
SE      ``log kt = -r^2 / (2 l^2)``                                     ``l``
LIN     ``kt = x x' + c^2``                                             ``c^2``
PER     ``log kt = -sin^2(pi r / p) / (2 l^2)`` (paper form)            ``l, p``
MAT52   ``log kt = log(1 + a + a^2 / 3) - a``, ``a = sqrt(5) |r| / l``   ``l``
RQ      ``log kt = -alpha log(1 + r^2 / (2 alpha l^2))``                ``l, alpha``
======  =============================================================  ==================

Each entry also carries what the rest of the project needs to know of the kernel, so that
no module outside the two registrations branches on a kernel's name: the closed-form
derivatives of the unit factor for the amortizer's refinement (``unit_and_grads``; None:
forward-mode differentiation of the torch form), its scikit-learn conversion (``sklearn``,
``sklearn_ard``) and its GPyTorch module both ways (``gpytorch_module``,
:class:`GPyTorchModule`; ``gpytorch`` builds it for the oracle).

KeOps formulas receive the text of ``r = x_d - y_d`` and ``x_d y_d`` of one input
dimension and the aliases of their *derived* scalars (computed in torch from the raw
parameters, e.g. ``-1 / (2 l^2)``, ``pi / p``; constants live there because KeOps emits
``IntInv`` and integer division in single precision).

The functions receive inputs that broadcast against each other (``x1 (T, N, 1)``
and ``x2 (T, 1, M)`` for a matrix, ``x1 = x2 = (T, N)`` for a diagonal) and a
parameter tensor ``theta (T, 1, 1, k)`` / ``(T, 1, k)`` whose last axis holds the
elementary kernel's non-variance parameters in registry order.

Squared distances are formed from differences ``(x - x')^2`` (never from
``x^2 + x'^2 - 2 x x'``, which cancels catastrophically for close points).
``sin^2`` is even, so PER uses ``sin(pi r / p)`` without ``|r|`` and stays
smooth at ``r = 0``; MAT52's ``|r|`` has a zero subgradient at ``r = 0``, which
is the true derivative of the kernel there.  PER uses the paper's ``1/(2 l^2)``;
GPyTorch's ``PeriodicKernel`` documents ``2 sin^2(...) / l_gp^2`` (``l_gp = 2 l``) but
its code (1.11-1.15) evaluates ``2 sin^2(...) / l_gp``, so ``l_gp = 4 l^2`` matches
(see ``amorgp.lazy_kernels.testing.gpytorch_kernel_matrix``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from amorgp.core.errors import OptionError
from amorgp.lazy_kernels.forms import (
    GPyTorchModule,
    KeOpsFormula,
    TorchElementary,
)
from amorgp.lazy_kernels.unit_derivatives import (
    lin_grads,
    mat52_log_grads,
    per_log_grads,
    per_points_exponent_grads,
    plain_grads,
    rq_log_grads,
    se_exponent_grads,
    se_log_grads,
)

__all__ = [
    "TORCH_ELEMENTARY",
    "GPyTorchModule",
    "KeOpsFormula",
    "TorchElementary",
    "keops_elementary",
    "register_keops_formula",
    "register_torch_elementary",
    "torch_elementary",
]


def _se_r2(r2: Tensor, theta: Tensor) -> Tensor:
    ls = theta[..., 0]
    return r2 * (-0.5 / (ls * ls))


def _se(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    r = x1 - x2
    return _se_r2(r * r, theta)


def _lin_xx(xx: Tensor, theta: Tensor) -> Tensor:
    return xx + theta[..., 0]


def _lin(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    return _lin_xx(x1 * x2, theta)


def _per_r(r: Tensor, theta: Tensor) -> Tensor:
    ls, period = theta[..., 0], theta[..., 1]
    w = r * (math.pi / period)
    if w.requires_grad:
        s = torch.sin(w)
        return (s * s) * (-0.5 / (ls * ls))
    # no graph: update the fresh tensor in place (same values, no new allocations)
    w.sin_()
    return w.mul_(w).mul_(-0.5 / (ls * ls))


def _per(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    return _per_r(x1 - x2, theta)


def _mat52_r(r: Tensor, theta: Tensor) -> Tensor:
    a = r.abs()
    q = math.sqrt(5.0) / theta[..., 0]
    if a.requires_grad or q.requires_grad:
        a = a * q
        return torch.log1p(a * (1.0 + a / 3.0)) - a
    a.mul_(q)
    return (a / 3.0).add_(1.0).mul_(a).log1p_().sub_(a)


def _mat52(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    return _mat52_r(x1 - x2, theta)


def _rq_r2(r2: Tensor, theta: Tensor) -> Tensor:
    ls, alpha = theta[..., 0], theta[..., 1]
    t = r2 * (0.5 / (alpha * ls * ls))
    if t.requires_grad:
        return torch.log1p(t) * (-alpha)
    return t.log1p_().mul_(-alpha)


def _rq(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    r = x1 - x2
    return _rq_r2(r * r, theta)


def _mat52_keops(r: str, xy: str, th: list[str]) -> str:
    # (1 + q|r| + (q^2 / 3) r^2) exp(-q|r|), with q = sqrt5 / l and q^2 / 3 derived
    t = f"({th[0]} * Abs({r}))"
    return f"((IntCst(1) + {t} + {th[1]} * Square({r})) * Exp(-{t}))"


_SE_KEOPS = KeOpsFormula(
    lambda r, xy, th: f"Exp({th[0]} * Square({r}))", lambda p: [-0.5 / p[0] ** 2], 1
)
_LIN_KEOPS = KeOpsFormula(lambda r, xy, th: f"({xy} + {th[0]})", lambda p: [p[0]], 1)
_PER_KEOPS = KeOpsFormula(
    lambda r, xy, th: f"Exp({th[0]} * Square(Sin({th[1]} * {r})))",
    lambda p: [-0.5 / p[0] ** 2, math.pi / p[1]],
    2,
)
_MAT52_KEOPS = KeOpsFormula(
    _mat52_keops, lambda p: [math.sqrt(5.0) / p[0], (5.0 / 3.0) / p[0] ** 2], 2
)
_RQ_KEOPS = KeOpsFormula(
    lambda r, xy, th: f"Exp({th[0]} * Log(IntCst(1) + {th[1]} * Square({r})))",
    lambda p: [-p[1], 0.5 / (p[1] * p[0] ** 2)],
    2,
)


# -- scikit-learn conversions ----------------------------------------------------------------
Bounds = Callable[[Any], Any]


def _se_sklearn(sk: Any, p: dict[str, Any], bounds: Bounds, _c: float, _s: float) -> Any:
    return sk.RBF(p["lengthscale"], bounds(p["lengthscale"])), 1.0


def _per_sklearn(sk: Any, p: dict[str, Any], bounds: Bounds, _c: float, _s: float) -> Any:
    # scikit-learn multiplies sin^2 by 2 / l_sk^2, the paper divides it by 2 l^2: l_sk = 2 l
    length, period = 2.0 * p["lengthscale"], p["period"]
    return sk.ExpSineSquared(length, period, bounds(length), bounds(period)), 1.0


def _mat52_sklearn(sk: Any, p: dict[str, Any], bounds: Bounds, _c: float, _s: float) -> Any:
    return sk.Matern(p["lengthscale"], bounds(p["lengthscale"]), nu=2.5), 1.0


def _rq_sklearn(sk: Any, p: dict[str, Any], bounds: Bounds, _c: float, _s: float) -> Any:
    length, alpha = p["lengthscale"], p["alpha"]
    return sk.RationalQuadratic(length, alpha, bounds(length), bounds(alpha)), 1.0


def _lin_sklearn(sk: Any, p: dict[str, Any], bounds: Bounds, center: float, scale: float) -> Any:
    if center != 0.0:
        raise ValueError(
            f"the column's minimum is {center:g} and DotProduct cannot shift the inputs"
        )
    # x~ x~' + c^2 = (x x' + c^2 scale^2) / scale^2
    sigma0 = math.sqrt(p["offset"]) * scale
    return sk.DotProduct(sigma0, bounds(sigma0)), 1.0 / scale**2


# -- GPyTorch modules --------------------------------------------------------------------------
def _lengthscale(p: dict[str, Any]) -> dict[str, Any]:
    return {"lengthscale": p["lengthscale"]}


_SE_GPYTORCH = GPyTorchModule("RBFKernel", _lengthscale, _lengthscale, separable=True)
# GPyTorch documents exp(-2 sin^2(pi r / p) / l_gp^2) but its code (1.11-1.15) divides by
# l_gp itself: exp(-2 sin^2(.) / l_gp).  Matching the paper's 1 / (2 l^2) therefore needs
# l_gp = 4 l^2 (the documented form would be 2 l).
_PER_GPYTORCH = GPyTorchModule(
    "PeriodicKernel",
    lambda p: {"lengthscale": 4.0 * p["lengthscale"] ** 2, "period_length": p["period"]},
    lambda m: {"lengthscale": math.sqrt(m["lengthscale"] / 4.0), "period": m["period_length"]},
    separable=True,
)
_MAT52_GPYTORCH = GPyTorchModule("MaternKernel", _lengthscale, _lengthscale, (("nu", 2.5),))
_RQ_GPYTORCH = GPyTorchModule(
    "RQKernel",
    lambda p: {"lengthscale": p["lengthscale"], "alpha": p["alpha"]},
    lambda m: {"lengthscale": m["lengthscale"], "alpha": m["alpha"]},
)
# LinearKernel (variance 1 in the unit factor) + ConstantKernel (the offset c^2)
_LIN_GPYTORCH = GPyTorchModule("LinearKernel", lambda p: {}, lambda m: {}, variance="variance")


TORCH_ELEMENTARY: dict[str, TorchElementary] = {
    "SE": TorchElementary(
        "SE",
        log_unit=_se,
        log_unit_r2=_se_r2,
        keops=_SE_KEOPS,
        owns_output=True,
        unit_and_grads=plain_grads(se_log_grads),
        unit_and_log_grads=se_log_grads,
        exponent_grads=se_exponent_grads,
        sklearn=_se_sklearn,
        sklearn_ard=True,
        gpytorch_module=_SE_GPYTORCH,
    ),
    "LIN": TorchElementary(
        "LIN",
        unit=_lin,
        unit_xx=_lin_xx,
        keops=_LIN_KEOPS,
        owns_output=True,
        unit_and_grads=lin_grads,
        sklearn=_lin_sklearn,
        gpytorch_module=_LIN_GPYTORCH,
    ),
    "PER": TorchElementary(
        "PER",
        log_unit=_per,
        log_unit_r=_per_r,
        keops=_PER_KEOPS,
        owns_output=True,
        unit_and_grads=plain_grads(per_log_grads),
        unit_and_log_grads=per_log_grads,
        points_exponent_grads=per_points_exponent_grads,
        sklearn=_per_sklearn,
        gpytorch_module=_PER_GPYTORCH,
    ),
    "MAT52": TorchElementary(
        "MAT52",
        log_unit=_mat52,
        log_unit_r=_mat52_r,
        keops=_MAT52_KEOPS,
        owns_output=True,
        unit_and_grads=plain_grads(mat52_log_grads),
        unit_and_log_grads=mat52_log_grads,
        sklearn=_mat52_sklearn,
        gpytorch_module=_MAT52_GPYTORCH,
    ),
    "RQ": TorchElementary(
        "RQ",
        log_unit=_rq,
        log_unit_r2=_rq_r2,
        keops=_RQ_KEOPS,
        owns_output=True,
        unit_and_grads=plain_grads(rq_log_grads),
        unit_and_log_grads=rq_log_grads,
        sklearn=_rq_sklearn,
        gpytorch_module=_RQ_GPYTORCH,
    ),
}
"""lazy-kernels' one place per elementary kernel: its torch forms, KeOps formula, closed-form
derivatives, scikit-learn conversion and GPyTorch module (:class:`TorchElementary`), by
registry name."""


def register_torch_elementary(kernel: TorchElementary) -> None:
    """Register the torch form of an elementary kernel newly added to the registry.

    Raises:
        ValueError: if the kernel already has a torch implementation.
    """
    if kernel.name in TORCH_ELEMENTARY:
        raise ValueError(f"elementary kernel {kernel.name!r} already has a torch implementation")
    TORCH_ELEMENTARY[kernel.name] = kernel


def torch_elementary(name: str) -> TorchElementary:
    """The torch form of elementary kernel ``name``.

    Raises:
        ValueError: if no torch implementation is registered for ``name``.
    """
    try:
        return TORCH_ELEMENTARY[name]
    except KeyError:
        raise ValueError(
            f"elementary kernel {name!r} has no torch implementation; "
            "add one with amorgp.lazy_kernels.register_torch_elementary"
        ) from None


def register_keops_formula(name: str, formula: KeOpsFormula) -> None:
    """Add the KeOps formula of an elementary kernel that has a torch form without one.

    Raises:
        ValueError: if ``name`` has no torch form or already has a KeOps formula.
    """
    kernel = torch_elementary(name)
    if kernel.keops is not None:
        raise ValueError(f"elementary kernel {name!r} already has a KeOps formula")
    TORCH_ELEMENTARY[name] = replace(kernel, keops=formula)


def keops_elementary(name: str, symbol: str | None = None) -> KeOpsFormula:
    """The KeOps formula of elementary kernel ``name`` (a factor of base symbol ``symbol``).

    Raises:
        OptionError: if ``name`` has no torch form or no KeOps formula (naming the symbol).
    """
    where = f" (a factor of base symbol {symbol!r})" if symbol and symbol != name else ""
    try:
        kernel = torch_elementary(name)
    except ValueError as err:
        raise OptionError(f"{err}{where}") from None
    if kernel.keops is None:
        raise OptionError(
            f"elementary kernel {name!r}{where} has no KeOps formula: register one with "
            "amorgp.lazy_kernels.register_keops_formula, or use a dense backend"
        )
    return kernel.keops
