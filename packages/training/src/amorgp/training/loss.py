"""Training losses of the amortization network (Bitzer et al. 2023, §3.2).

Phase 1 (all (D, S) pairs, positive and negative):

.. math::

    \\mathcal{L}_1 = \\frac{1}{|\\mathcal{B}|} \\sum_{b \\in \\mathcal{B}}
        -\\frac{1}{n_b} \\log N\\big(y_b \\mid 0, K_{S_b}(X_b, X_b; \\hat\\theta_b) + \\hat\\sigma_b^2 I\\big)

computed in float64 by :func:`amorgp.lazy_kernels.kernel_matrix_dimwise` and
:func:`amorgp.diff_linalg.gp_log_marginal_likelihood` (one Cholesky per matrix,
jitter escalating per element).  ``\\mathcal{B}`` excludes elements whose
Cholesky still fails, whose prediction is not finite, or whose simulation was
invalid; they are masked out and counted, never the whole batch.

Phase 2 (noise fine-tuning, positive pairs only):

.. math::

    \\mathcal{L}_2 = \\alpha \\mathcal{L}_1 + \\beta \\frac{1}{|\\mathcal{B}|}
        \\sum_b (\\sigma^*_b - \\hat\\sigma_b)^2, \\qquad \\alpha = 10, \\beta = 1,

on the noise **standard deviation** ``sigma = sqrt(sigma^2)``, as the paper writes
it.  The standard deviation is on the scale of the (standardised) targets, so the
squared error is a squared error in target units; on the variance, errors of
noise levels below ~0.1 would be squared twice and vanish next to the NLL.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from amorgp.amortizer.networks.network import Prediction
from amorgp.diff_linalg import gp_log_marginal_likelihood
from amorgp.lazy_kernels import PaddedBatch, kernel_matrix_dimwise

__all__ = ["LossOutput", "gp_nll_per_point", "phase1_loss", "phase2_loss"]

_F64 = torch.float64


@dataclass
class LossOutput:
    """A training loss with its parts.

    Attributes:
        loss: the scalar to minimise.
        nll: ``(B,)`` float64 per-point negative log marginal likelihood (NaN where failed).
        used: ``(B,)`` bool, elements that entered the loss.
        n_failed: elements dropped because the Cholesky failed or the prediction
            was not finite (a 0-dim int64 tensor on the batch's device: reading it is a
            host synchronisation, left to the caller).
        noise_mse: phase 2 only: mean squared error of the noise standard deviation.
    """

    loss: Tensor
    nll: Tensor
    used: Tensor
    n_failed: Tensor
    noise_mse: Tensor | None = None


def gp_nll_per_point(
    batch: PaddedBatch, params: Tensor | None = None, noise: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Per-point GP negative log marginal likelihood of a padded batch, in float64.

    Args:
        batch: the padded batch; its kernels are ``batch.param_structure()``.
        params: ``(B, D, L, P)`` positive parameters (default ``batch.params``).
        noise: ``(B,)`` noise variances (default ``batch.noise``).

    Nothing is read back to the host (no synchronisation on a GPU): non-finite
    parameters, noise or kernel entries mark the element failed instead of raising.

    Returns:
        ``nll (B,)`` (NaN where failed) and ``failed (B,)`` bool: Cholesky failure
        after jitter or a non-finite parameter, noise or kernel matrix.

    Raises:
        ValueError: no parameters given and none in the batch.
    """
    params = batch.params if params is None else params
    noise = batch.noise if noise is None else noise
    if params is None or noise is None:
        raise ValueError("gp_nll_per_point needs params and noise (or a batch holding them)")
    symbols, symbol_mask = batch.param_structure()
    params64, noise64 = params.to(_F64), noise.to(_F64)
    bad = ~torch.isfinite(params64).flatten(1).all(-1) | ~torch.isfinite(noise64) | (noise64 <= 0)
    params64 = torch.where(bad[:, None, None, None], torch.ones_like(params64), params64)
    noise64 = torch.where(bad, torch.ones_like(noise64), noise64)
    X64 = batch.X.to(_F64)
    K = kernel_matrix_dimwise(
        X64, X64, symbols, symbol_mask, params64, batch.vocab, batch.dim_mask, validate=False
    )
    k_bad = ~torch.isfinite(K).flatten(1).all(-1)  # e.g. an overflowing variance
    K = torch.where(k_bad[:, None, None], torch.zeros_like(K), K)
    result = gp_log_marginal_likelihood(
        K,
        batch.y.to(_F64),
        noise64,
        mask=batch.point_mask,
        per_point=True,
        return_failed=True,
        validate=False,  # finite by construction; valid points: the batch's contract
    )
    assert isinstance(result, tuple)
    lml, failed = result
    failed = failed | bad | k_bad
    nll = torch.where(failed, torch.full_like(lml, float("nan")), -lml)
    return nll, failed


def _masked_mean(values: Tensor, used: Tensor) -> Tensor:
    safe = torch.where(used, values, torch.zeros_like(values))
    return safe.sum() / used.sum().clamp_min(1).to(values.dtype)


def phase1_loss(
    prediction: Prediction, batch: PaddedBatch, valid: Tensor | None = None
) -> LossOutput:
    """Mean per-point NLL over the batch (phase 1); see the module docstring.

    Args:
        prediction: the network output for the batch's kernels ``symbols``.
        batch: the padded batch (the loss uses every point in ``point_mask``, even if
            the encoder read fewer).
        valid: ``(B,)`` bool, elements the simulator produced correctly (default all).

    Returns:
        A :class:`LossOutput` (``loss`` is float64).
    """
    nll, failed = gp_nll_per_point(batch.with_params(prediction.params, prediction.noise))
    used = ~failed if valid is None else (~failed & valid)
    n_failed = failed.sum() if valid is None else (failed & valid).sum()
    return LossOutput(_masked_mean(nll, used), nll, used, n_failed)


def phase2_loss(
    prediction: Prediction,
    batch: PaddedBatch,
    true_noise: Tensor,
    is_positive: Tensor,
    valid: Tensor | None = None,
    alpha: float = 10.0,
    beta: float = 1.0,
) -> LossOutput:
    """Noise fine-tuning loss ``alpha * NLL + beta * MSE(sigma)`` on positive pairs.

    Args:
        prediction, batch, valid: as in :func:`phase1_loss`.
        true_noise: ``(B,)`` ground-truth noise variances ``sigma*^2``.
        is_positive: ``(B,)`` bool, pairs whose structure is the generating one.
        alpha, beta: the weights (paper: 10 and 1).

    Returns:
        A :class:`LossOutput` with ``noise_mse`` set.
    """
    nll, failed = gp_nll_per_point(batch.with_params(prediction.params, prediction.noise))
    keep = is_positive if valid is None else (is_positive & valid)
    used = keep & ~failed
    sq = (true_noise.to(_F64).sqrt() - prediction.noise.to(_F64).clamp_min(0).sqrt()) ** 2
    nll_mean = _masked_mean(nll, used)
    mse = _masked_mean(sq, used)
    loss = alpha * nll_mean + beta * mse
    return LossOutput(loss, nll, used, (failed & keep).sum(), mse)
