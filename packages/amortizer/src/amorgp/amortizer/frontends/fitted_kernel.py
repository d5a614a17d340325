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

**One output scale, no redundant variances** (:class:`Folding`).  The structure is a
product over columns of sums, ``prod_d sum_l v_dl kt_dl``, and every base symbol carries
its own variance ``v_dl``; multiplying one column's sum by ``a`` and another's by ``1 / a``
leaves the kernel unchanged, so ``D - 1`` combinations of the variances are not
identifiable.  ``kernel_`` shows the identifiable ones only, as scikit-learn's
``ConstantKernel(s^2) * RBF(length_scale=[l_1, ..., l_D])`` does for an ARD ``SE``
(1 output scale + ``D`` lengthscales + the noise level: 7 entries of ``theta`` at
``D = 5``, not 11):

==========================  ================================================================
hyperparameter              value (``v_dl``: the variance of addend ``l`` of column ``d``)
==========================  ================================================================
``d0.<l>.<sym>.variance``   ``v_0l * prod_{d>=1} v_d0``: the **output scale** of the product
                            term through addend ``l`` of column 0 and the first addend of
                            every other column; one entry for one symbol per column
``d<d>.0.<sym>.*``          (``d >= 1``) the first addend of every other column has no
                            variance entry: it is 1 and the column's scale is in column 0's
``d<d>.<l>.<sym>.weight``   (``d >= 1``, ``l >= 1``) ``v_dl / v_d0``: the addend's weight
                            relative to its column's first addend (unit-free)
``...offset`` of ``LIN``    a ``LIN`` alone is ``v x x' + c^2``: its offset scales with its
                            column as a variance does (column 0: times ``prod_{d>=1} v_d0``;
                            others: divided by ``v_d0``)
lengthscales, periods...    unchanged (kernel units above)
``noise_level``             ``sigma^2``
==========================  ================================================================

