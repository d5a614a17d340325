"""Reusable checks and a reference inference method for the ensembles package.

:class:`PriorMeanInference` satisfies the inference protocol with no learning at all:
every hyperparameter at its prior mean (or a given scale of it), the GP computed
densely in float64 (kernel-grammar's reference formulas and the dense GP oracles of
:mod:`amorgp.diff_linalg.testing`).  It is
an independent oracle for tests of model averaging and search, not a method to use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood, dense_gp_predictive
from amorgp.kernel_grammar import NOISE, DimWiseStructure, base_symbol

__all__ = [
    "GridInference",
    "MinMaxNormalisation",
    "PriorMeanFit",
    "PriorMeanInference",
    "prior_mean_params",
]


def prior_mean_params(structure: DimWiseStructure) -> np.ndarray:
    """``(D, L, P)`` parameters at their prior means (1.0 in unused slots)."""
    P = max(len(base_symbol(s).params) for a in structure.dims for s in a)
    theta = np.ones((structure.n_dims, structure.max_addends, P))
    for d, addends in enumerate(structure.dims):
        for a, name in enumerate(addends):
            for j, spec in enumerate(base_symbol(name).params):
                theta[d, a, j] = spec.prior.mean
    return theta


@dataclass(frozen=True)
class MinMaxNormalisation:
    """Inputs min-max scaled, targets standardised (the project's data contract)."""

    X_lo: np.ndarray
    X_span: np.ndarray
    y_mean: float
    y_std: float

    def transform_x(self, X: Any) -> Tensor:
        Xa = np.asarray(X, dtype=np.float64)
        Xa = Xa[:, None] if Xa.ndim == 1 else Xa
        return torch.as_tensor((Xa - self.X_lo) / self.X_span)

    def transform_y(self, y: Any) -> Tensor:
        return torch.as_tensor((np.asarray(y, dtype=np.float64) - self.y_mean) / self.y_std)

    def unnormalize_predictive(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        return mean * self.y_std + self.y_mean, var * self.y_std**2


@dataclass
class PriorMeanFit:
    """A dense float64 GP at fixed hyperparameters (normalised data inside)."""

    kernel: DimWiseStructure
    params: np.ndarray
    noise: float
    X_lo: np.ndarray
    X_span: np.ndarray
    y_mean: float
    y_std: float
    Xn: np.ndarray
    yn: np.ndarray
    _K: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._K = self.kernel.reference(self.Xn, self.Xn, self.params)

    @property
    def normalization(self) -> MinMaxNormalisation:
        return MinMaxNormalisation(self.X_lo, self.X_span, self.y_mean, self.y_std)

    @property
    def hyperparameters(self) -> dict[tuple[int, int, str], float]:
        return {
            (p.dim, p.addend, p.param): float(self.params[p.dim, p.addend, p.slot])
            for p in self.kernel.param_names()
        }

    @property
    def log_marginal_likelihood(self) -> float:
        return float(dense_gp_log_marginal_likelihood(self._K, self.yn, self.noise))

    def predict(self, X_new: Any) -> tuple[Tensor, Tensor]:
        Xq = (
            np.asarray(X_new, dtype=np.float64).reshape(-1, self.Xn.shape[1]) - self.X_lo
        ) / self.X_span
        Ks = self.kernel.reference(self.Xn, Xq, self.params)
        kss = np.diag(self.kernel.reference(Xq, Xq, self.params))
        mean, var_f = dense_gp_predictive(
            self._K, Ks, kss, self.yn, self.noise, include_noise=False
        )
        var = np.maximum(var_f, 0.0) + self.noise
        return (
            torch.as_tensor(mean * self.y_std + self.y_mean),
            torch.as_tensor(var * self.y_std**2),
        )


@dataclass
class PriorMeanInference:
    """The inference protocol with prior-mean hyperparameters (see the module docstring).

    Attributes:
        scale: multiplies every lengthscale and period (to make members differ).
        fail: kernel texts for which inference "fails" (returns a NaN likelihood), to
            test failure handling.
    """

    scale: float = 1.0
    fail: tuple[str, ...] = ()
    calls: list[int] = field(default_factory=list)

    def fit_many(self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]) -> list[Any]:
        Xa = np.asarray(X, dtype=np.float64)
        Xa = Xa[:, None] if Xa.ndim == 1 else Xa
        ya = np.asarray(y, dtype=np.float64).reshape(-1)
        lo, hi = Xa.min(0), Xa.max(0)
        span = np.where(hi > lo, hi - lo, 1.0)
        Xn = (Xa - lo) / span
        mu, sd = float(ya.mean()), float(ya.std()) or 1.0
        yn = (ya - mu) / sd
        self.calls.append(len(kernels))
        out: list[Any] = []
        for k in kernels:
            s = DimWiseStructure.coerce(k, n_dims=Xa.shape[1])
            fit = self._fit_one(s, lo, span, mu, sd, Xn, yn)
            out.append(_Failed(fit) if str(k) in self.fail else fit)
        return out

    def _candidates(self, s: DimWiseStructure) -> list[np.ndarray]:
        theta = prior_mean_params(s)
        for p in s.param_names():
            if p.param.endswith(("lengthscale", "period")):
                theta[p.dim, p.addend, p.slot] *= self.scale
        return [theta]

    def _fit_one(self, s: DimWiseStructure, *args: Any) -> PriorMeanFit:
        fits = [PriorMeanFit(s, t, float(NOISE.prior.mean), *args) for t in self._candidates(s)]
        return max(fits, key=lambda f: f.log_marginal_likelihood)


@dataclass
class GridInference(PriorMeanInference):
    """A crude Type-2 ML for tests: the best log marginal likelihood over a grid.

    Every variance is multiplied by one factor of ``variance_scales`` and every
    lengthscale and period by one factor of ``length_scales`` (prior means times the
    factors); the grid point with the highest log marginal likelihood is kept.
    """

    variance_scales: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    length_scales: tuple[float, ...] = (0.5, 1.0, 2.0)

    def _candidates(self, s: DimWiseStructure) -> list[np.ndarray]:
        out = []
        for v in self.variance_scales:
            for ls in self.length_scales:
                theta = prior_mean_params(s)
                for p in s.param_names():
                    if p.param.endswith(("lengthscale", "period")):
                        theta[p.dim, p.addend, p.slot] *= ls * self.scale
                    elif p.param in ("variance", "offset"):
                        theta[p.dim, p.addend, p.slot] *= v
                out.append(theta)
        return out


class _Failed:
    def __init__(self, fit: PriorMeanFit) -> None:
        self.kernel, self.noise, self.status = fit.kernel, fit.noise, "failed"
        self.log_marginal_likelihood = math.nan

    def predict(self, X_new: Any) -> tuple[Tensor, Tensor]:
        raise RuntimeError("inference failed")
