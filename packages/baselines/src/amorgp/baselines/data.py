"""Dataset validation and the normalisation contract (ARCHITECTURE §3).

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
(:meth:`Normalizer.to_original`):

* lengthscales and periods of column ``d``: ``l = l~ r_d`` (``None`` for a
  constant column); the lengthscale of a ``PER`` factor divides
  ``sin^2(pi r / p)``, is unit-free and keeps its value;
* the noise variance: ``sigma^2 = sigma~^2 s_y^2`` (:meth:`Normalizer.noise_to_original`);
* variances: the kernel is a product over dimensions, so the factor ``s_y^2``
  belongs to the product, not to one factor.  By convention it is assigned to
  input dimension 0: variances of dimension 0 are multiplied by ``s_y^2``, those
  of the other dimensions (unit-free factors) are unchanged.  The kernel built
  from the original-unit values is exactly the normalised one mapped back;
* ``LIN``: ``x~ x~' = (x - m)(x' - m) / r^2`` is not of the form
  ``a x x' + b`` unless the column minimum is 0, so a ``LIN``-containing
  symbol's variance and offset have no exact original-unit value (``None``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from amorgp.kernel_grammar import base_symbol

__all__ = ["Normalizer", "as_dataset", "as_inputs", "train_test_split"]


def _float64(a: Any, name: str) -> Tensor:
    if isinstance(a, Tensor):
        return a.detach().to("cpu", torch.float64)
    try:
        return torch.as_tensor(np.asarray(a, dtype=np.float64))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric: {err}") from None


def as_inputs(X: Any, *, name: str = "X") -> Tensor:
    """Validate inputs and return a float64 CPU tensor ``X (n, d)``.

    A 1-D ``X`` is read as ``n`` points in one dimension.

    Raises:
        ValueError: non-numeric values, a wrong shape, empty data, NaN or infinite
            values (with the first position).
    """
    Xt = _float64(X, name)
    if Xt.ndim == 1:
        Xt = Xt[:, None]
    if Xt.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d), got {tuple(Xt.shape)}")
    if Xt.shape[0] == 0 or Xt.shape[1] == 0:
        raise ValueError(f"empty inputs: {name} has shape {tuple(Xt.shape)}")
    bad = ~torch.isfinite(Xt)
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} contains NaN or infinite values (first at row {row}, column {col})"
        )
    return Xt


def as_dataset(
    X: Any, y: Any, *, name: str = "X", min_points: int = 1, training: bool = False
) -> tuple[Tensor, Tensor]:
    """Validate a dataset and return float64 CPU tensors ``X (n, d)`` and ``y (n,)``.

    A 1-D ``X`` is read as ``n`` points in one dimension; ``y`` may be ``(n,)`` or
    ``(n, 1)``.

    Args:
        X: inputs (see :func:`as_inputs`).
        y: targets.
        name: the name of ``X`` in error messages.
        min_points: fewest rows accepted (checked for training data only).
        training: the data are to be fitted: at least ``min_points`` rows and a
            non-constant target.

    Raises:
        ValueError: non-numeric values, wrong shapes, mismatched lengths, empty data,
            NaN or infinite values, too few rows or a constant target (training).
    """
    Xt = as_inputs(X, name=name)
    yt = _float64(y, "y")
    if yt.ndim == 2 and yt.shape[1] == 1:
        yt = yt[:, 0]
    if yt.ndim != 1:
        raise ValueError(f"y must have shape (n,), got {tuple(yt.shape)}")
    if Xt.shape[0] != yt.shape[0]:
        raise ValueError(f"{name} has {Xt.shape[0]} rows but y has {yt.shape[0]} values")
    if training and Xt.shape[0] < min_points:
        raise ValueError(f"need at least {min_points} data points, got {Xt.shape[0]}")
    bad = ~torch.isfinite(yt)
    if bool(bad.any()):
        raise ValueError(
            f"y contains NaN or infinite values (first at row {int(bad.nonzero()[0, 0])})"
        )
    if training and bool((yt == yt[0]).all()):
        raise ValueError("y is constant; a GP needs targets that vary")
    return Xt, yt


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
        """Fit on ``X (n, d)`` and ``y (n,)`` (arrays or tensors, validated by :func:`as_dataset`)."""
        X, y = as_dataset(X, y)
        x_min = X.min(0).values
        x_range = X.max(0).values - x_min
        std = float(y.std(unbiased=False)) if y.numel() > 1 else 0.0
        return cls(x_min, x_range, float(y.mean()), std if std > 0 else 1.0)

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
        """``(X - min) / range`` per column as float64; a constant training column maps to 0.5."""
        X = torch.as_tensor(X, dtype=torch.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.shape[-1] != self.n_dims:
            raise ValueError(
                f"X has {X.shape[-1]} columns; the data were fitted with {self.n_dims} column(s)"
            )
        const = self.x_range <= 0
        scaled = (X - self.x_min) / torch.where(const, torch.ones_like(self.x_range), self.x_range)
        return torch.where(const, torch.full_like(scaled, 0.5), scaled)

    def transform_y(self, y: Any) -> Tensor:
        """``(y - mean) / std`` as float64."""
        return (torch.as_tensor(y, dtype=torch.float64) - self.y_mean) / self.y_std

    def unnormalize_predictive(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Map a predictive ``(mean, variance)`` from normalised to original units."""
        return mean * self.y_std + self.y_mean, var * self.y_std**2

    def log_density_offset(self) -> float:
        """``-log(std)``: add it per point to a normalised log density to get original units."""
        return -math.log(self.y_std)

    def lml_offset(self, n: int) -> float:
        """``-n log s_y``: add to a normalised log marginal likelihood of ``n`` points."""
        return n * self.log_density_offset()

    def noise_to_original(self, value: float) -> float:
        """The noise variance in original units, ``value * s_y^2``."""
        return value * self.y_std**2

    def to_original(self, dim: int, symbol: str, slot: int, value: float) -> float | None:
        """One kernel hyperparameter in original units, or ``None`` where no exact map exists.

        Args:
            dim: input dimension of the parameter.
            symbol: its base symbol (e.g. ``"SE*PER"``).
            slot: its slot in ``base_symbol(symbol).params``.
            value: the value in normalised units.

        See the module docstring for the rules.
        """
        sym = base_symbol(symbol)
        spec = sym.params[slot]
        if spec.kind.value in ("lengthscale", "period"):
            factor = next(
                (f, e)
                for f in sym.factors
                for e, n in sym.factor_param_names(f).items()
                if n == spec.name
            )
            if factor == ("PER", "lengthscale"):  # divides sin^2(pi r / p): unit-free
                return value
            r = float(self.x_range[dim])
            return value * r if r > 0 else None
        if "LIN" in sym.factors:
            return None
        if spec.kind.value == "variance":
            return value * self.y_std**2 if dim == 0 else value
        return None


def train_test_split(
    n: int, n_train: int, n_test_max: int | None, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Uniform random split of ``range(n)``: ``n_train`` indices, the rest (capped) for testing.

    Raises:
        ValueError: if ``n_train`` is not in ``1..n-1``.
    """
    if not 0 < n_train < n:
        raise ValueError(f"n_train must be in 1..{n - 1}, got {n_train}")
    perm = torch.randperm(n, generator=generator)
    test = perm[n_train:]
    if n_test_max is not None:
        test = test[:n_test_max]
    return perm[:n_train], test