A one-column structure has nothing redundant and is shown as fitted: ``SE + PER`` has two
variances, as scikit-learn's ``ConstantKernel * RBF + ConstantKernel * ExpSineSquared``.
The kernel the folded values define is the fitted one (:meth:`FittedKernel.__call__`,
tested against the unfolded reference), and :meth:`FittedKernel.params_from_theta` maps a
folded ``theta`` back to a full parameter set (each other column's first variance 1).

``theta`` is the log of every hyperparameter above in this order: the structure's
parameters by (column, addend, slot), then the noise level (scikit-learn's convention: log
space).  ``bounds`` are scikit-learn's default ``(1e-5, 1e5)``, widened to hold the value
where it lies outside (the noise level's floor is ``1e-6``), except where the fit was
constrained (``limits``: the estimator's ``fixed``/``bounds``): an entry that is one
constrained parameter times its unit factor (every entry of a one-column structure; the
lengthscales, periods and noise of any) shows its bounds in kernel units, a fixed one
``(value, value)`` (its :attr:`FittedKernel.hyperparameters` entry ``fixed``).

Mapping to scikit-learn's kernels (:meth:`FittedKernel.to_sklearn`; every hyperparameter
free, with the same bounds, so ``to_sklearn().theta`` has the entries of ``theta``).  Each
elementary factor converts by the ``sklearn`` entry of its lazy-kernels registration
(:class:`~amorgp.lazy_kernels.TorchElementary`); the built-in kernels':

=========  ==========================================================================
ours       scikit-learn (``theta`` entries: the same, in the same order, unless noted)
=========  ==========================================================================
SE         ``ConstantKernel(s^2) * RBF(length_scale=l)``
ARD SE     ``ConstantKernel(s^2) * RBF(length_scale=[l_0, ..., l_{D-1}])`` for one ``SE`` per
           column; ``s^2`` is column 0's (folded) variance
PER        ``ExpSineSquared(length_scale=2 l, periodicity=p)`` (ours divides
           ``sin^2`` by ``2 l^2``, scikit-learn multiplies it by ``2 / l_sk^2``): its
           ``theta`` entry is ours plus ``log 2``
MAT52      ``Matern(length_scale=l, nu=2.5)``
RQ         ``RationalQuadratic(length_scale=l, alpha=alpha)``
LIN        ``DotProduct(sigma_0=c * scale)`` times ``1 / scale^2``; only for a column whose
           minimum is 0 (scikit-learn's kernels cannot shift the inputs); its ``theta``
           entries are other functions of ours (``ConstantKernel`` ``s^2 / scale^2``,
           ``sigma_0`` as in :func:`_sk_term`)
A*B        ``ConstantKernel(s^2) * A * B`` (one variance per product symbol)
noise      ``WhiteKernel(noise_level=sigma^2)``
=========  ==========================================================================

scikit-learn's kernels act on every column, so only a one-column structure, or one
``SE`` per column (an ARD ``RBF``; any stationary kernel whose registration sets
``sklearn_ard``), converts; anything else raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from amorgp.core.data import Normalizer, as_real
from amorgp.kernel_grammar import ELEMENTARY, DimWiseStructure, ParamKind, base_symbol
from amorgp.lazy_kernels import DimWiseKernel

__all__ = [
    "BaseKernel",
    "FittedKernel",
    "FoldedName",
    "Folding",
    "KernelHyperparameter",
    "Product",
    "Sum",
    "WhiteNoise",
]

_BOUNDS = (1e-5, 1e5)
"""Bounds of every hyperparameter, kernel units (scikit-learn's default), widened to hold
the value."""


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _bounds(value: float) -> tuple[float, float]:
    """scikit-learn's default bounds, widened to hold ``value``."""
    return (min(_BOUNDS[0], value), max(_BOUNDS[1], value))


def _is_amplitude(symbol: str, slot: int) -> bool:
    """Does this parameter scale with its column's sum (a variance, or a ``LIN``'s offset)?"""
    if slot == 0:
        return True
    sym = base_symbol(symbol)
    return (
        len(sym.factors) == 1
        and not ELEMENTARY[sym.factors[0]].variance_scales_all
        and sym.params[slot].kind is ParamKind.OFFSET
    )


class FoldedName(NamedTuple):
    """One hyperparameter of the folded parameterisation (see the module docstring).

    ``param`` is the symbol's parameter name, or ``"weight"`` for the variance of a later
    addend of a column other than 0 (relative to the column's first addend).
    """

    dim: int
    addend: int
    symbol: str
    param: str
    kind: str

    def __str__(self) -> str:
        return f"d{self.dim}.{self.addend}.{self.symbol}.{self.param}"


class Folding:
    """The identifiable hyperparameters of a structure: one output scale per product term.

    ``fold`` maps the structure's parameter values (the order of
    :meth:`~amorgp.kernel_grammar.DimWiseStructure.param_names`) to the folded ones of
    :attr:`names` (the rules of the module docstring); ``unfold_log`` maps folded log
    values back to full ones, each column's first variance (``d >= 1``) set to 1.  A
    one-column structure folds to itself.

    Args:
        structure: the structure.

    Attributes:
        names: the folded hyperparameters, in order.
    """

    def __init__(self, structure: DimWiseStructure) -> None:
        full = structure.param_names()
        ref = {n.dim: i for i, n in enumerate(full) if n.dim >= 1 and n.addend == 0 and n.slot == 0}
        names: list[FoldedName] = []
        rules: list[tuple[int, tuple[int, ...], int | None]] = []
        for i, n in enumerate(full):
            if ref.get(n.dim) == i:
                continue
            kind = base_symbol(n.symbol).params[n.slot].kind.value
            param, over = n.param, None
            times: tuple[int, ...] = ()
            if _is_amplitude(n.symbol, n.slot):
                if n.dim == 0:
                    times = tuple(ref.values())
                else:
                    over = ref[n.dim]
                    if n.slot == 0:
                        param, kind = "weight", "weight"
            names.append(FoldedName(n.dim, n.addend, n.symbol, param, kind))
            rules.append((i, times, over))
        self.structure = structure
        self.names: tuple[FoldedName, ...] = tuple(names)
        self._rules = tuple(rules)
        self._n_full = len(full)
        self._keep = torch.tensor([r[0] for r in rules], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.names)

    def fold(self, values: Sequence[float | None]) -> list[float | None]:
        """Folded values from the structure's (``None`` wherever a value used is ``None``)."""
        if len(values) != self._n_full:
            raise ValueError(
                f"{self.structure} has {self._n_full} parameters, got {len(values)} values"
            )
        out: list[float | None] = []
        for i, times, over in self._rules:
            used = [values[j] for j in (i, *times, *(() if over is None else (over,)))]
            if any(v is None for v in used):
                out.append(None)
                continue
            v = float(values[i])  # type: ignore[arg-type]
            for j in times:
                v *= float(values[j])  # type: ignore[arg-type]
            if over is not None:
                v /= float(values[over])  # type: ignore[arg-type]
            out.append(v)
        return out

    def unfold_log(self, theta: Tensor) -> Tensor:
        """Full log values ``(n_full,)`` from folded log values ``(len(self),)``
        (differentiable; each other column's first variance is 1, log 0)."""
        return theta.new_zeros(self._n_full).index_put((self._keep.to(theta.device),), theta)


class KernelHyperparameter(NamedTuple):
    """One entry of :attr:`FittedKernel.hyperparameters` (the fields of scikit-learn's
    ``Hyperparameter``; ours lists one per scalar, so ``n_elements`` is 1)."""

    name: str
    value_type: str
    bounds: np.ndarray
    n_elements: int
    fixed: bool


@dataclass(frozen=True, repr=False)
class BaseKernel:
    """One base symbol (``SE``, ``SE*PER``...) on one input column.

    Attributes:
        symbol: the base symbol's name.
        dim: the input column (from 0).
        params: ``(name, value)`` of each of its hyperparameters (folded, see
            :class:`Folding`: a later column's first addend has no variance, its other
            addends a ``weight``) in the symbol's slot order, kernel units.
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
        if not all(ELEMENTARY[f].stationary for f in base_symbol(self.symbol).factors):
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

    Its hyperparameters are the folded ones (:class:`Folding`: one output scale per
    product term, no redundant variances), in the units of the module docstring.

    Args:
        structure: the fitted structure.
        params: ``(D, L, P)`` parameters, normalised units.
        noise: noise variance, normalised units.
        normalizer: the data normalisation of the fit.
        limits: ``{name: (low, high)}`` of the fit's constraints, normalised units (names
            ``(dim, addend, param)`` or ``"noise"``; a fixed value is ``(value, value)``):
            shown by :attr:`bounds` and :attr:`hyperparameters` (see the module docstring).

    Attributes:
        kernel: the tree ``Sum(Product(Sum(...) per column), WhiteNoise)``.
        folding: the map between the structure's parameters and the hyperparameters.
    """

    def __init__(
        self,
        structure: DimWiseStructure,
        params: Tensor,
        noise: float,
        normalizer: Normalizer,
        limits: Mapping[Any, tuple[float, float]] | None = None,
    ) -> None:
        self.structure = structure
        self.normalizer = normalizer
        self.limits = dict(limits or {})
        self.folding = Folding(structure)
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
        full = [float(self._params[n.dim, n.addend, n.slot]) for n in names]
        full = [v * f for v, f in zip(full, self._factor.tolist(), strict=False)]
        folded = [float(v) for v in self.folding.fold(full)]  # type: ignore[arg-type]
        self._values = np.array([*folded, self._noise])
        self._names = [str(n) for n in self.folding.names] + ["noise_level"]
        per_addend: dict[tuple[int, int], list[tuple[str, float]]] = {}
        for n, v in zip(self.folding.names, folded, strict=True):
            per_addend.setdefault((n.dim, n.addend), []).append((n.param, v))
        columns = []
        for d, addends in enumerate(structure.dims):
            terms = tuple(
                BaseKernel(
                    s,
                    d,
                    tuple(per_addend.get((d, a), ())),
                    float(normalizer.x_min[d]),
                    self._range(d),
                )
                for a, s in enumerate(addends)
            )
            columns.append(Sum(terms))
        self.kernel = Sum((Product(tuple(columns)), WhiteNoise(float(self._values[-1]))))
        self._limits = self._kernel_limits(names)

    def _kernel_limits(self, names: Sequence[Any]) -> list[tuple[float, float] | None]:
        """Per entry of :attr:`theta`, the constrained ``(low, high)`` in kernel units, or
        ``None``: an entry that folds other parameters in keeps the default bounds."""
        out: list[tuple[float, float] | None] = []
        factor = self._factor.tolist()
        for i, times, over in self.folding._rules:
            n = names[i]
            lim = self.limits.get((n.dim, n.addend, n.param))
            out.append(
                None if lim is None or times or over is not None else _scaled(lim, factor[i])
            )
        noise = self.limits.get("noise")
        out.append(None if noise is None else _scaled(noise, 1.0))
        return out

    def _bounds_at(self, i: int) -> tuple[float, float]:
        lim = self._limits[i]
        return _bounds(float(self._values[i])) if lim is None else lim

    def _range(self, d: int) -> float:
        r = float(self.normalizer.x_range[d])
        return r if r > 0 else 1.0

    def _unit_factor(self, d: int, symbol: str, slot: int) -> float:
        """Kernel-unit value / normalised value of one parameter (see the module docstring)."""
        sym = base_symbol(symbol)
        name = sym.params[slot].name
        scaled = {
            full
            for f in sym.factors
            for e, full in sym.factor_param_names(f).items()
            if e in (ELEMENTARY[f].input_scaled or ())
        }
        return self._range(d) if name in scaled else 1.0

    # -- scikit-learn's kernel interface ---------------------------------------------------
    @property
    def n_dims(self) -> int:
        """Number of hyperparameters, the length of :attr:`theta` (scikit-learn's meaning;
        the input columns are ``structure.n_dims``)."""
        return int(self._values.size)

    @property
    def theta(self) -> np.ndarray:
        """Log of every hyperparameter (folded structure order, then the noise level), ``(n,)``."""
        return np.log(self._values)

    @property
    def bounds(self) -> np.ndarray:
        """Log-space bounds ``(n, 2)`` of ``theta``: scikit-learn's default ``(1e-5, 1e5)``,
        widened to hold the value, or the fit's own bounds (a fixed value: ``(log v, log
        v)``) in kernel units where it was constrained (see the module docstring)."""
        return np.log(np.array([self._bounds_at(i) for i in range(self._values.size)]))

    @property
    def hyperparameter_names(self) -> list[str]:
        """``"d<col>.<addend>.<symbol>.<param>"`` per kernel hyperparameter, then
        ``"noise_level"``."""
        return list(self._names)

    @property
    def hyperparameters(self) -> list[KernelHyperparameter]:
        """One :class:`KernelHyperparameter` per entry of :attr:`theta` (bounds in kernel
        units, as scikit-learn's; ``fixed`` where the fit held it fixed)."""
        out = []
        for i, name in enumerate(self._names):
            low, high = self._bounds_at(i)
            fixed = self._limits[i] is not None and low == high
            out.append(KernelHyperparameter(name, "numeric", np.array((low, high)), 1, fixed))
        return out

    def get_params(self, deep: bool = True) -> dict[str, float]:
        """Every hyperparameter by name (see :attr:`hyperparameter_names`), kernel units."""
        return dict(zip(self._names, (float(v) for v in self._values), strict=True))

    def clone_with_theta(self, theta: Any) -> FittedKernel:
        """The same structure with the hyperparameters ``exp(theta)`` (scikit-learn's
        ``clone_with_theta``; ``k.clone_with_theta(t).theta == t``)."""
        th = torch.as_tensor(np.asarray(theta, dtype=np.float64))
        params, noise = self.params_from_theta(th)
        return FittedKernel(self.structure, params, float(noise), self.normalizer, self.limits)

    def __repr__(self) -> str:
        return repr(self.kernel)

    def params_from_theta(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``(params (D, L, P), noise)`` in normalised units for a log-space ``theta``
        (differentiable; each column's first variance but column 0's is 1)."""
        if theta.shape != (self._values.size,):
            raise ValueError(
                f"theta must have shape ({self._values.size},) (the kernel's hyperparameters "
                f"then the noise level), got {tuple(theta.shape)}"
            )
        full = torch.cat([self.folding.unfold_log(theta[:-1]), theta[-1:]])
        values = full.exp() / self._factor.to(theta)
        params = self._params.to(theta).index_put(self._index, values[:-1])
        return params, values[-1]

    def __call__(self, X: Any, Y: Any = None) -> np.ndarray:
        """Covariance ``(n, m)`` of the kernel alone (no noise) on original-unit inputs."""
        Xn = self.normalizer.transform_x(as_real(X, "X", finite=True))
        Yn = None if Y is None else self.normalizer.transform_x(as_real(Y, "Y", finite=True))
        k = DimWiseKernel(self.structure, self._params)
        with torch.no_grad():
            return k(Xn, Yn).numpy()

    # -- scikit-learn ------------------------------------------------------------------------
    def to_sklearn(self) -> Any:
        """The same kernel (with ``WhiteKernel`` noise) as a scikit-learn kernel.

        Every hyperparameter is free, with scikit-learn's default bounds widened to hold the
        value (those of :attr:`bounds` for an unconstrained fit), so the result's
        ``theta`` has the entries of :attr:`theta` (equal to it for ``SE``, ARD ``SE``,
        ``MAT52`` and ``RQ``; see the module docstring for ``PER`` and ``LIN``).
        ``GaussianProcessRegressor(kernel=k.to_sklearn(), normalize_y=True, optimizer=None,
        alpha=0)`` fitted on the same data then predicts as the estimator does (with
        scikit-learn's optimizer it starts from the fitted values).

        Raises:
            ValueError: a structure scikit-learn's kernels cannot express (several columns
                other than one ``SE`` each, a ``LIN`` factor on a column whose minimum is not
                0, a constant input column).
            ImportError: scikit-learn is not installed.
        """
        from sklearn.gaussian_process import kernels as sk

        noise_level = float(self._values[-1])
        noise = sk.WhiteKernel(noise_level, _bounds(noise_level))
        n_cols = self.structure.n_dims
        const = [d for d in range(n_cols) if float(self.normalizer.x_range[d]) <= 0]
        if const:
            raise ValueError(
                f"input column {const[0] + 1} is constant: the model ignores it, scikit-learn's "
                "kernels cannot; drop the column"
            )
        product = self.kernel.terms[0]
        assert isinstance(product, Product)
        columns = [col.terms for col in product.factors]
        if n_cols == 1:
            total = None
            for term in columns[0]:
                part = _sk_term(term, sk)
                total = part if total is None else total + part
            return total + noise
        ard = _ard_factor(self.structure)
        if ard is not None:
            sym = base_symbol(ard)
            variance = dict(columns[0][0].params)["variance"]
            per_column = [dict(t[0].params) for t in columns]
            p = {e: np.array([c[full] for c in per_column]) for e, full in _names(sym, ard)}
            part, factor = _sklearn_form(ard).sklearn(sk, p, _bounds_of, 0.0, 1.0)
            variance = variance * factor
            return sk.ConstantKernel(variance, _bounds(variance)) * part + noise
        raise ValueError(
            f"{self.structure} has no scikit-learn equivalent: scikit-learn's kernels act on "
            "every column, so only one-column structures or one ARD-capable kernel (SE) per "
            "column convert"
        )


def _scaled(limit: tuple[float, float], factor: float) -> tuple[float, float]:
    return (float(limit[0]) * factor, float(limit[1]) * factor)


def _names(sym: Any, factor: str) -> list[tuple[str, str]]:
    return list(sym.factor_param_names(factor).items())


def _bounds_of(value: Any) -> Any:
    """:func:`_bounds` of a value or, elementwise, of an array of them (``(n, 2)``)."""
    if np.ndim(value) == 0:
        return _bounds(float(value))
    return np.array([_bounds(float(v)) for v in np.asarray(value).reshape(-1)])


def _sklearn_form(factor: str) -> Any:
    """The lazy-kernels registration of ``factor``, or None."""
    from amorgp.lazy_kernels import TORCH_ELEMENTARY

    return TORCH_ELEMENTARY.get(factor)


def _ard_factor(structure: DimWiseStructure) -> str | None:
    """The elementary kernel alone on every column, if its scikit-learn conversion takes
    per-column values (:attr:`~amorgp.lazy_kernels.TorchElementary.sklearn_ard`)."""
    first = structure.dims[0]
    if len(first) != 1 or any(a != first for a in structure.dims):
        return None
    sym = base_symbol(first[0])
    if len(sym.factors) != 1:
        return None
    form = _sklearn_form(sym.factors[0])
    ok = form is not None and form.sklearn is not None and form.sklearn_ard
    ok = ok and ELEMENTARY[sym.factors[0]].stationary  # no per-column normalisation needed
    return sym.factors[0] if ok else None


def _sk_term(term: BaseKernel, sk: Any) -> Any:
    """One base kernel on a one-column input as a scikit-learn kernel product (each factor
    by the scikit-learn conversion of its lazy-kernels registration)."""
    sym = base_symbol(term.symbol)
    p = dict(term.params)
    variance = p["variance"]
    parts: list[Any] = []
    for f in sym.factors:
        form = _sklearn_form(f)
        if form is None or form.sklearn is None:
            raise ValueError(
                f"{f} has no scikit-learn equivalent (its lazy-kernels registration has no "
                "sklearn conversion)"
            )
        q = {e: p[full] for e, full in _names(sym, f)}
        if len(sym.factors) == 1 and not ELEMENTARY[f].variance_scales_all:
            lead = ELEMENTARY[f].params[0].name  # alone: s^2 kt(c / s^2, ...)
            q[lead] = q[lead] / variance
        try:
            part, factor = form.sklearn(sk, q, _bounds_of, term.center, term.scale)
        except ValueError as err:
            raise ValueError(
                f"{f} on column {term.dim + 1} has no scikit-learn equivalent: {err}"
            ) from None
        variance = variance * factor
        parts.append(part)
    out = sk.ConstantKernel(variance, _bounds(variance))
    for part in parts:
        out = out * part
    return out
