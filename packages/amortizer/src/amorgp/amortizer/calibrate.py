"""Calibration of amortized hyperparameters: exact Type-2 ML of the scale and the noise.

The network predicts every hyperparameter; two of them the data determine cheaply and
exactly.  With the network's kernel matrix ``K`` fixed up to a global scale ``s``, the
log marginal likelihood of ``y ~ N(0, s K + sigma^2 I)`` depends on the scale and the
noise only through the eigenvalues ``lambda_i`` of ``K`` and the projections
``z_i = q_i^T y``.  Writing ``sigma^2 = s r``:

.. math::

    \\log p(y \\mid s, r) = -\\tfrac12 \\Big[ \\sum_i \\frac{z_i^2}{s (\\lambda_i + r)}
        + \\sum_i \\log s (\\lambda_i + r) + n \\log 2\\pi \\Big],

maximised over ``s`` in closed form, ``s(r) = n^{-1} \\sum_i z_i^2 / (\\lambda_i + r)``
(the *concentrated*, or profile, likelihood), which leaves a one-dimensional search over
the noise-to-signal ratio ``r``.  :func:`calibrate` evaluates the profile on a grid of
:data:`GRID_POINTS` values of ``log r`` spanning :data:`RATIO_RANGE` for every kernel at
once (one symmetric eigendecomposition per kernel, then ``O(n)`` per grid value), refines
the best grid value by a parabola through its neighbours, and keeps the network's own
``(s = 1, sigma^2)`` if that is better still, so the log marginal likelihood never
decreases.  The scale multiplies the variance of every addend by ``s^(1/D)`` in each of
the ``D`` active dimensions (the product over dimensions is then scaled by ``s``; the
network's split of the variance between addends and dimensions is kept); lengthscales,
periods and offsets are untouched, so the predictive mean depends on ``r`` only.

Measured on the paper protocol (``docs/model-card.md``): over the 24 evaluation kernels
on the five bundled datasets (split 0) the calibrated predictions have a lower test RMSE
than the network's on 87 % of the 120 (dataset, kernel) pairs and a lower test NLL on
88 %, at the cost of one eigendecomposition per kernel (about 30 ms at ``n = 500``).

Above :data:`MAX_POINTS` training points the eigendecompositions use a random subset of
that size (seeded, as the encoder's subset), so the cost stays bounded for large ``n``.
A smaller cap is not a free speed-up: with 250 points instead of all 500 (the paper
protocol's concrete, energy and housing cells, 3 splits x 24 kernels each) the whole
amortized fit took 0.55-0.58x the time, but the median test NLL rose by 0.004-0.028 nats
per point (up to 1.0 on one cell) and the RMSE fell on concrete and rose on housing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import (
    FLOORS,
    DimWiseStructure,
    OptionError,
    ParamKind,
    Vocabulary,
    encode,
)

__all__ = [
    "GRID_POINTS",
    "check_calibrate",
    "MAX_POINTS",
    "RATIO_RANGE",
    "Calibration",
    "calibrate",
    "profile_log_likelihood",
]

GRID_POINTS = 241
"""Values of ``log r`` on the grid (0.05 decades apart over :data:`RATIO_RANGE`)."""

RATIO_RANGE = (1e-8, 1e4)
"""Smallest and largest noise-to-signal ratio ``r = sigma^2 / s`` searched."""

MAX_POINTS = 1000
"""Most training points the eigendecompositions use (a seeded random subset above)."""

CHUNK_ELEMENTS = 1 << 23
"""Most kernel-matrix entries (float64: 64 MiB) decomposed at once."""

_LOG_2PI = math.log(2.0 * math.pi)
_NOISE_MIN = 2.0 * FLOORS[ParamKind.NOISE]
_VARIANCE_MIN = 2.0 * FLOORS[ParamKind.VARIANCE]


def check_calibrate(calibrate: Any) -> bool:
    """``calibrate`` as a ``bool``.

    Raises:
        OptionError: anything but ``True`` or ``False``.
    """
    if not isinstance(calibrate, bool):
        raise OptionError(f"calibrate must be True or False, got {calibrate!r}")
    return calibrate


@contextmanager
def _one_thread(device: torch.device) -> Iterator[None]:
    """One intra-op thread on the CPU inside the block (restored after).

    The symmetric eigensolver synchronises its threads many times per matrix: on a
    machine whose cores are busy with other work, two threads took 8.3 s for two
    308 x 308 matrices where one took 0.03 s (this project's 2-core CPU, loaded); at
    :data:`MAX_POINTS` points and below, one thread is as fast on an idle machine.  The
    grid search's element-wise work on ``(K, GRID_POINTS, n)`` tensors is as
    synchronisation-bound (18 ms for 6 kernels at 144 points with two threads on a
    loaded machine), so the whole calibration runs on one thread.
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Calibration:
    """Calibrated parameters of ``K`` kernels.

    Attributes:
        params: ``(K, D, L, P)`` parameters, the variances scaled (same layout, dtype and
            device as given).
        noise: ``(K,)`` noise variances.
        scale: ``(K,)`` factor ``s`` applied to each kernel (1 where the network's
            prediction was kept).
        gain: ``(K,)`` increase of the log marginal likelihood on the points used
            (``>= 0``; ``0`` where the prediction was kept).
    """

    params: Tensor
    noise: Tensor
    scale: Tensor
    gain: Tensor


def profile_log_likelihood(lam: Tensor, z2: Tensor, log_r: Tensor) -> tuple[Tensor, Tensor]:
    """Profile log marginal likelihood and its optimal scale at ratios ``exp(log_r)``.

    Args:
        lam: ``(B, n)`` eigenvalues of the kernel matrices (clamped at 0 by the caller).
        z2: ``(B, n)`` squared projections of the targets on the eigenvectors.
        log_r: ``(B, G)`` log noise-to-signal ratios.

    Returns:
        ``(lml (B, G), s (B, G))``: the log marginal likelihood maximised over the scale,
        and that scale.
    """
    n = lam.shape[-1]
    denom = lam[:, None, :] + log_r.exp()[..., None]  # (B, G, n)
    s = (z2[:, None, :] / denom).mean(-1)
    lml = -0.5 * (n * (s.log() + 1.0 + _LOG_2PI) + denom.log().sum(-1))
    return lml, s


def _exact_log_likelihood(lam: Tensor, z2: Tensor, noise: Tensor) -> Tensor:
    """``(B, G)`` log marginal likelihood at scale 1 and noise variances ``noise (B, G)``."""
    n = lam.shape[-1]
    denom = lam[:, None, :] + noise[..., None]  # (B, G, n)
    return -0.5 * ((z2[:, None, :] / denom).sum(-1) + denom.log().sum(-1) + n * _LOG_2PI)


def _log_grid(like: Tensor) -> Tensor:
    """``(B, G)``: the :data:`GRID_POINTS` values of ``log r`` over :data:`RATIO_RANGE`."""
    lo, hi = (math.log(v) for v in RATIO_RANGE)
    grid = torch.linspace(lo, hi, GRID_POINTS, dtype=like.dtype, device=like.device)
    return grid.expand(like.shape[0], -1)


def _valid(lml: Tensor, s: Tensor, log_r: Tensor, s_min: Tensor) -> Tensor:
    """``lml`` with ``-inf`` where the noise or a scaled variance would fall below its floor
    (``s_min (B,)``: the smallest scale that keeps every variance above its floor)."""
    ok = (s * log_r.exp() >= _NOISE_MIN) & (s >= s_min[:, None])
    ok &= torch.isfinite(lml)
    return torch.where(ok, lml, torch.full_like(lml, -math.inf))


def _candidates(grid: Tensor, lml: Tensor) -> Tensor:
    """``(B, 2)``: the best grid value of each row and the vertex of the parabola through
    it and its neighbours (within one grid step; the grid value where the three points do
    not curve down)."""
    i = lml.argmax(-1).clamp(1, grid.shape[1] - 2)
    f = lml.gather(1, torch.stack([i - 1, i, i + 1], -1))  # (B, 3)
    h = grid[:, 1:2] - grid[:, :1]  # (B, 1)
    curv = f[:, 0] - 2.0 * f[:, 1] + f[:, 2]
    shift = torch.where(
        curv < 0, 0.5 * h[:, 0] * (f[:, 0] - f[:, 2]) / curv, torch.zeros_like(curv)
    )
    x_grid = grid.gather(1, lml.argmax(-1, keepdim=True))  # (B, 1)
    x_par = grid.gather(1, i[:, None]) + torch.maximum(torch.minimum(shift[:, None], h), -h)
    return torch.cat([x_grid, torch.where(torch.isfinite(x_par), x_par, x_grid)], 1)


def _best_ratio(lam: Tensor, z2: Tensor, s_min: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Grid search and parabolic refinement of ``log r``: ``(log_r, s, lml)``, each ``(B,)``."""
    grid = _log_grid(lam)
    lml, s = profile_log_likelihood(lam, z2, grid)
    cand = _candidates(grid, _valid(lml, s, grid, s_min))
    lml_c, s_c = profile_log_likelihood(lam, z2, cand)
    lml_c = _valid(lml_c, s_c, cand, s_min)
    j = lml_c.argmax(-1, keepdim=True)
    return cand.gather(1, j)[:, 0], s_c.gather(1, j)[:, 0], lml_c.gather(1, j)[:, 0]


def _best_noise(lam: Tensor, z2: Tensor) -> tuple[Tensor, Tensor]:
    """Grid search and parabolic refinement of the noise alone at scale 1: ``(noise,
    lml)``, each ``(B,)``.

    The grid of ``log sigma^2`` spans :data:`RATIO_RANGE` times the mean squared target,
    so it follows the targets' units; noises below the floor are the floor."""
    level = z2.mean(-1, keepdim=True).clamp_min(1e-300)  # = mean(y^2)
    grid = _log_grid(lam) + level.log()  # (B, G)
    cand = _candidates(grid, _exact_log_likelihood(lam, z2, grid.exp().clamp_min(_NOISE_MIN)))
    noise = cand.exp().clamp_min(_NOISE_MIN)
    lml = _exact_log_likelihood(lam, z2, noise)
    j = lml.argmax(-1, keepdim=True)
    return noise.gather(1, j)[:, 0], lml.gather(1, j)[:, 0]


def calibrate(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
    noise: Tensor,
    *,
    seed: int = 0,
    scale: bool = True,
    matrices: Tensor | None = None,
) -> Calibration:
    """Exact Type-2 ML of the global scale and the noise of ``K`` kernels (module docstring).

    Args:
        Xn, yn: normalised data ``(n, d)``, ``(n,)``.
        structures: the ``K`` kernel structures (``d`` dimensions each).
        vocabulary: the symbol vocabulary of the parameter layout.
        params: ``(K, d, L, P)`` predicted parameters (normalised units).
        noise: ``(K,)`` predicted noise variances.
        seed: seed of the point subset above :data:`MAX_POINTS` points.
        scale: ``False`` keeps the scale (``s = 1``) and searches the noise alone on a grid
            (for a model that cannot hold a global scale, e.g. a GPyTorch kernel without
            ``ScaleKernel``).
        matrices: the ``(K, n, n)`` float64 kernel matrices of ``params`` on all of
            ``Xn`` when already evaluated (e.g. by
            :func:`amorgp.amortizer.batched.kernel_matrices`; only without a subset,
            ``n <=`` :data:`MAX_POINTS`); read, not modified.

    Returns:
        A :class:`Calibration`; a kernel whose eigendecomposition fails (non-finite
        matrix) keeps its prediction.
    """
    from amorgp.amortizer.forward import encoder_subset
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    K = len(structures)
    dev = params.device
    X64 = Xn.detach().to(dev, torch.float64)
    y64 = yn.detach().to(dev, torch.float64)
    idx = encoder_subset(X64.shape[0], MAX_POINTS, seed)
    if idx is not None and matrices is not None:
        raise OptionError(f"precomputed matrices need n <= {MAX_POINTS} points, got {X64.shape[0]}")
    if idx is not None:
        X64, y64 = X64[idx.to(dev)], y64[idx.to(dev)]
    n, d = X64.shape
    p64 = params.detach().to(torch.float64)
    n64 = noise.detach().to(torch.float64)
    symbols, symbol_mask = (torch.as_tensor(t, device=dev) for t in encode(structures, vocabulary))
    L = symbols.shape[2]
    p64 = p64[:, :d, :L]
    kinds, slots = (torch.as_tensor(t, device=dev) for t in vocabulary.param_kind_table())
    is_var = (kinds == list(ParamKind).index(ParamKind.VARIANCE)) & slots  # (V + 1, P)
    var_slot = is_var[symbols][..., : p64.shape[-1]] & symbol_mask[..., None]  # (K, d, L, P)
    dims = symbol_mask.any(-1)  # (K, d) active dimensions
    n_dims = dims.sum(-1).clamp_min(1).to(torch.float64)
    var_min = torch.where(var_slot, p64, torch.full_like(p64, math.inf)).flatten(1).amin(1)
    s_min = (_VARIANCE_MIN / var_min) ** n_dims  # variances scale by s^(1/D)

    factors = torch.ones(K, dtype=torch.float64, device=dev)
    new_noise = n64.clone()
    gain = torch.zeros(K, dtype=torch.float64, device=dev)
    per_chunk = max(1, CHUNK_ELEMENTS // (n * n))
    with _one_thread(dev):  # small, synchronisation-bound work: see _one_thread
        for start in range(0, K, per_chunk):  # chunks bound the memory of the kernel matrices
            sl = slice(start, min(K, start + per_chunk))
            B = sl.stop - sl.start
            if matrices is not None:
                Km = matrices[sl].to(torch.float64)
            else:
                Km = kernel_matrix_dimwise(
                    X64.expand(B, n, d),
                    X64.expand(B, n, d),
                    symbols[sl],
                    symbol_mask[sl],
                    p64[sl],
                    vocabulary,
                    validate=False,
                )
            finite = torch.isfinite(Km).flatten(1).all(1)
            Km = torch.where(finite[:, None, None], Km, torch.eye(n, dtype=Km.dtype, device=dev))
            lam, Q = torch.linalg.eigh(Km)
            lam = lam.clamp_min(0.0)
            z2 = (Q.transpose(1, 2) @ y64[:, None])[..., 0] ** 2
            if scale:
                log_r, s, lml = _best_ratio(lam, z2, s_min[sl])
                best_noise = s * log_r.exp()
            else:
                best_noise, lml = _best_noise(lam, z2)
                s = torch.ones_like(best_noise)
            base = _exact_log_likelihood(lam, z2, n64[sl, None])[:, 0]
            better = finite & torch.isfinite(lml) & (lml > base)
            factors[sl] = torch.where(better, s, torch.ones_like(s))
            new_noise[sl] = torch.where(better, best_noise, n64[sl])
            gain[sl] = torch.where(better, lml - base, torch.zeros_like(base))

    factor = factors ** (1.0 / n_dims)  # per active dimension
    scaled = p64 * torch.where(var_slot, factor[:, None, None, None], torch.ones_like(p64))
    out = params.detach().clone()
    out[:, :d, :L, : scaled.shape[-1]] = scaled.to(out.dtype)
    return Calibration(out, new_noise.to(noise.dtype), factors.to(noise.dtype), gain)
