"""The fit protocol: one fit-result type and the inference protocol, shared by every method.

:class:`KernelFit` is the base of every "hyperparameters of one kernel on one dataset"
result: the amortizer's ``KernelResult`` and the baselines' ``FitResult`` extend it.
It holds the fitted structure, its parameters in the padded layout ``(D, L, P)``, the
noise, the data normalisation and the time spent, and derives from them everything the
methods share: named hyperparameters in normalised and original units, a table of
:class:`Hyperparameter`, the log marginal likelihood in original units, the predictive
``predict(X_new)`` and ``log_predictive_density(X_new, y_new)`` in original units.
A subclass supplies :attr:`KernelFit.log_marginal_likelihood` and the predictive in
normalised units (:meth:`KernelFit._predict_normalized`).

:class:`HyperparameterInference` is the protocol that consumers (model averaging,
structure search) type against: "given a dataset and a list of kernels, return one
:class:`KernelFit` per kernel".

A fit is typed by the kernel grammar's :class:`~amorgp.kernel_grammar.DimWiseStructure`
(a type-only reference: this module imports nothing of the grammar at run time, and reads
the structure through its own methods: ``param_specs``, ``param_units``, ``n_dims``), so
the contract sits at the bottom of the package graph with the data contract it uses.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from amorgp.core.data import Normalizer, as_inputs, as_real
from amorgp.core.errors import DataError

if TYPE_CHECKING:
    from amorgp.kernel_grammar import DimWiseStructure

__all__ = ["Hyperparameter", "HyperparameterInference", "KernelFit"]


@dataclass(frozen=True)
class Hyperparameter:
    """One kernel hyperparameter of a fit.

    Attributes:
        dim: input dimension.
        addend: index of the addend within the dimension's sum.
        symbol: base-symbol name, e.g. ``"SE*PER"``.
        name: parameter name of the symbol, e.g. ``"per_period"``.
        kind: parameter kind (``variance``, ``lengthscale``, ``period``, ``offset``...).
        value: value in normalised units.
        original: value in original units, ``None`` where no exact finite map exists
            (see :meth:`~amorgp.core.data.Normalizer.to_original`).
    """

    dim: int
    addend: int
    symbol: str
    name: str
    kind: str
    value: float
    original: float | None


@dataclass(frozen=True, eq=False, kw_only=True)
class KernelFit(ABC):
    """Hyperparameters of one kernel on one dataset, with the GP they define.

    Attributes:
        kernel: the fitted dimension-wise structure.
        params: ``(D, L, P)`` float64 CPU kernel parameters, normalised units, in the
            padded layout of ``kernel`` (slot ``p`` of addend ``l`` of dimension ``d``).
        noise: observation-noise variance, normalised units.
        normalizer: the data normalisation (original units = its inverse).
        n_points: training points.
        time_s: wall-clock seconds attributed to this kernel: the time of the call that
            produced it divided by the number of kernels fitted together.
        call_time_s: wall-clock seconds of that whole call.

    Subclasses implement :attr:`log_marginal_likelihood` and
    :meth:`_predict_normalized`; they may override :meth:`_log_predictive_normalized`
    (e.g. a mixture density) and extend :meth:`to_dict`.
    """

    kernel: DimWiseStructure
    params: Tensor
    noise: float
    normalizer: Normalizer
    n_points: int
    time_s: float
    call_time_s: float

    # -- what a method supplies ------------------------------------------------------------
    @property
    @abstractmethod
    def log_marginal_likelihood(self) -> float:
        """``log p(y~ | theta, S)`` of the normalised targets at the fit (or a bound, e.g.
        the ELBO of a variational method)."""

    @abstractmethod
    def _predict_normalized(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        """Predictive ``(mean (m,), variance (m,))`` at normalised ``Xn (m, d)``, normalised units."""

    def _log_predictive_normalized(self, Xn: Tensor, yn: Tensor) -> Tensor:
        """``(m,)`` log density of normalised ``yn`` at ``Xn``: Gaussian by default,
        ``-1/2 (log 2 pi v + (y - mu)^2 / v)``."""
        mean, var = self._predict_normalized(Xn, True)
        return -0.5 * (math.log(2.0 * math.pi) + var.log() + (yn - mean) ** 2 / var)

    # -- derived -----------------------------------------------------------------------------
    @cached_property
    def table(self) -> tuple[Hyperparameter, ...]:
        """Every kernel hyperparameter as a :class:`Hyperparameter`, in the structure's order."""
        p, norm = self.params, self.normalizer
        out = []
        for (pn, spec), unit in zip(
            self.kernel.param_specs(), self.kernel.param_units(), strict=True
        ):
            value = float(p[pn.dim, pn.addend, pn.slot])
            out.append(
                Hyperparameter(
                    pn.dim,
                    pn.addend,
                    pn.symbol,
                    pn.param,
                    spec.kind.value,
                    value,
                    norm.to_original(pn.dim, unit, value),
                )
            )
        return tuple(out)

    @property
    def hyperparameters(self) -> dict[tuple[int, int, str], float]:
        """``(dim, addend, name) -> value`` in normalised units."""
        return {(h.dim, h.addend, h.name): h.value for h in self.table}

    @property
    def hyperparameters_original(self) -> dict[tuple[int, int, str], float | None]:
        """``(dim, addend, name) -> value`` in original units (``None`` where not exact)."""
        return {(h.dim, h.addend, h.name): h.original for h in self.table}

    @property
    def noise_original(self) -> float:
        """The noise variance in original units, ``noise * s_y^2``."""
        return self.normalizer.noise_to_original(self.noise)

    @property
    def log_marginal_likelihood_original(self) -> float:
        """The same density of the original targets: ``- n log s_y`` added."""
        return self.log_marginal_likelihood + self.normalizer.lml_offset(self.n_points)

    @property
    def kernel_text(self) -> str:
        """The kernel as text: ``"SE + PER"`` if every dimension has the same sum, else indexed."""
        s = self.kernel
        return " + ".join(s.dims[0]) if s.is_uniform else str(s)

    # -- predictive --------------------------------------------------------------------------
    def _x(self, X_new: Any) -> Tensor:
        Xq = as_inputs(X_new, name="X_new", n_dims=self.kernel.n_dims)
        return self.normalizer.transform_x(Xq)

    def predict(self, X_new: Any, *, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """GP predictive at ``X_new (m, d)`` in original units.

        ``mean = K_*^T (K + sigma^2 I)^{-1} y`` and
        ``var = k_** - diag(K_*^T (K + sigma^2 I)^{-1} K_*)`` (+ ``sigma^2`` with
        ``include_noise``: the predictive of ``y``, not ``f``) for an exact GP, mapped
        back by the normalisation.

        Returns:
            ``(mean (m,), variance (m,))`` float64 CPU tensors.

        Raises:
            DataError: wrong number of columns, NaN/Inf inputs, or inputs too far from
                the training range to normalise.
            ValueError: the fit has no predictive (e.g. it failed).
        """
        mean, var = self._predict_normalized(self._x(X_new), include_noise)
        return self.normalizer.unnormalize_predictive(
            mean.to("cpu", torch.float64), var.to("cpu", torch.float64)
        )

    def log_predictive_density(self, X_new: Any, y_new: Any) -> Tensor:
        """``(m,)`` log predictive density of ``y_new`` at ``X_new`` in original units.

        ``log p(y) = log p~((y - y_bar) / s_y) - log s_y`` with the normalised density
        ``p~`` of :meth:`_log_predictive_normalized`.

        Raises:
            DataError: invalid inputs, ``y_new`` complex, NaN, infinite or not of shape
                ``(m,)``.
        """
        Xn = self._x(X_new)
        y = as_real(y_new, "y_new", finite=True).reshape(-1)
        if y.shape[0] != Xn.shape[0]:
            raise DataError(f"y_new has {y.shape[0]} values for {Xn.shape[0]} inputs")
        yn = self.normalizer.transform_y(y)
        lp = self._log_predictive_normalized(Xn, yn).to("cpu", torch.float64)
        return lp + self.normalizer.log_density_offset()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (kernel text, hyperparameters in both units, noise, LML, time).

        Non-finite numbers are written as ``None`` (JSON has no ``inf``/``NaN``).
        """
        return {
            "kernel": self.kernel_text,
            "hyperparameters": [
                {
                    "dim": h.dim,
                    "addend": h.addend,
                    "symbol": h.symbol,
                    "name": h.name,
                    "normalised": _finite(h.value),
                    "original": _finite(h.original),
                }
                for h in self.table
            ],
            "noise": _finite(self.noise),
            "noise_original": _finite(self.noise_original),
            "log_marginal_likelihood": _finite(self.log_marginal_likelihood),
            "log_marginal_likelihood_original": _finite(self.log_marginal_likelihood_original),
            "time_s": self.time_s,
            "call_time_s": self.call_time_s,
            "n_points": self.n_points,
        }


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


@runtime_checkable
class HyperparameterInference(Protocol):
    """Anything that fits a list of kernels to one dataset (amortized network, Type-2 ML...)."""

    def fit_many(
        self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]
    ) -> Sequence[KernelFit]:
        """Fit each kernel to ``X (n, d)``, ``y (n,)``; one :class:`KernelFit` per kernel, in order."""
        ...
