"""The inference protocol shared by the baselines and the amortizer.

"Given a dataset and a list of kernels, return hyperparameters and log
marginal likelihoods" (ARCHITECTURE §2).  Consumers (model averaging,
structure search) type against these protocols only, so any method — a
Type-2 ML fit, ADVI or the amortization network — can be plugged in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from amorgp.kernel_grammar import DimWiseStructure

__all__ = ["HyperparameterInference", "KernelFit"]


@runtime_checkable
class KernelFit(Protocol):
    """Hyperparameters of one kernel on one dataset.

    Attributes:
        kernel: the dimension-wise structure that was fitted.
        hyperparameters: ``(dim, addend, name) -> value`` in normalised units.
        noise: observation-noise variance (normalised units).
        log_marginal_likelihood: ``log p(y | theta, S)`` at the hyperparameters
            (normalised targets), or the ELBO for variational methods.
    """

    kernel: DimWiseStructure
    hyperparameters: Mapping[tuple[int, int, str], float]
    noise: float
    log_marginal_likelihood: float

    def predict(self, X_new: Any) -> tuple[Tensor, Tensor]:
        """Predictive ``(mean (m,), variance (m,))`` of targets at ``X_new (m, d)``, original units."""
        ...


@runtime_checkable
class HyperparameterInference(Protocol):
    """Anything that fits a list of kernels to one dataset."""

    def fit_many(
        self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]
    ) -> Sequence[KernelFit]:
        """Fit each kernel to ``X (n, d)``, ``y (n,)``; one :class:`KernelFit` per kernel, in order."""
        ...
