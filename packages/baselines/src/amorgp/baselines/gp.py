"""The exact-GP objective on a padded batch of (dataset, kernel) pairs.

A :class:`~amorgp.lazy_kernels.PaddedBatch` holds ``B`` pairs in the padded
contract; kernel parameters are optimised *unconstrained* as ``raw (B, D, L, P)``
and ``raw_noise (B,)`` and mapped to positive values by the vocabulary's slot
table (:meth:`amorgp.lazy_kernels.SlotTable.constrain`: the shared transform
``positive(raw, kind)`` slot by slot, 1.0 in unused slots).

Per element ``b`` the objective is the exact log marginal likelihood

.. math::

    \\log p(y_b \\mid \\theta_b) = -\\tfrac12 y_b^T (K_b + \\sigma_b^2 I)^{-1} y_b
        - \\tfrac12 \\log\\det(K_b + \\sigma_b^2 I) - \\tfrac{n_b}{2} \\log 2\\pi

(batched evaluator :func:`amorgp.lazy_kernels.kernel_matrix_dimwise`, one
Cholesky per matrix in :func:`amorgp.diff_linalg.gp_log_marginal_likelihood`),
optionally plus the log prior ``sum_j log p(theta_j) + log p(sigma^2)`` of the
parameter specs (MAP).  Elements whose kernel matrix is not finite or whose
Cholesky fails even with jitter get NaN, never an exception.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from amorgp.diff_linalg import gp_log_marginal_likelihood
from amorgp.kernel_grammar import NOISE, ParamKind, positive, positive_inverse
from amorgp.kernel_grammar.transforms import softplus_inverse
from amorgp.lazy_kernels import (
    PaddedBatch,
    Posterior,
    SlotTable,
    kernel_diag_dimwise,
    kernel_matrix_dimwise,
    slot_table,
)
from amorgp.lazy_kernels.posterior import DensePosterior

__all__ = [
    "constrain",
    "exact_posterior",
    "exact_predictive",
    "initial_raw",
    "log_marginal_likelihood",
    "log_of_raw",
    "log_prior",
    "prior_raw",
    "raw_of_log",
    "slot_kind",
    "unconstrain",
]


def _table(batch: PaddedBatch) -> SlotTable:
    return slot_table(batch.vocab, batch.device)


def slot_kind(batch: PaddedBatch) -> tuple[Tensor, Tensor]:
    """``(kind (B, D, L, P), used (B, D, L, P))`` of every parameter slot of ``batch``."""
    t = _table(batch)
    return t.slot_kinds(batch.symbols), t.used_slots(batch.symbols, batch.symbol_mask)


def constrain(batch: PaddedBatch, raw: Tensor, raw_noise: Tensor) -> tuple[Tensor, Tensor]:
    """Positive ``params (B, D, L, P)`` and ``noise (B,)`` from unconstrained values.

    Each used slot goes through ``positive(raw, kind)`` with its own kind; unused
    slots are set to 1.0 (:meth:`~amorgp.lazy_kernels.SlotTable.constrain`).  Differentiable.
    """
    params = _table(batch).constrain(raw, batch.symbols, batch.symbol_mask)
    return params, positive(raw_noise, ParamKind.NOISE)


def unconstrain(batch: PaddedBatch, params: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`constrain` on used slots (unused slots get 0)."""
    raw = _table(batch).unconstrain(params, batch.symbols, batch.symbol_mask)
    return raw, positive_inverse(noise, ParamKind.NOISE)


_LINEAR_TAIL = -30.0
"""Below this raw value ``log(softplus(raw)) = raw`` to double precision."""


def log_of_raw(raw: Tensor) -> Tensor:
    """``z = log(theta - floor) = log(softplus(raw))`` of transform raw values (any shape).

    The log space of :class:`~amorgp.baselines.type2ml.Type2MLSettings` ``space="log"``:
    ``theta = floor + exp(z)`` for every kind.  Inverse: :func:`raw_of_log`.
    """
    tail = raw < _LINEAR_TAIL
    safe = torch.where(tail, torch.zeros_like(raw), raw)  # no log(0) gradient in the other branch
    return torch.where(tail, raw, torch.nn.functional.softplus(safe).log())


def raw_of_log(z: Tensor) -> Tensor:
    """Transform raw values ``softplus^-1(exp(z))`` of log-space values; inverse of
    :func:`log_of_raw`.  A ``z`` past ``exp``'s range gives ``inf`` (a non-finite
    objective, which the optimisers treat as a failed step)."""
    tail = z < _LINEAR_TAIL
    x = torch.where(tail, torch.ones_like(z), z).exp()
    return torch.where(tail, z, softplus_inverse(x))


def initial_raw(
    batch: PaddedBatch, value: float = 1.0, noise_std: float = 0.2
) -> tuple[Tensor, Tensor]:
    """Unconstrained start with every kernel parameter ``value`` and noise variance ``noise_std^2``.

    The defaults are the paper's Type-2 ML initialisation (Appendix A).
    """
    B = batch.batch_size
    params = torch.full(batch.param_shape, float(value), dtype=torch.float64, device=batch.X.device)
    noise = torch.full((B,), float(noise_std) ** 2, dtype=torch.float64, device=batch.X.device)
    return unconstrain(batch, params, noise)


