"""Dataset validation and the normalisation contract (``docs/architecture.md`` §3.1).

Inputs are min-max scaled per column to ``[0, 1]`` (a constant column maps to
``0.5``) and targets are standardised with the population standard deviation,

.. math::

    \\tilde x_{d} = (x_d - \\min_d) / r_d, \\qquad \\tilde y = (y - \\bar y) / s_y .

Every GP computation runs on normalised data; predictions are mapped back to the
original units by :meth:`Normalizer.unnormalize_predictive`
(``mu = mu~ s_y + y_bar``, ``sigma^2 = sigma~^2 s_y^2``), and a normalised log
density of ``n`` targets becomes one of the original targets by adding
``-n log s_y`` (:meth:`Normalizer.lml_offset`).

Hyperparameters are reported in normalised units, and in original units where
the kernel in original units has the same parametric form
(:meth:`Normalizer.to_original`, by the parameter's :class:`~amorgp.core.units.Unit`):

* lengths along input column ``d`` (``Unit.INPUT``): ``l = l~ r_d`` (``None`` for a
  constant column); unit-free values (``Unit.FREE``) keep their value;
* the noise variance: ``sigma^2 = sigma~^2 s_y^2`` (:meth:`Normalizer.noise_to_original`);
* variances (``Unit.VARIANCE``): the kernel is a product over dimensions, so the factor
  ``s_y^2`` belongs to the product, not to one factor.  By convention it is assigned to
  input dimension 0: variances of dimension 0 are multiplied by ``s_y^2``, those
  of the other dimensions (unit-free factors) are unchanged.  The kernel built
  from the original-unit values is exactly the normalised one mapped back;
* values without an exact original-unit form (``Unit.INEXACT``, e.g. the variance and
  offset of a non-stationary ``LIN`` factor) are ``None``.

Which unit a kernel's parameter has is decided by the kernel grammar
(``amorgp.kernel_grammar.param_unit``), not here.

Extreme scales.  The mean and standard deviation of ``y`` are computed on ``y / max|y|``
and rescaled, so no square over- or underflows.  Original-unit variances are
``s_y^2`` times normalised ones, so targets whose standard deviation lies outside
``[Y_STD_MIN, Y_STD_MAX]`` (their variances would not be normal float64 numbers) are
refused with a :class:`~amorgp.core.errors.DataError`, as are input columns whose range
``max - min`` overflows or is subnormal.  An original-unit value that would still not be
finite is reported as ``None`` (no exact value), never as ``inf``.

Positions in error messages (rows, columns) count from 1.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from amorgp.core.errors import DataError, MissingExtraError

try:
    import torch
    from torch import Tensor
except ModuleNotFoundError as err:  # the contract returns torch tensors: core's extra
    raise MissingExtraError(
        "amorgp.core.data needs PyTorch: pip install 'amorgp-core[data]' (or torch)"
    ) from err
from amorgp.core.units import Unit
from amorgp.core.warn import warn

__all__ = [
    "MIN_POINTS",
    "Y_STD_MAX",
    "Y_STD_MIN",
    "Normalizer",
    "as_dataset",
    "as_inputs",
    "as_real",
]

MIN_POINTS = 3
"""Fewest points a training dataset may have (a GP fit to fewer is meaningless); the
fitting entry points (amortizer, baselines, ensembles) pass it to :func:`as_dataset`."""

Y_STD_MIN = 1e-150
"""Smallest target standard deviation accepted: ``s_y^2`` (and a normalised variance of
up to ``1e8`` times it) stays a normal float64 number."""

Y_STD_MAX = 1e150
"""Largest target standard deviation accepted: ``1e8 s_y^2`` stays finite."""

_TINY = float(np.finfo(np.float64).tiny)


_ComplexWarning = getattr(getattr(np, "exceptions", np), "ComplexWarning", Warning)


def _complex_error(name: str) -> DataError:
    return DataError(
        f"{name} holds complex values; complex data are not supported (as in scikit-learn): "
        "pass the real part, or the real and imaginary parts as separate columns"
    )


def _float64(a: Any, name: str) -> Tensor:
    """A float64 CPU copy of ``a``; complex values are refused, never cast (a cast would
    drop the imaginary part with only a numpy warning)."""
    if isinstance(a, Tensor):
        if a.is_complex():
            raise _complex_error(name)
        return a.detach().to("cpu", torch.float64)
    if np.iscomplexobj(a):
        raise _complex_error(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", _ComplexWarning)  # complex objects in a list
            return torch.from_numpy(np.array(a, dtype=np.float64))  # a copy: never a view
    except _ComplexWarning:
        raise _complex_error(name) from None
    except (TypeError, ValueError) as err:
        if "complex" in str(err):
            raise _complex_error(name) from None
        raise DataError(f"{name} must be numeric: {err}") from None


def as_real(a: Any, name: str, *, finite: bool = False) -> Tensor:
    """``a`` as a float64 CPU tensor (a copy); complex values are refused, never cast.

    Args:
        a: array-like or tensor.
        name: its name in messages.
        finite: also refuse NaN and infinite values (naming the first position, from 1).

    Raises:
        DataError: complex or non-numeric values (or non-finite ones with ``finite``).
    """
    out = _float64(a, name)
    if finite and not bool(torch.isfinite(out).all()):
        flat = (~torch.isfinite(out)).reshape(-1).nonzero()[0, 0]
        raise DataError(
            f"{name} contains NaN or infinite values ({float(out.reshape(-1)[flat])!r} at "
            f"position {int(flat) + 1})"
        )
    return out


def as_inputs(X: Any, *, name: str = "X", n_dims: int | None = None) -> Tensor:
    """Validate inputs and return a float64 CPU tensor ``X (n, d)``.

    A 1-D ``X`` is read as ``n`` points in one dimension.

    Args:
        X: array-like or tensor.
        name: the name of ``X`` in error messages.
        n_dims: the number of columns required (e.g. those of the training data).

    Raises:
        DataError: non-numeric values, a wrong shape, empty data, NaN or infinite
            values (with the first position; rows and columns count from 1).
    """
    Xt = _float64(X, name)
    if Xt.ndim == 1:
        Xt = Xt[:, None]
    if Xt.ndim != 2:
        raise DataError(f"{name} must have shape (n, d), got {tuple(Xt.shape)}")
    if Xt.shape[0] == 0 or Xt.shape[1] == 0:
        raise DataError(f"empty inputs: {name} has shape {tuple(Xt.shape)}")
    if n_dims is not None and Xt.shape[1] != n_dims:
        raise DataError(
            f"{name} must have shape (m, {n_dims}) (the data were fitted with {n_dims} "
            f"column(s)), got {tuple(Xt.shape)}"
        )
    bad = ~torch.isfinite(Xt)
    if bool(bad.any()):
        row, col = (int(i) + 1 for i in bad.nonzero()[0])
        raise DataError(
            f"{name} contains NaN or infinite values (first at data row {row}, column {col}; "
            "counting from 1)"
        )
    return Xt


@overload
def as_dataset(
    X: Any, y: None = None, *, name: str = ..., min_points: int = ..., training: bool = ...
) -> tuple[Tensor, None]: ...


@overload
def as_dataset(
    X: Any, y: Any, *, name: str = ..., min_points: int = ..., training: bool = ...
) -> tuple[Tensor, Tensor]: ...


def as_dataset(
    X: Any, y: Any = None, *, name: str = "X", min_points: int = 1, training: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Validate a dataset and return float64 CPU tensors ``X (n, d)`` and ``y (n,)``.

    A 1-D ``X`` is read as ``n`` points in one dimension; ``y`` may be ``(n,)`` or
    ``(n, 1)``, or ``None`` for inputs only (test points), returned as ``None``.

    Args:
        X: inputs (see :func:`as_inputs`).
        y: targets, or ``None``.
        name: the name of ``X`` in error messages.
        min_points: fewest rows accepted (checked for training data only).
        training: the data are to be fitted: at least ``min_points`` rows and a
            non-constant target.

    Raises:
        DataError: non-numeric values, wrong shapes, mismatched lengths, empty data,
            NaN or infinite values (first data row, counting from 1), too few rows or a
            constant target (training).
    """
    Xt = as_inputs(X, name=name)
    if training and Xt.shape[0] < min_points:
        raise DataError(f"need at least {min_points} data points, got {Xt.shape[0]}")
    if y is None:
        return Xt, None
    yt = _float64(y, "y")
    if yt.ndim == 2 and yt.shape[1] == 1:
        yt = yt[:, 0]
    if yt.ndim != 1:
        raise DataError(f"y must have shape (n,), got {tuple(yt.shape)}")
    if Xt.shape[0] != yt.shape[0]:
        raise DataError(f"{name} has {Xt.shape[0]} rows but y has {yt.shape[0]} values")
    bad = ~torch.isfinite(yt)
    if bool(bad.any()):
        raise DataError(
            f"y contains NaN or infinite values (first at data row "
            f"{int(bad.nonzero()[0, 0]) + 1}; counting from 1)"
        )
    if training and bool((yt == yt[0]).all()):
        raise DataError("y is constant; a GP needs targets that vary")
    return Xt, yt


