"""The result of one baseline fit: :class:`FitResult`, a :class:`~amorgp.core.fit.KernelFit`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from amorgp.core.fit import KernelFit

__all__ = ["FitResult", "LogPredictive", "Predictor"]

Predictor = Callable[[Tensor, bool], tuple[Tensor, Tensor]]
LogPredictive = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True, eq=False, kw_only=True)
class FitResult(KernelFit):
    """Hyperparameters of one kernel on one dataset by one baseline, with its predictive.

    Extends :class:`~amorgp.core.fit.KernelFit` (``kernel``, ``params``, ``noise``,
    ``normalizer``, ``n_points``, ``time_s``, ``call_time_s``; ``hyperparameters`` and
    ``hyperparameters_original``, ``table``, ``predict``, ``log_predictive_density``).

    Attributes:
        method: the method name (see :data:`~amorgp.baselines.api.METHODS`).
        objective: ``"lml"`` (Type-2 ML, MAP) or ``"elbo"`` (SVGP, ADVI).
        objective_value: the exact log marginal likelihood of the normalised targets
            (``"lml"``) or the ELBO; also :attr:`log_marginal_likelihood`.
        iterations: optimiser iterations run.
        status: ``"converged"``, ``"max_iters"`` or ``"failed"``.
        log_posterior: LML + log prior (MAP only, else NaN).
    """

    method: str
    objective: str
    objective_value: float
    iterations: int
    status: str
    log_posterior: float = math.nan
    _predictor: Predictor | None = field(default=None, repr=False)
    _log_predictive: LogPredictive | None = field(default=None, repr=False)

    @property
    def log_marginal_likelihood(self) -> float:
        """The exact log marginal likelihood (Type-2 ML, MAP) or the ELBO (SVGP, ADVI)."""
        return self.objective_value

    def _predict_normalized(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        if self._predictor is None or self.status == "failed":
            raise ValueError(f"no predictive: the {self.method} fit of {self.kernel} failed")
        return self._predictor(Xn, include_noise)

    def _log_predictive_normalized(self, Xn: Tensor, yn: Tensor) -> Tensor:
        if self._log_predictive is not None and self.status != "failed":
            return self._log_predictive(Xn, yn)
        return super()._log_predictive_normalized(Xn, yn)

    def to_dict(self) -> dict[str, Any]:
        """The :class:`~amorgp.core.fit.KernelFit` summary plus method, objective,
        iterations and status."""
        lp = self.log_posterior
        return {
            **super().to_dict(),
            "method": self.method,
            "objective": self.objective,
            "iterations": self.iterations,
            "status": self.status,
            "log_posterior": lp if math.isfinite(lp) else None,
        }
