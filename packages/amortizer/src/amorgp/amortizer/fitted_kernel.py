"""The fitted kernel of :class:`~amorgp.amortizer.AmortizedGPRegressor` as a readable object.

``AmortizedGPRegressor.kernel_`` is a :class:`FittedKernel`: a small tree

.. code-block:: text

    Sum(Product(Sum(base kernels of column 0), Sum(... column 1), ...), WhiteNoise)

whose hyperparameters follow scikit-learn's ``GaussianProcessRegressor(normalize_y=True)``
convention: the kernel acts on the **original inputs**, and its variances (and the noise
level) are in units of the **standardised targets** ``(y - mean) / std`` (population
standard deviation, as scikit-learn's ``normalize_y``).  Internally the model scales
every input column to ``[0, 1]`` (``x~ = (x - min) / range``); in the kernel's units

* lengthscales and periods of column ``d`` are multiplied by its range ``r_d`` (the
  lengthscale of a ``PER`` factor divides ``sin^2(pi r / p)``, is unit-free and keeps its
  value);
* a ``LIN`` factor is ``((x - center) / scale) ((x' - center) / scale) + c^2`` with
  ``center = min`` and ``scale = range`` of its column, shown in its ``repr``; its variance
  and offset are those of the scaled column;
* variances and the noise level are unchanged (standardised-target units).

``theta`` is the log of every hyperparameter in this order: the structure's parameters by
(column, addend, slot), then the noise level (scikit-learn's convention: log space).

Mapping to scikit-learn's kernels (:meth:`FittedKernel.to_sklearn`):

=========  ==========================================================================
ours       scikit-learn
=========  ==========================================================================
SE         ``ConstantKernel(s^2) * RBF(length_scale=l)``
PER        ``ExpSineSquared(length_scale=2 l, periodicity=p)`` (ours divides
           ``sin^2`` by ``2 l^2``, scikit-learn multiplies it by ``2 / l_sk^2``)
MAT52      ``Matern(length_scale=l, nu=2.5)``
RQ         ``RationalQuadratic(length_scale=l, alpha=alpha)``
LIN        ``DotProduct(sigma_0=c * scale)`` times ``1 / scale^2``; only for a column whose
           minimum is 0 (scikit-learn's kernels cannot shift the inputs)
A*B        ``ConstantKernel(s^2) * A * B`` (one variance per product symbol)
noise      ``WhiteKernel(noise_level=sigma^2)``
=========  ==========================================================================

scikit-learn's kernels act on every column, so only a one-column structure, or one
``SE`` per column (an ARD ``RBF``), converts; anything else raises ``ValueError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from amorgp.kernel_grammar import DimWiseStructure, base_symbol
from amorgp.lazy_kernels import DimWiseKernel, Normalizer
from amorgp.lazy_kernels.data import as_real

__all__ = ["BaseKernel", "FittedKernel", "Product", "Sum", "WhiteNoise"]

_BOUNDS = (1e-5, 1e5)
"""Bounds of every hyperparameter, kernel units (scikit-learn's default)."""


def _fmt(x: float) -> str:
    return f"{x:.4g}"


@dataclass(frozen=True, repr=False)
class BaseKernel:
    """One base symbol (``SE``, ``SE*PER``...) on one input column.

    Attributes:
        symbol: the base symbol's name.
        dim: the input column (from 0).
        params: ``(name, value)`` of each parameter in the symbol's slot order, kernel units.
        center, scale: the column's minimum and range (``x~ = (x - center) / scale``); they
            matter to ``LIN`` factors only and are not hyperparameters.
    """

    symbol: str
    dim: int
    params: tuple[tuple[str, float], ...]
    center: float
    scale: float

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params)
        if "LIN" in base_symbol(self.symbol).factors:
            inner += f", center={_fmt(self.center)}, scale={_fmt(self.scale)}"
        return f"{self.symbol}@{self.dim}({inner})"


@dataclass(frozen=True, repr=False)
class Sum:
    """A sum of kernels."""

    terms: tuple[Any, ...]

    def __repr__(self) -> str:
        return " + ".join(repr(t) for t in self.terms)


@dataclass(frozen=True, repr=False)
class Product:
    """A product of kernels."""

    factors: tuple[Any, ...]

    def __repr__(self) -> str:
        return " * ".join(
            f"({f!r})" if isinstance(f, Sum) and len(f.terms) > 1 else repr(f) for f in self.factors
        )


