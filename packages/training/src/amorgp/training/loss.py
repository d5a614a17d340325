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

The calibrated term (phase 1, ``TrainConfig.calibrated = w > 0``):
``(1 - w) L_1 + w L_cal``, with ``L_cal`` the per-point NLL at the exact Type-2 ML
global scale ``s*`` and noise ``sigma*^2`` given the network's other hyperparameters,
which is the start the library uses (:mod:`amorgp.amortizer.stages.calibrate`): the
kernel heads are trained for the calibrated answer, not for one that leans on the noise
head's errors.  ``s*`` and ``r* = sigma*^2 / s*`` are found without gradient, from one
symmetric eigendecomposition per dataset (padded points become a decoupled identity
block whose eigenvalues are exactly 1 and whose projections are 0, removed from the
log-determinant) and the same grid of ratios as the calibration
(:data:`~amorgp.amortizer.stages.calibrate.RATIO_RANGE`,
:data:`~amorgp.amortizer.stages.calibrate.GRID_POINTS`); the loss is then the NLL at
``(s* theta, s* r*)``, whose gradient with respect to ``theta`` at the profile's optimum is
the profile's own (envelope theorem).  The noise head and the global level of the
variances get their gradient from ``L_1`` (none at ``w = 1``).  With a ``calibrated_mask``
(``TrainConfig.calibrated_pairs = "positive"``) the mix applies to the masked elements
only (the positive pairs) and the others keep ``L_1`` at full weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from amorgp.amortizer.networks.network import Prediction
from amorgp.diff_linalg import gp_log_marginal_likelihood
from amorgp.lazy_kernels import PaddedBatch, kernel_matrix_dimwise

__all__ = [
    "LossOutput",
    "calibrated_nll_per_point",
    "calibrated_scale_noise",
    "gp_nll_per_point",
    "phase1_loss",
    "phase2_loss",
]

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


def calibrated_scale_noise(batch: PaddedBatch, params: Tensor) -> tuple[Tensor, Tensor]:
    """The exact Type-2 ML global scale ``s* (B,)`` and noise ``sigma*^2 (B,)`` of each
    element given its other hyperparameters ``params (B, D, L, P)`` (module docstring;
    no gradient).  Where nothing is finite: ``s* = 1`` and a NaN noise."""
    from amorgp.amortizer.stages.calibrate import GRID_POINTS, RATIO_RANGE, Scaling
    from amorgp.kernel_grammar import FLOORS, ParamKind

    symbols, symbol_mask = batch.param_structure()
    with torch.no_grad():
        p64 = params.detach().to(_F64)
        p64 = torch.where(torch.isfinite(p64), p64, torch.ones_like(p64))
        X64 = batch.X.to(_F64)
        K = kernel_matrix_dimwise(
            X64, X64, symbols, symbol_mask, p64, batch.vocab, batch.dim_mask, validate=False
        )
        pm = batch.point_mask
        N = pm.shape[1]
        both = pm[:, :, None] & pm[:, None, :]
        K = torch.where(both, K, torch.zeros_like(K)) + torch.diag_embed((~pm).to(_F64))
        finite = torch.isfinite(K).flatten(1).all(-1)
        K = torch.where(finite[:, None, None], K, torch.eye(N, dtype=_F64, device=K.device))
        lam, Q = torch.linalg.eigh(K)
        lam = lam.clamp_min(0.0)
        y = torch.where(pm, batch.y.to(_F64), torch.zeros((), dtype=_F64, device=K.device))
        z2 = (Q.transpose(-1, -2) @ y[..., None])[..., 0] ** 2
        n = pm.sum(1).to(_F64)
        r = torch.logspace(
            math.log10(RATIO_RANGE[0]),
            math.log10(RATIO_RANGE[1]),
            GRID_POINTS,
            dtype=_F64,
            device=K.device,
        )
        shifted = lam[:, None, :] + r[None, :, None]  # (B, G, N)
        q = (z2[:, None, :] / shifted).sum(-1)
        logdet = shifted.log().sum(-1) - (N - n)[:, None] * torch.log1p(r)[None, :]
        s = q / n.clamp_min(1)[:, None]
        profile = n[:, None] * s.log() + logdet  # 2 NLL less constants
        scaling = Scaling.of(batch.vocab, symbols, symbol_mask, p64)
        noise = s * r[None, :]
        ok = (s >= scaling.s_min[:, None]) & (noise >= 2.0 * FLOORS[ParamKind.NOISE])
        profile = torch.where(ok & torch.isfinite(profile), profile, math.inf)
        best = profile.argmin(1)
        s_best = s.gather(1, best[:, None])[:, 0]
        noise_best = noise.gather(1, best[:, None])[:, 0]
        found = torch.isfinite(profile.gather(1, best[:, None])[:, 0]) & finite
        s_best = torch.where(found, s_best, torch.ones_like(s_best))
        noise_best = torch.where(found, noise_best, torch.full_like(noise_best, math.nan))
    return s_best, noise_best


def calibrated_nll_per_point(batch: PaddedBatch, params: Tensor) -> tuple[Tensor, Tensor]:
    """Per-point NLL at the calibrated scale and noise (module docstring), differentiable
    with respect to ``params`` (``(B, D, L, P)``); ``(nll (B,), failed (B,))`` as
    :func:`gp_nll_per_point`."""
    from amorgp.amortizer.stages.calibrate import Scaling

    s, noise = calibrated_scale_noise(batch, params)
    symbols, symbol_mask = batch.param_structure()
    p64 = params.to(_F64)
    scaling = Scaling.of(batch.vocab, symbols, symbol_mask, p64.detach())
    return gp_nll_per_point(batch.with_params(scaling.apply(p64, s), noise))


def phase1_loss(
    prediction: Prediction,
    batch: PaddedBatch,
    valid: Tensor | None = None,
    calibrated: float = 0.0,
    calibrated_mask: Tensor | None = None,
) -> LossOutput:
    """Mean per-point NLL over the batch (phase 1); see the module docstring.

    Args:
        prediction: the network output for the batch's kernels ``symbols``.
        batch: the padded batch (the loss uses every point in ``point_mask``, even if
            the encoder read fewer).
        valid: ``(B,)`` bool, elements the simulator produced correctly (default all).
        calibrated: weight ``w`` of the calibrated NLL (``(1 - w)`` on the plain one).
        calibrated_mask: ``(B,)`` bool, the elements the calibrated term applies to
            (``TrainConfig.calibrated_pairs``); the others keep the plain NLL at full
            weight. Default: all.

    Returns:
        A :class:`LossOutput` (``loss`` is float64; ``nll`` the plain NLL).
    """
    nll, failed = gp_nll_per_point(batch.with_params(prediction.params, prediction.noise))
    if calibrated > 0:
        cal, cal_failed = calibrated_nll_per_point(batch, prediction.params)
        failed = failed | (cal_failed if calibrated_mask is None else cal_failed & calibrated_mask)
    used = ~failed if valid is None else (~failed & valid)
    n_failed = failed.sum() if valid is None else (failed & valid).sum()
    if calibrated > 0:
        mixed = (1.0 - calibrated) * nll + calibrated * cal
        if calibrated_mask is not None:
            mixed = torch.where(calibrated_mask, mixed, nll)
        return LossOutput(_masked_mean(mixed, used), nll, used, n_failed)
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
