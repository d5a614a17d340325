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
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import OptionError

__all__ = [
    "TORCH_ELEMENTARY",
    "KeOpsFormula",
    "TorchElementary",
    "keops_elementary",
    "register_keops_formula",
    "register_torch_elementary",
    "torch_elementary",
]

UnitFn = Callable[[Tensor, Tensor, Tensor], Tensor]
DistFn = Callable[[Tensor, Tensor], Tensor]
GPyTorchBuilder = Callable[[Any, dict[str, Tensor], list[int] | None, Tensor | None], Any]


@dataclass(frozen=True)
class KeOpsFormula:
    """KeOps form of one unit-variance elementary factor ``kt(x_d, y_d)``.

    Attributes:
        formula: ``(r, xy, th) -> text``: the KeOps expression of ``kt`` from the texts of
            ``r = x_d - y_d`` and ``xy = x_d * y_d`` and the aliases ``th`` of its derived
            scalars (``len(th) == n_derived``).
        derived: ``p -> [scalars]``: the derived scalars (0-d tensors, differentiable) from
            the factor's raw non-variance parameters ``p (k,)`` in registry order.
        n_derived: number of derived scalars.

    Example (SE): ``KeOpsFormula(lambda r, xy, th: f"Exp({th[0]} * Square({r}))",
    lambda p: [-0.5 / p[0] ** 2], 1)``.
    """

    formula: Callable[[str, str, list[str]], str]
    derived: Callable[[Tensor], list[Tensor]]
    n_derived: int


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
        keops: optional KeOps formula of the same factor (:class:`KeOpsFormula`).
        gpytorch: optional ``(gk, p, dims, alone_variance) -> module``: the equal GPyTorch
            module of the unit factor, built with ``gk = gpytorch.kernels`` from the
            factor's parameters ``p`` (0-d float64 tensors by elementary name) on input
            columns ``dims`` (``None``: all).  ``alone_variance`` is the symbol's variance
            when the factor stands alone and its variance does not scale the whole kernel
            (LIN: ``s^2 x x' + c^2 = s^2 (x x' + c^2 / s^2)``), else ``None``.  The
            conformance suite uses it as an external oracle.
        owns_output: every form returns a new tensor (never an input or a view of one)
            that autograd has not saved for backward, so an evaluator may update it in
            place (add the variance, ``exp_``); False (the safe default) for a kernel
            that cannot promise it.
    """

    name: str
    log_unit: UnitFn | None = None
    unit: UnitFn | None = None
    log_unit_r: DistFn | None = None
    log_unit_r2: DistFn | None = None
    unit_xx: DistFn | None = None
    keops: KeOpsFormula | None = None
    gpytorch: GPyTorchBuilder | None = field(default=None, compare=False)
    owns_output: bool = False

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


def _se_gpytorch(gk: Any, p: dict[str, Tensor], dims: list[int] | None, _: Any) -> Any:
    k = gk.RBFKernel(active_dims=dims).double()
    k.lengthscale = p["lengthscale"]
    return k


def _per_gpytorch(gk: Any, p: dict[str, Tensor], dims: list[int] | None, _: Any) -> Any:
    k = gk.PeriodicKernel(active_dims=dims).double()
    # GPyTorch documents exp(-2 sin^2(pi r / p) / l_gp^2) but its code (1.11-1.15) divides
    # by l_gp itself: exp(-2 sin^2(.) / l_gp).  Matching the paper's 1 / (2 l^2) therefore
    # needs l_gp = 4 l^2 (the documented form would be 2 l).
    k.lengthscale = 4.0 * p["lengthscale"] ** 2
    k.period_length = p["period"]
    return k


def _mat52_gpytorch(gk: Any, p: dict[str, Tensor], dims: list[int] | None, _: Any) -> Any:
    k = gk.MaternKernel(nu=2.5, active_dims=dims).double()
    k.lengthscale = p["lengthscale"]
    return k


def _rq_gpytorch(gk: Any, p: dict[str, Tensor], dims: list[int] | None, _: Any) -> Any:
    k = gk.RQKernel(active_dims=dims).double()
    k.lengthscale = p["lengthscale"]
    k.alpha = p["alpha"]
    return k


def _lin_gpytorch(
    gk: Any, p: dict[str, Tensor], dims: list[int] | None, alone_variance: Tensor | None
) -> Any:
    lin = gk.LinearKernel(active_dims=dims).double()
    lin.variance = torch.tensor(1.0, dtype=torch.float64)
    const = gk.ConstantKernel(active_dims=dims).double()
    const.constant = p["offset"] if alone_variance is None else p["offset"] / alone_variance
    return lin + const


TORCH_ELEMENTARY: dict[str, TorchElementary] = {
    "SE": TorchElementary(
        "SE",
        log_unit=_se,
        log_unit_r2=_se_r2,
        keops=_SE_KEOPS,
        gpytorch=_se_gpytorch,
        owns_output=True,
    ),
    "LIN": TorchElementary(
        "LIN",
        unit=_lin,
        unit_xx=_lin_xx,
        keops=_LIN_KEOPS,
        gpytorch=_lin_gpytorch,
        owns_output=True,
    ),
    "PER": TorchElementary(
        "PER",
        log_unit=_per,
        log_unit_r=_per_r,
        keops=_PER_KEOPS,
        gpytorch=_per_gpytorch,
        owns_output=True,
    ),
    "MAT52": TorchElementary(
        "MAT52",
        log_unit=_mat52,
        log_unit_r=_mat52_r,
        keops=_MAT52_KEOPS,
        gpytorch=_mat52_gpytorch,
        owns_output=True,
    ),
    "RQ": TorchElementary(
        "RQ",
        log_unit=_rq,
        log_unit_r2=_rq_r2,
        keops=_RQ_KEOPS,
        gpytorch=_rq_gpytorch,
        owns_output=True,
    ),
}
"""lazy-kernels' one place per elementary kernel: its torch forms, KeOps formula and
GPyTorch equivalent (:class:`TorchElementary`), by registry name."""


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
