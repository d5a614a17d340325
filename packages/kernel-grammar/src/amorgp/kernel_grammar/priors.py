"""Prior distributions over positive parameters, declared here and used everywhere.

Only the declaration and the log density live here (numpy or torch inputs, via
the array-namespace dispatch); samplers that take a ``torch.Generator`` live in
the simulator.  Parameterisation is (shape, rate) as in ``docs/architecture.md`` §4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from amorgp.kernel_grammar._array import namespace

__all__ = ["Exponential", "Gamma", "Prior"]


@dataclass(frozen=True)
class Gamma:
    """Gamma(shape a, rate b): ``p(x) = b^a x^(a-1) e^(-b x) / Gamma(a)`` for ``x > 0``."""

    shape: float
    rate: float

    def __post_init__(self) -> None:
        if not (self.shape > 0 and self.rate > 0):
            raise ValueError(f"Gamma needs shape > 0 and rate > 0, got {self.shape}, {self.rate}")

    @property
    def mean(self) -> float:
        return self.shape / self.rate

    @property
    def variance(self) -> float:
        return self.shape / self.rate**2

    def log_prob(self, x: Any) -> Any:
        """Log density at ``x`` (numpy or torch; differentiable for torch)."""
        xp = namespace(x)
        a, b = self.shape, self.rate
        return a * math.log(b) - math.lgamma(a) + (a - 1.0) * xp.log(x) - b * x

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        """Draw with a numpy Generator (the torch-Generator sampler is in the simulator)."""
        return rng.gamma(self.shape, 1.0 / self.rate, size=size)

    def to_dict(self) -> dict[str, Any]:
        return {"family": "gamma", "shape": self.shape, "rate": self.rate}

    def __str__(self) -> str:
        return f"Gamma(shape={self.shape:g}, rate={self.rate:g})"


@dataclass(frozen=True)
class Exponential:
    """Exponential(rate b): ``p(x) = b e^(-b x)`` for ``x > 0``."""

    rate: float

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"Exponential needs rate > 0, got {self.rate}")

    @property
    def mean(self) -> float:
        return 1.0 / self.rate

    @property
    def variance(self) -> float:
        return 1.0 / self.rate**2

    def log_prob(self, x: Any) -> Any:
        """Log density at ``x`` (numpy or torch; differentiable for torch)."""
        return math.log(self.rate) - self.rate * x

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, size=size)

    def to_dict(self) -> dict[str, Any]:
        return {"family": "exponential", "rate": self.rate}

    def __str__(self) -> str:
        return f"Exponential(rate={self.rate:g})"


Prior = Gamma | Exponential
