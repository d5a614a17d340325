"""Torch implementations of the unit-variance elementary kernels.

Every elementary kernel registered in :mod:`amorgp.kernel_grammar.registry`
needs a torch counterpart here (the registry holds the numpy float64 reference
formulas, which the tests use as the oracle).  A kernel is given either in log
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
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["TORCH_ELEMENTARY", "TorchElementary", "register_torch_elementary", "torch_elementary"]

UnitFn = Callable[[Tensor, Tensor, Tensor], Tensor]
DistFn = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class TorchElementary:
    """Torch form of one elementary kernel: exactly one of ``log_unit`` and ``unit`` is set.

    Attributes:
        name: the registry name (``SE``).
        log_unit: ``(x1, x2, theta) -> log kt`` for kernels that are positive everywhere.
        unit: ``(x1, x2, theta) -> kt`` otherwise.
        log_unit_r: optional ``(r, theta) -> log kt`` with ``r = x1 - x2``, for stationary
            kernels (equal to ``log_unit``); lets an evaluator form ``r`` once per
            dimension and share it across addends.
        log_unit_r2: optional ``(r^2, theta) -> log kt`` for kernels of ``r^2`` only.
        unit_xx: optional ``(x1 x2, theta) -> kt`` (equal to ``unit``) for kernels of the
            product ``x x'`` only (LIN).
    """

    name: str
    log_unit: UnitFn | None = None
    unit: UnitFn | None = None
    log_unit_r: DistFn | None = None
    log_unit_r2: DistFn | None = None
    unit_xx: DistFn | None = None

    def __post_init__(self) -> None:
        if (self.log_unit is None) == (self.unit is None):
            raise ValueError(f"{self.name}: give exactly one of log_unit and unit")
        if self.log_unit is None and (self.log_unit_r or self.log_unit_r2) is not None:
            raise ValueError(f"{self.name}: log_unit_r/log_unit_r2 need log_unit")
        if self.unit is None and self.unit_xx is not None:
            raise ValueError(f"{self.name}: unit_xx needs unit")

    def __call__(self, x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
        """The unit factor ``kt(x1, x2)`` itself."""
        if self.unit is not None:
            return self.unit(x1, x2, theta)
        assert self.log_unit is not None
        return torch.exp(self.log_unit(x1, x2, theta))


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
    s = torch.sin(r * (math.pi / period))
    return (s * s) * (-0.5 / (ls * ls))


def _per(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    return _per_r(x1 - x2, theta)


def _mat52_r(r: Tensor, theta: Tensor) -> Tensor:
    a = r.abs() * (math.sqrt(5.0) / theta[..., 0])
    return torch.log1p(a * (1.0 + a / 3.0)) - a


def _mat52(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    return _mat52_r(x1 - x2, theta)


def _rq_r2(r2: Tensor, theta: Tensor) -> Tensor:
    ls, alpha = theta[..., 0], theta[..., 1]
    return torch.log1p(r2 * (0.5 / (alpha * ls * ls))) * (-alpha)


def _rq(x1: Tensor, x2: Tensor, theta: Tensor) -> Tensor:
    r = x1 - x2
    return _rq_r2(r * r, theta)


TORCH_ELEMENTARY: dict[str, TorchElementary] = {
    "SE": TorchElementary("SE", log_unit=_se, log_unit_r2=_se_r2),
    "LIN": TorchElementary("LIN", unit=_lin, unit_xx=_lin_xx),
    "PER": TorchElementary("PER", log_unit=_per, log_unit_r=_per_r),
    "MAT52": TorchElementary("MAT52", log_unit=_mat52, log_unit_r=_mat52_r),
    "RQ": TorchElementary("RQ", log_unit=_rq, log_unit_r2=_rq_r2),
}


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