def _mean_std(y: Tensor) -> tuple[float, float]:
    """Mean and population standard deviation of ``y (n,)`` without over- or underflow.

    Both are computed on ``u = y / c`` with ``c = max|y|`` (entries in ``[-1, 1]``) and
    multiplied back by ``c``; the standard deviation of ``u`` uses ``u - mean(u)``
    scaled by its own maximum before squaring.
    """
    c = float(y.abs().max())
    if c == 0.0:
        return 0.0, 0.0
    u = y / c
    mu = u.mean()
    dev = u - mu
    m = float(dev.abs().max())
    if m == 0.0:
        return float(mu) * c, 0.0
    s = m * float(((dev / m) ** 2).mean().sqrt())
    return float(mu) * c, s * c


@dataclass(frozen=True)
class Normalizer:
    """Min-max input scaling and target standardisation, fitted on training data.

    Attributes:
        x_min: ``(d,)`` column minima.
        x_range: ``(d,)`` column ranges ``max - min`` (0 for a constant column).
        y_mean: target mean.
        y_std: target standard deviation (1 if the targets are constant).
    """

    x_min: Tensor
    x_range: Tensor
    y_mean: float
    y_std: float

    @classmethod
    def fit(cls, X: Any, y: Any) -> Normalizer:
        """Fit on ``X (n, d)`` and ``y (n,)`` (arrays or tensors, validated by :func:`as_dataset`).

        Warns (``UserWarning``) about constant input columns, whose hyperparameters the
        data cannot determine.

        Raises:
            DataError: invalid data (see :func:`as_dataset`), an input column whose range
                overflows float64 or is subnormal, or targets whose standard deviation is
                outside ``[Y_STD_MIN, Y_STD_MAX]``.
        """
        X, y = as_dataset(X, y)
        x_min, x_max = X.min(0).values, X.max(0).values
        x_range = x_max - x_min
        bad = ~torch.isfinite(x_range) | ((x_range > 0) & (x_range < _TINY))
        if bool(bad.any()):
            j = int(bad.nonzero()[0, 0])
            raise DataError(
                f"input column {j + 1} spans [{float(x_min[j]):.6g}, {float(x_max[j]):.6g}], "
                "a range that float64 cannot represent; rescale the inputs"
            )
        const = (x_range == 0).nonzero()[:, 0]
        if const.numel() and X.shape[0] > 1:
            cols = ", ".join(str(int(j) + 1) for j in const)
            warn(
                f"input column(s) {cols} (counting from 1) are constant: they carry no "
                "information and their hyperparameters are not determined by the data; "
                "consider dropping them",
                UserWarning,
            )
        mean, std = _mean_std(y)
        if std > 0 and not Y_STD_MIN <= std <= Y_STD_MAX:
            raise DataError(
                f"the targets' standard deviation {std:.3g} is outside [{Y_STD_MIN:g}, "
                f"{Y_STD_MAX:g}]: variances in their units would not be representable in "
                "float64; rescale y"
            )
        return cls(x_min, x_range, mean, std if std > 0 else 1.0)

    @classmethod
    def identity(cls, d: int) -> Normalizer:
        """A normaliser that changes nothing (for data that is already normalised)."""
        return cls(
            torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64), 0.0, 1.0
        )

    @property
    def n_dims(self) -> int:
        return int(self.x_min.numel())

    def transform_x(self, X: Any) -> Tensor:
        """``(X - min) / range`` per column as float64; a constant training column maps to 0.5.

        Raises:
            DataError: wrong number of columns, or points so far outside the training
                range that their normalised value is not finite.
        """
        X = torch.as_tensor(X, dtype=torch.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.shape[-1] != self.n_dims:
            raise DataError(
                f"X has {X.shape[-1]} columns; the data were fitted with {self.n_dims} column(s)"
            )
        const = self.x_range <= 0
        scaled = (X - self.x_min) / torch.where(const, torch.ones_like(self.x_range), self.x_range)
        out = torch.where(const, torch.full_like(scaled, 0.5), scaled)
        if not bool(torch.isfinite(out).all()):
            raise DataError(
                "X lies so far outside the training inputs' range that its normalised "
                "value overflows float64"
            )
        return out

    def transform_y(self, y: Any) -> Tensor:
        """``(y - mean) / std`` as float64."""
        return (torch.as_tensor(y, dtype=torch.float64) - self.y_mean) / self.y_std

    def unnormalize_predictive(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Map a predictive ``(mean, variance)`` from normalised to original units."""
        return mean * self.y_std + self.y_mean, var * self.y_std * self.y_std

    def log_density_offset(self) -> float:
        """``-log(std)``: add it per point to a normalised log density to get original units."""
        return -math.log(self.y_std)

    def lml_offset(self, n: int) -> float:
        """``-n log s_y``: add to a normalised log marginal likelihood of ``n`` points."""
        return n * self.log_density_offset()

    def noise_to_original(self, value: float) -> float:
        """The noise variance in original units, ``value * s_y^2``."""
        return value * self.y_std * self.y_std

    def to_original(self, dim: int, unit: Unit, value: float) -> float | None:
        """One kernel hyperparameter in original units, or ``None`` where no exact map exists.

        Args:
            dim: input dimension of the parameter.
            unit: how it scales (for a kernel's parameter:
                ``amorgp.kernel_grammar.BaseSymbol.param_units[slot]``).
            value: the value in normalised units.

        See the module docstring for the rules; a value that would not be finite in
        original units is ``None`` too.
        """
        if unit is Unit.INPUT:
            r = float(self.x_range[dim])
            out = value * r if r > 0 else None
        elif unit is Unit.FREE:
            out = value
        elif unit is Unit.VARIANCE:
            out = value * self.y_std * self.y_std if dim == 0 else value
        else:
            out = None
        return out if out is None or math.isfinite(out) else None
