"""What the project needs to know of one elementary kernel in torch: the entry of the
lazy-kernels registry (:class:`TorchElementary`), its KeOps formula (:class:`KeOpsFormula`)
and its GPyTorch module both ways (:class:`GPyTorchModule`), and the signatures of the
functions an entry holds.  The built-in entries and the registry itself:
:mod:`amorgp.lazy_kernels.elementary` (which re-exports these names)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

__all__ = [
    "DistFn",
    "GPyTorchBuilder",
    "GPyTorchModule",
    "KeOpsFormula",
    "PointsLogGradsFn",
    "SklearnBuilder",
    "TorchElementary",
    "UnitFn",
    "UnitGradsFn",
    "UnitLogGradsFn",
]

UnitFn = Callable[[Tensor, Tensor, Tensor], Tensor]
DistFn = Callable[[Tensor, Tensor], Tensor]
GPyTorchBuilder = Callable[[Any, dict[str, Tensor], list[int] | None, Tensor | None], Any]
UnitGradsFn = Callable[
    [dict[str, Tensor], Tensor, Tensor, Tensor], tuple[Tensor, list[tuple[str, Tensor]]]
]
UnitLogGradsFn = Callable[
    [dict[str, Tensor], Tensor, Tensor, Tensor],
    tuple[Tensor, list[tuple[str, Tensor, Tensor]]],
]


class PointsLogGradsFn(Protocol):
    """``(p, x1, x2, r, pairs=None)``: the parameters, the column's points ``(..., n, 1)``
    and ``(..., 1, m)``, and their differences; with ``pairs = (i, j)`` (two index
    tensors of the same length ``P``) the points are ``(..., n)`` each and the matrices
    are the pairs' values only, ``(..., P)`` (``r[..., q] = x1[..., i[q]] - x2[...,
    j[q]]``: the upper triangle of a symmetric matrix, packed)."""

    def __call__(
        self,
        p: dict[str, Tensor],
        x1: Tensor,
        x2: Tensor,
        r: Tensor,
        pairs: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, list[tuple[str, Tensor, Tensor]]]: ...


SklearnBuilder = Callable[
    [Any, dict[str, Any], Callable[[Any], Any], float, float], tuple[Any, Any]
]


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
class GPyTorchModule:
    """The GPyTorch module of one unit elementary factor, both ways (the GPyTorch/BoTorch
    bridge writes and reads it, :mod:`amorgp.gpytorch`).

    Attributes:
        cls: its class name in ``gpytorch.kernels`` (``"RBFKernel"``).
        kwargs: constructor keywords, ``((name, value), ...)``; a module of class ``cls``
            is this factor when its attributes of those names equal the values
            (``MaternKernel``: ``(("nu", 2.5),)``).
        to_module: the factor's parameters (by elementary name; floats or 0-d tensors) to
            the module's attribute values ``{attribute: value}`` (PER:
            ``{"lengthscale": 4 l^2, "period_length": p}``).
        from_module: the inverse: the attribute values (floats) to the parameters.
        separable: the module over several input columns is the product over those
            columns of the one-column module (``RBFKernel``, ``PeriodicKernel``; not
            ``MaternKernel``, whose distance spans the columns), so the bridge reads it
            as one factor per column; otherwise it must act on one column.
        variance: the module's attribute that holds the symbol's variance, for a kernel
            whose variance does not scale all of it (LIN: ``"variance"`` of
            ``LinearKernel``); the factor is then the module plus a ``ConstantKernel``
            whose constant is its first parameter, and the module acts on one column.
    """

    cls: str
    to_module: Callable[[dict[str, Any]], dict[str, Any]]
    from_module: Callable[[dict[str, float]], dict[str, float]]
    kwargs: tuple[tuple[str, Any], ...] = ()
    separable: bool = False
    variance: str | None = None

    def matches(self, module: Any) -> bool:
        """Whether GPyTorch ``module`` is this factor (its class and ``kwargs``)."""
        if type(module).__name__ != self.cls:
            return False
        return all(float(getattr(module, k)) == float(v) for k, v in self.kwargs)

    def build(
        self, gk: Any, p: dict[str, Tensor], dims: list[int] | None, alone_variance: Any
    ) -> Any:
        """The float64 module of the unit factor with parameters ``p`` on input columns
        ``dims`` (the :attr:`TorchElementary.gpytorch` builder it defines)."""
        k = getattr(gk, self.cls)(active_dims=dims, **dict(self.kwargs)).double()
        for name, value in self.to_module(p).items():
            setattr(k, name, torch.as_tensor(value, dtype=torch.float64))
        if self.variance is None:
            return k
        setattr(k, self.variance, torch.tensor(1.0, dtype=torch.float64))
        first = next(iter(p.values())) if p else torch.tensor(0.0, dtype=torch.float64)
        const = gk.ConstantKernel(active_dims=dims).double()
        const.constant = first if alone_variance is None else first / alone_variance
        return k + const


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
            conformance suite uses it as an external oracle.  Default: the builder of
            ``gpytorch_module``.
        owns_output: every form returns a new tensor (never an input or a view of one)
            that autograd has not saved for backward, so an evaluator may update it in
            place (add the variance, ``exp_``); False (the safe default) for a kernel
            that cannot promise it.
        unit_and_grads: optional ``(p, r, r2, xx) -> (kt, [(name, dkt / d name)])``: the
            unit factor on the ``(n, n)`` differences ``r``, their squares ``r2`` and
            products ``xx`` of one input column, and its derivatives with respect to its
            parameters ``p`` (0-d tensors by elementary name), in closed form, for the
            amortizer's refinement; None: forward-mode differentiation of the torch form.
        unit_and_log_grads: optional ``(p, r, r2, xx) -> (kt, [(name, s, M)])``: the unit
            factor and its derivatives as ``dkt / d name = s * kt * M`` (``M = d log kt / d
            name / s``: a matrix with no ``kt`` in it, ``s`` a factor per row), for a kernel
            positive everywhere.  The refinement's gradient then needs no derivative
            matrix of its own: ``<W, k * M>`` is ``<W * k, M>``, one product ``W * k`` per
            addend (``SE``: ``s = l^-3``, ``M = r^2``, the squared differences it already
            has).  None: the derivatives of ``unit_and_grads``.
        exponent_grads: optional ``(p, r, r2, xx) -> (log kt, [(name, s, M)])``: as
            ``unit_and_log_grads`` with the unit factor's logarithm in place of it, for a
            kernel that is an exponential (``SE``): the factors of a product that have it
            take one exponential of their summed exponents (``SE*PER``: one instead of two).
        points_exponent_grads: optional ``(p, x1, x2, r) -> (log kt, [(name, s, M)])``: as
            ``exponent_grads``, given the column's points ``x1 (..., n, 1)`` and ``x2 (...,
            1, m)`` as well (``r = x1 - x2``), for a kernel whose matrices are cheaper from
            per-point values (``PER``: the sine and cosine of the differences by angle
            addition, ``O(n)`` transcendental functions instead of ``O(n^2)``); with
            ``pairs=(i, j)`` the packed values of those pairs only
            (:class:`PointsLogGradsFn`: the refinement's symmetric matrices).  The
            refinement uses the first of ``points_exponent_grads``, ``exponent_grads``,
            ``unit_and_log_grads`` and ``unit_and_grads`` that a kernel has.
        sklearn: optional ``(sk, p, bounds, center, scale) -> (kernel, factor)``: the unit
            factor as ``factor * kernel`` with ``sk = sklearn.gaussian_process.kernels``,
            from its parameters ``p`` (floats by elementary name, in the units of the
            original inputs; a lone factor whose variance does not scale all of it gets its
            first parameter divided by the variance, as the evaluators do);
            ``bounds(value)`` gives the bounds of a hyperparameter of that value;
            ``center``, ``scale``: the column's normalisation ``x~ = (x - center) / scale``
            (a kernel that is not stationary acts on ``x~``).  ``factor`` multiplies the
            symbol's ``ConstantKernel``.  Raises ``ValueError`` (the reason) where no
            scikit-learn kernel is equal.
        sklearn_ard: ``sklearn`` also accepts numpy arrays of per-column values and then
            returns the product over the columns of one factor each (``RBF`` with an ARD
            length scale), so a structure with this kernel alone on every column converts.
        gpytorch_module: optional GPyTorch module of the unit factor, both ways
            (:class:`GPyTorchModule`), for the GPyTorch/BoTorch bridge.
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
    unit_and_grads: UnitGradsFn | None = field(default=None, compare=False)
    unit_and_log_grads: UnitLogGradsFn | None = field(default=None, compare=False)
    exponent_grads: UnitLogGradsFn | None = field(default=None, compare=False)
    points_exponent_grads: PointsLogGradsFn | None = field(default=None, compare=False)
    sklearn: SklearnBuilder | None = field(default=None, compare=False)
    sklearn_ard: bool = False
    gpytorch_module: GPyTorchModule | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.gpytorch is None and self.gpytorch_module is not None:
            object.__setattr__(self, "gpytorch", self.gpytorch_module.build)
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