def prior_raw(batch: PaddedBatch, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Unconstrained start drawn from the parameter priors (for random restarts).

    Draws use a numpy generator seeded from ``generator`` (the priors' samplers are
    numpy-based); values are clipped to at least ten times the transform floor.
    """
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    t = _table(batch)
    idx = t.prior_index[batch.symbols]
    shape = batch.param_shape
    params = np.ones(shape)
    for j, prior in enumerate(t.priors):
        draws = prior.sample(rng, shape)
        params = np.where(idx.cpu().numpy() == j, draws, params)
    noise = NOISE.prior.sample(rng, (batch.batch_size,))
    params_t = torch.as_tensor(params, dtype=torch.float64, device=batch.X.device).clamp_min(1e-3)
    noise_t = torch.as_tensor(noise, dtype=torch.float64, device=batch.X.device).clamp_min(1e-5)
    return unconstrain(batch, params_t, noise_t)


def log_prior(batch: PaddedBatch, params: Tensor, noise: Tensor) -> Tensor:
    """``(B,)`` log prior density of the constrained parameters and the noise variance."""
    t = _table(batch)
    idx = t.prior_index[batch.symbols]
    used = t.used_slots(batch.symbols, batch.symbol_mask)
    total = NOISE.prior.log_prob(noise)
    safe = torch.where(used, params, torch.ones_like(params))
    for j, prior in enumerate(t.priors):
        sel = used & (idx == j)
        if bool(sel.any()):
            lp = prior.log_prob(safe)
            total = total + torch.where(sel, lp, torch.zeros_like(lp)).sum((1, 2, 3))
    return total


def kernel_matrix(batch: PaddedBatch, params: Tensor, X2: Tensor | None = None) -> Tensor:
    """``(B, N, M)`` kernel matrices (no noise) between training inputs and ``X2``."""
    return kernel_matrix_dimwise(
        batch.X,
        batch.X if X2 is None else X2,
        batch.symbols,
        batch.symbol_mask,
        params,
        batch.vocab,
        batch.dim_mask,
        validate=False,
    )


def log_marginal_likelihood(batch: PaddedBatch, params: Tensor, noise: Tensor) -> Tensor:
    """``(B,)`` exact log marginal likelihoods; NaN for elements that fail.

    An element fails when its kernel matrix or noise is not finite (e.g. an
    overflowing parameter) or its Cholesky fails after jitter escalation.
    """
    K = kernel_matrix(batch, params)
    bad = ~torch.isfinite(K).all(-1).all(-1) | ~torch.isfinite(noise) | (noise <= 0)
    if bool(bad.any()):
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device).expand_as(K)
        K = torch.where(bad[:, None, None], eye, K)
        noise = torch.where(bad, torch.ones_like(noise), noise)
    value, _failed = gp_log_marginal_likelihood(
        K, batch.y, noise, batch.point_mask, return_failed=True
    )
    return torch.where(bad, torch.full_like(value, float("nan")), value)


def exact_posterior(batch: PaddedBatch, params: Tensor, noise: Tensor) -> DensePosterior:
    """The exact GP posterior of every element, ``A = K + sigma^2 I`` factored once
    (:meth:`amorgp.lazy_kernels.Posterior.dense`; padded training points are an identity
    block with zero targets).  Serves any number of :func:`exact_predictive` calls."""
    return Posterior.dense(
        kernel_matrix(batch, params), batch.y, noise, point_mask=batch.point_mask
    )


def exact_predictive(
    batch: PaddedBatch,
    params: Tensor,
    noise: Tensor,
    X_new: Tensor,
    *,
    include_noise: bool = True,
    posterior: DensePosterior | None = None,
) -> tuple[Tensor, Tensor]:
    """Exact GP posterior predictive at ``X_new (B, M, D)`` (normalised units).

    ``mean = K_*^T A^{-1} y`` and ``var = k_** - diag(K_*^T A^{-1} K_*)`` (plus
    ``sigma^2`` with ``include_noise``), ``A = K + sigma^2 I`` factored once by
    :func:`exact_posterior` (or ``posterior``, its result for the same ``batch``,
    ``params`` and ``noise``).  Variances are clamped at 0 before the noise is added.
    The predictions are not differentiable (no autograd graph through the factor).

    Returns:
        ``(mean (B, M), var (B, M))``; NaN for elements whose matrix is not finite or
        whose Cholesky failed.
    """
    post = exact_posterior(batch, params, noise) if posterior is None else posterior
    kss = kernel_diag_dimwise(
        X_new, batch.symbols, batch.symbol_mask, params, batch.vocab, batch.dim_mask, validate=False
    )
    return post.predict(kernel_matrix(batch, params, X_new), kss, include_noise=include_noise)
