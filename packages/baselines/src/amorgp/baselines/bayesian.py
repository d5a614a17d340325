"""Bayesian GP hyperparameters by ADVI, and the mixture predictive.

The model of one (dataset, kernel) pair: every kernel parameter ``theta_j`` and
the noise variance ``sigma^2`` have the priors of their parameter specs, and

.. math::

    \\log p(y, \\theta) = \\log N(y \\mid 0, K_\\theta + \\sigma^2 I)
        + \\sum_j \\log p(\\theta_j) + \\log p(\\sigma^2).

ADVI (:mod:`amorgp.baselines.advi`) works on ``zeta`` with
``theta = positive(zeta, kind)`` — the shared transform — plus its
log-Jacobian.  The Monte-Carlo draws of one gradient or ELBO evaluation are
evaluated as padded batches (the same dataset repeated), so ``S`` draws cost
batched kernel evaluations and batched Choleskys, in chunks of at most
:data:`DRAW_CHUNK_ELEMENTS` Gram-matrix entries: past a few tens of MiB the batched
evaluation is memory-bound (chunks are faster than one batch, with identical values).

The predictive is the mixture over ``S`` posterior draws ``theta_s ~ q``:
mean ``1/S sum mu_s``, variance ``1/S sum (v_s + mu_s^2) - mean^2`` and log
density ``logsumexp_s log N(y | mu_s, v_s) - log S``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from amorgp.baselines.advi import ADVIResult, Family, advi, positive_log_density
from amorgp.baselines.gp import (
    exact_predictive,
    initial_raw,
    log_marginal_likelihood,
    log_prior,
    slot_kind,
)
from amorgp.kernel_grammar import DimWiseStructure, ParamKind, positive
from amorgp.lazy_kernels import PaddedBatch

__all__ = [
    "ADVISettings",
    "GPPosterior",
    "fit_advi_gp",
    "DRAW_CHUNK_ELEMENTS",
    "gp_log_density",
    "mixture_log_density",
    "mixture_moments",
]


@dataclass(frozen=True)
class ADVISettings:
    """ADVI settings (defaults: Stan's, Kucukelbir et al. 2017).

    Attributes:
        family: ``"meanfield"`` or ``"fullrank"``.
        eta: step-size scale, ``None`` for the search over ``{100, 10, 1, 0.1, 0.01}``.
        n_grad_samples: draws per gradient.
        n_elbo_samples: draws per ELBO evaluation.
        max_iters: maximum iterations.
        eval_every: iterations between ELBO evaluations.
        adapt_iters: iterations per candidate ``eta``.
        tol_rel_obj: relative-ELBO-change tolerance.
        n_predictive_samples: posterior draws of the mixture predictive.
    """

    family: Literal["meanfield", "fullrank"] = "meanfield"
    eta: float | None = None
    n_grad_samples: int = 1
    n_elbo_samples: int = 100
    max_iters: int = 10_000
    eval_every: int = 100
    adapt_iters: int = 50
    tol_rel_obj: float = 0.01
    n_predictive_samples: int = 100


DRAW_CHUNK_ELEMENTS = 1 << 22
"""Most Gram-matrix entries (float64: 32 MiB) evaluated at once over a chunk of draws."""


def _draw_chunks(theta: Tensor, entries_per_draw: int, max_elements: int) -> tuple[Tensor, ...]:
    """``theta (S, K)`` split along the draws so a chunk holds at most ``max_elements``."""
    return theta.split(max(1, max_elements // max(entries_per_draw, 1)))


class _Layout:
    """Flat parameter vector ``(kernel parameters in (dim, addend, slot) order, noise)``."""

    def __init__(self, batch: PaddedBatch):
        kind, used = slot_kind(batch)
        self.used = used[0]
        kinds = list(ParamKind)
        self.kinds = [kinds[int(k)] for k in kind[0][self.used]] + [ParamKind.NOISE]
        self.shape = batch.param_shape[1:]
        self.batch = batch
        self._cache: dict[int, PaddedBatch] = {}

    def repeated(self, s: int) -> PaddedBatch:
        if s not in self._cache:
            if len(self._cache) >= 4:  # chunk sizes repeat: keep a few, not every size seen
                self._cache.clear()
            self._cache[s] = self.batch.repeat(s)
        return self._cache[s]

    def unpack(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``theta (S, K)`` -> ``params (S, D, L, P)`` (unused slots 1.0), ``noise (S,)``."""
        S = theta.shape[0]
        params = torch.ones((S, *self.shape), dtype=theta.dtype, device=theta.device)
        params = params.masked_scatter(self.used.expand(S, *self.shape), theta[:, :-1].reshape(-1))
        return params, theta[:, -1]


def gp_log_density(
    batch: PaddedBatch, *, max_chunk_elements: int = DRAW_CHUNK_ELEMENTS
) -> tuple[object, list[ParamKind], Tensor]:
    """Unconstrained log joint of one pair, its parameter kinds and the default start.

    Args:
        batch: a batch holding exactly one (dataset, kernel) pair.
        max_chunk_elements: most Gram-matrix entries evaluated at once; the draws are
            split into chunks of ``max_chunk_elements // n^2`` (at least one).

    Returns:
        ``(log_density, kinds, init)``: ``log_density(zeta (S, K)) -> (S,)`` (NaN
        where a Cholesky fails), the ``K`` parameter kinds (noise last) and the
        unconstrained paper start (parameters 1.0, noise std 0.2).
    """
    if batch.batch_size != 1:
        raise ValueError(f"gp_log_density needs a batch of one pair, got {batch.batch_size}")
    layout = _Layout(batch)
    n = int(batch.n_points.max())

    def chunk_log_joint(theta: Tensor) -> Tensor:
        params, noise = layout.unpack(theta)
        rep = layout.repeated(theta.shape[0])
        return log_marginal_likelihood(rep, params, noise) + log_prior(rep, params, noise)

    def log_joint(theta: Tensor) -> Tensor:
        chunks = _draw_chunks(theta, n * n, max_chunk_elements)
        return torch.cat([chunk_log_joint(c) for c in chunks])

    raw, raw_noise = initial_raw(batch)
    init = torch.cat([raw[0][layout.used], raw_noise])
    return positive_log_density(log_joint, layout.kinds), layout.kinds, init


@dataclass(frozen=True)
class GPPosterior:
    """ADVI posterior over the hyperparameters of one pair.

    Attributes:
        structure: the kernel.
        result: the ADVI fit in the unconstrained space.
        kinds: parameter kinds of the flat vector (noise last).
        median_params: ``(D, L, P)`` constrained parameters at the variational mean
            (the posterior median of each coordinate under ``q``).
        median_noise: noise variance at the variational mean.
        time_s: wall-clock time of the fit.
    """

    structure: DimWiseStructure
    result: ADVIResult
    kinds: list[ParamKind]
    median_params: Tensor
    median_noise: float
    time_s: float
    _batch: PaddedBatch
    _layout: _Layout

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` posterior draws: ``params (n, D, L, P)``, ``noise (n,)``."""
        zeta = self.result.sample(n, generator)
        theta = torch.stack([positive(zeta[:, k], kind) for k, kind in enumerate(self.kinds)], -1)
        return self._layout.unpack(theta)

    def predictive_components(
        self, X_new: Tensor, n: int, generator: torch.Generator, include_noise: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Per-draw exact predictives ``(mean (S, m), var (S, m))`` at ``X_new (m, D)``; failed draws dropped."""
        params, noise = self.sample(n, generator)
        N = int(self._batch.n_points.max())
        per_draw = N * (N + X_new.shape[0])
        Xq = X_new.to(torch.float64)
        means, variances = [], []
        for p, s2 in zip(
            _draw_chunks(params, per_draw, DRAW_CHUNK_ELEMENTS),
            _draw_chunks(noise, per_draw, DRAW_CHUNK_ELEMENTS),
            strict=True,
        ):
            rep = self._layout.repeated(p.shape[0])
            Xn = Xq[None].expand(p.shape[0], *Xq.shape)
            m_c, v_c = exact_predictive(rep, p, s2, Xn, include_noise=include_noise)
            means.append(m_c)
            variances.append(v_c)
        mean, var = torch.cat(means), torch.cat(variances)
        ok = torch.isfinite(mean).all(1) & torch.isfinite(var).all(1)
        return mean[ok], var[ok]


def mixture_moments(mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance ``(m,)`` of the equal-weight mixture of ``(S, m)`` Gaussians."""
    mu = mean.mean(0)
    return mu, ((var + mean**2).mean(0) - mu**2).clamp_min(0.0)


def mixture_log_density(mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
    """``(m,)`` log density of ``y`` under the equal-weight mixture (log-sum-exp)."""
    comp = -0.5 * (math.log(2.0 * math.pi) + var.log() + (y - mean) ** 2 / var)
    return torch.logsumexp(comp, 0) - math.log(mean.shape[0])


def fit_advi_gp(
    batch: PaddedBatch, settings: ADVISettings | None = None, *, generator: torch.Generator
) -> GPPosterior:
    """ADVI over the hyperparameters of the single pair in ``batch``.

    Raises:
        ValueError: if ``batch`` holds more than one pair or is invalid.
    """
    s = settings or ADVISettings()
    batch.validate()
    t0 = time.perf_counter()
    log_density, kinds, init = gp_log_density(batch)
    family: Family = s.family
    res = advi(
        log_density,  # type: ignore[arg-type]
        init,
        family=family,
        generator=generator,
        eta=s.eta,
        n_grad_samples=s.n_grad_samples,
        n_elbo_samples=s.n_elbo_samples,
        max_iters=s.max_iters,
        eval_every=s.eval_every,
        adapt_iters=s.adapt_iters,
        tol_rel_obj=s.tol_rel_obj,
    )
    layout = _Layout(batch)
    theta = torch.stack([positive(res.mean[k], kind) for k, kind in enumerate(kinds)])[None]
    params, noise = layout.unpack(theta)
    return GPPosterior(
        batch.structures()[0],
        res,
        kinds,
        params[0],
        float(noise[0]),
        time.perf_counter() - t0,
        batch,
        layout,
    )