@dataclass(frozen=True, repr=False)
class WhiteNoise:
    """Observation noise ``sigma^2 I`` (standardised-target units)."""

    noise_level: float

    def __repr__(self) -> str:
        return f"WhiteNoise(noise_level={_fmt(self.noise_level)})"


class FittedKernel:
    """The kernel and noise of a fitted :class:`~amorgp.amortizer.AmortizedGPRegressor`.

    Args:
        structure: the fitted structure.
        params: ``(D, L, P)`` parameters, normalised units.
        noise: noise variance, normalised units.
        normalizer: the data normalisation of the fit.

    Attributes:
        kernel: the tree ``Sum(Product(Sum(...) per column), WhiteNoise)``.
    """

    def __init__(
        self, structure: DimWiseStructure, params: Tensor, noise: float, normalizer: Normalizer
    ) -> None:
        self.structure = structure
        self.normalizer = normalizer
        self._params = params.detach().to("cpu", torch.float64).clone()
        self._noise = float(noise)
        names = structure.param_names()
        self._index = tuple(
            torch.tensor([getattr(n, k) for n in names], dtype=torch.long)
            for k in ("dim", "addend", "slot")
        )
        self._factor = torch.tensor(
            [*(self._unit_factor(n.dim, n.symbol, n.slot) for n in names), 1.0],
            dtype=torch.float64,
        )
        values = [float(self._params[n.dim, n.addend, n.slot]) for n in names]
        self._values = np.array([*values, self._noise]) * self._factor.numpy()
        self._names = [f"d{n.dim}.{n.addend}.{n.symbol}.{n.param}" for n in names] + ["noise_level"]
        columns = []
        i = 0
        for d, addends in enumerate(structure.dims):
            terms = []
            for s in addends:
                sym = base_symbol(s)
                k = len(sym.params)
                terms.append(
                    BaseKernel(
                        s,
                        d,
                        tuple(
                            (p, float(v))
                            for p, v in zip(sym.param_names, self._values[i : i + k], strict=True)
                        ),
                        float(normalizer.x_min[d]),
                        self._range(d),
                    )
                )
                i += k
            columns.append(Sum(tuple(terms)))
        self.kernel = Sum((Product(tuple(columns)), WhiteNoise(float(self._values[-1]))))

    def _range(self, d: int) -> float:
        r = float(self.normalizer.x_range[d])
        return r if r > 0 else 1.0

    def _unit_factor(self, d: int, symbol: str, slot: int) -> float:
        """Kernel-unit value / normalised value of one parameter (see the module docstring)."""
        sym = base_symbol(symbol)
        spec = sym.params[slot]
        if spec.kind.value not in ("lengthscale", "period"):
            return 1.0
        if "PER" in sym.factors and sym.factor_param_names("PER")["lengthscale"] == spec.name:
            return 1.0
        return self._range(d)

    # -- scikit-learn's kernel interface ---------------------------------------------------
    @property
    def n_dims(self) -> int:
        return self.structure.n_dims

    @property
    def theta(self) -> np.ndarray:
        """Log of every hyperparameter (structure order, then the noise level), ``(n,)``."""
        return np.log(self._values)

    @property
    def bounds(self) -> np.ndarray:
        """Log-space bounds ``(n, 2)`` of ``theta`` (scikit-learn's default ``(1e-5, 1e5)``)."""
        return np.log(np.tile(np.array(_BOUNDS), (self._values.size, 1)))

    @property
    def hyperparameter_names(self) -> list[str]:
        """``"d<col>.<addend>.<symbol>.<param>"`` per kernel parameter, then ``"noise_level"``."""
        return list(self._names)

    def get_params(self, deep: bool = True) -> dict[str, float]:
        """Every hyperparameter by name (see :attr:`hyperparameter_names`), kernel units."""
        return dict(zip(self._names, (float(v) for v in self._values), strict=True))

    def __repr__(self) -> str:
        return repr(self.kernel)

    def params_from_theta(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``(params (D, L, P), noise)`` in normalised units for a log-space ``theta``
        (differentiable)."""
        if theta.shape != (self._values.size,):
            raise ValueError(
                f"theta must have shape ({self._values.size},) (the kernel's hyperparameters "
                f"then the noise level), got {tuple(theta.shape)}"
            )
        values = theta.exp() / self._factor.to(theta)
        params = self._params.to(theta).index_put(self._index, values[:-1])
        return params, values[-1]

    def __call__(self, X: Any, Y: Any = None) -> np.ndarray:
        """Covariance ``(n, m)`` of the kernel alone (no noise) on original-unit inputs."""
        Xn = self.normalizer.transform_x(as_real(X, "X"))
        Yn = None if Y is None else self.normalizer.transform_x(as_real(Y, "Y"))
        k = DimWiseKernel(self.structure, self._params)
        with torch.no_grad():
            return k(Xn, Yn).numpy()

    # -- scikit-learn ------------------------------------------------------------------------
    def to_sklearn(self) -> Any:
        """The same kernel (with ``WhiteKernel`` noise) as a scikit-learn kernel.

        ``GaussianProcessRegressor(kernel=k.to_sklearn(), normalize_y=True, optimizer=None,
        alpha=0)`` fitted on the same data then predicts as the estimator does.

        Raises:
            ValueError: a structure scikit-learn's kernels cannot express (several columns
                other than one ``SE`` each, a ``LIN`` factor on a column whose minimum is not
                0, a constant input column).
            ImportError: scikit-learn is not installed.
        """
        from sklearn.gaussian_process import kernels as sk

        noise = sk.WhiteKernel(noise_level=float(self._values[-1]), noise_level_bounds="fixed")
        const = [d for d in range(self.n_dims) if float(self.normalizer.x_range[d]) <= 0]
        if const:
            raise ValueError(
                f"input column {const[0] + 1} is constant: the model ignores it, scikit-learn's "
                "kernels cannot; drop the column"
            )
        dims = self.structure.dims
        product, columns = self.kernel.terms[0], []
        assert isinstance(product, Product)
        for col in product.factors:
            columns.append(col.terms)
        if self.n_dims == 1:
            total = None
            for term in columns[0]:
                part = _sk_term(term, sk)
                total = part if total is None else total + part
            return total + noise
        if all(a == ("SE",) for a in dims):
            variance = math.prod(t[0].params[0][1] for t in columns)
            lengths = [t[0].params[1][1] for t in columns]
            return sk.ConstantKernel(variance, "fixed") * sk.RBF(lengths, "fixed") + noise
        raise ValueError(
            f"{self.structure} has no scikit-learn equivalent: scikit-learn's kernels act on "
            "every column, so only one-column structures or one SE per column convert"
        )


def _sk_term(term: BaseKernel, sk: Any) -> Any:
    """One base kernel on a one-column input as a scikit-learn kernel product."""
    sym = base_symbol(term.symbol)
    p = dict(term.params)
    variance = p["variance"]
    parts: list[Any] = []
    for f in sym.factors:
        names = sym.factor_param_names(f)
        q = {k: p[v] for k, v in names.items()}
        if f == "SE":
            parts.append(sk.RBF(q["lengthscale"], "fixed"))
        elif f == "PER":
            parts.append(sk.ExpSineSquared(2.0 * q["lengthscale"], q["period"], "fixed", "fixed"))
        elif f == "MAT52":
            parts.append(sk.Matern(q["lengthscale"], "fixed", nu=2.5))
        elif f == "RQ":
            parts.append(sk.RationalQuadratic(q["lengthscale"], q["alpha"], "fixed", "fixed"))
        elif f == "LIN":
            if term.center != 0.0:
                raise ValueError(
                    f"LIN on column {term.dim + 1}, whose minimum is {term.center:g}, has no "
                    "scikit-learn equivalent (DotProduct cannot shift the inputs)"
                )
            if len(sym.factors) == 1:  # s^2 x~ x~' + c^2 = (s^2 / r^2) (x x' + c^2 r^2 / s^2)
                variance = variance / term.scale**2
                sigma0 = math.sqrt(q["offset"] / variance)
            else:  # x~ x~' + c^2 = (x x' + c^2 r^2) / r^2
                variance = variance / term.scale**2
                sigma0 = math.sqrt(q["offset"]) * term.scale
            parts.append(sk.DotProduct(sigma0, "fixed"))
        else:  # pragma: no cover - a newly registered elementary kernel
            raise ValueError(f"{f} has no scikit-learn equivalent")
    out = sk.ConstantKernel(variance, "fixed")
    for part in parts:
        out = out * part
    return out
