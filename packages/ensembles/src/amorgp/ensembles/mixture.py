"""The predictive of a kernel ensemble: a Gaussian mixture per test point.

With member weights ``w_m`` and member predictives ``N(mu_m(x), v_m(x))`` at a test
point ``x``, the ensemble predictive is ``p(y | x) = sum_m w_m N(y; mu_m, v_m)``:

* mean ``mu = sum_m w_m mu_m``;
* variance by the law of total variance,
  ``v = sum_m w_m v_m + sum_m w_m (mu_m - mu)^2`` (both terms non-negative, so the
  result is never negative, unlike the cancellation-prone ``E[y^2] - mu^2``);
* log density ``log sum_m exp(log w_m + log N(y; mu_m, v_m))`` (log-sum-exp);
* CDF ``sum_m w_m Phi((y - mu_m) / sqrt(v_m))`` and quantiles by bisection on it
  (monotone, bracketed by the members' extreme quantiles);
* samples: a member is drawn per sample (shared by all test points of that sample,
  the structure is one model), then each point from that member's marginal.

Everything is vectorised over members and test points (``M`` x ``T``); members
with weight 0 are dropped on construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["GaussianMixture"]

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class GaussianMixture:
    """Per-point Gaussian mixtures ``sum_m w_m N(mu_mt, v_mt)``.

    Attributes:
        weights: ``(M,)`` float64, non-negative, summing to 1.
        means: ``(M, T)`` member predictive means.
        variances: ``(M, T)`` member predictive variances (> 0).
    """

    weights: Tensor
    means: Tensor
    variances: Tensor

    def __post_init__(self) -> None:
        w = torch.as_tensor(self.weights, dtype=torch.float64).reshape(-1)
        m = torch.as_tensor(self.means, dtype=torch.float64)
        v = torch.as_tensor(self.variances, dtype=torch.float64)
        if m.ndim == 1:
            m, v = m[:, None], v.reshape(-1, 1)
        if m.ndim != 2 or v.shape != m.shape or m.shape[0] != w.numel():
            raise ValueError(
                f"GaussianMixture needs weights (M,), means and variances (M, T); got "
                f"{tuple(w.shape)}, {tuple(m.shape)}, {tuple(v.shape)}"
            )
        if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError("mixture weights must be finite and non-negative")
        if not math.isclose(float(w.sum()), 1.0, rel_tol=0, abs_tol=1e-9):
            raise ValueError(f"mixture weights must sum to 1, got {float(w.sum())}")
        keep = w > 0
        m, v, w = m[keep], v[keep], w[keep]
        if not bool(torch.isfinite(m).all() and torch.isfinite(v).all()) or bool((v <= 0).any()):
            raise ValueError(
                "members with positive weight need finite means and positive variances"
            )
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "means", m)
        object.__setattr__(self, "variances", v)

    @property
    def n_points(self) -> int:
        return int(self.means.shape[1])

    def mean(self) -> Tensor:
        """``(T,)`` mixture means."""
        return self.weights @ self.means

    def variance(self) -> Tensor:
        """``(T,)`` mixture variances (law of total variance; never negative)."""
        mu = self.mean()
        w = self.weights[:, None]
        return (w * self.variances).sum(0) + (w * (self.means - mu) ** 2).sum(0)

    def _y(self, y: Tensor | float) -> Tensor:
        t = torch.as_tensor(y, dtype=torch.float64)
        return t.expand(self.n_points) if t.ndim == 0 else t.reshape(-1)

    def log_prob(self, y: Tensor | float) -> Tensor:
        """``(T,)`` log mixture density of targets ``y (T,)`` (log-sum-exp over members)."""
        yy = self._y(y)
        if yy.shape[0] != self.n_points:
            raise ValueError(f"y has {yy.shape[0]} values for {self.n_points} test points")
        comp = -0.5 * (_LOG_2PI + self.variances.log() + (yy - self.means) ** 2 / self.variances)
        return torch.logsumexp(self.weights.log()[:, None] + comp, dim=0)

    def cdf(self, y: Tensor | float) -> Tensor:
        """``(T,)`` mixture CDF at ``y (T,)``."""
        yy = self._y(y)
        z = (yy - self.means) / self.variances.sqrt()
        return self.weights @ torch.special.ndtr(z)

    def quantile(self, q: float | Tensor, *, iterations: int = 100) -> Tensor:
        """Quantiles of every point's mixture: ``q (Q,)`` -> ``(Q, T)`` (scalar ``q``: ``(T,)``).

        Bisection on the CDF between the smallest and largest member quantiles of
        level ``q`` (the mixture quantile lies between them); ``iterations`` halvings.

        Raises:
            ValueError: ``q`` outside ``(0, 1)``.
        """
        qs = torch.as_tensor(q, dtype=torch.float64)
        scalar = qs.ndim == 0
        qs = qs.reshape(-1)
        if not bool(((qs > 0) & (qs < 1)).all()):
            raise ValueError(f"quantile levels must lie in (0, 1), got {qs.tolist()}")
        sd = self.variances.sqrt()
        member_q = self.means[None] + sd[None] * torch.special.ndtri(qs)[:, None, None]  # (Q,M,T)
        lo, hi = member_q.amin(1), member_q.amax(1)
        z_lo = (lo[:, None] - self.means[None]) / sd[None]
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            z_lo = (mid[:, None] - self.means[None]) / sd[None]
            below = torch.einsum("m,qmt->qt", self.weights, torch.special.ndtr(z_lo)) < qs[:, None]
            lo = torch.where(below, mid, lo)
            hi = torch.where(below, hi, mid)
        out = 0.5 * (lo + hi)
        return out[0] if scalar else out

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        """``(n, T)`` draws: one member per draw (shared by its points), then the marginals."""
        if n < 1:
            raise ValueError(f"n must be a positive integer, got {n}")
        member = torch.multinomial(self.weights, n, replacement=True, generator=generator)
        z = torch.randn((n, self.n_points), generator=generator, dtype=torch.float64)
        return self.means[member] + self.variances[member].sqrt() * z
