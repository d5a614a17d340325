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
the noise-to-signal ratio ``r``.  :func:`calibrate` searches the profile on a grid of
:data:`GRID_POINTS` values of ``log r`` spanning :data:`RATIO_RANGE` for every kernel at
once (coarse to fine: every :data:`COARSE_STEP`-th value, then the values around the best
of those), refines the best grid value by a parabola through its neighbours, and keeps the
network's own
``(s = 1, sigma^2)`` if that is better still, so the log marginal likelihood never
decreases.  The scale multiplies every addend by ``s^(1/D)`` in each of the ``D`` active
dimensions through its variance (and, for ``LIN`` alone, ``s^2 x x' + c^2``, its constant
``c^2`` too: :class:`Scaling`), so the calibrated kernel is exactly ``s`` times the
network's whatever its structure, and the likelihood found is the calibrated kernel's
own; the network's split of the variance between addends and dimensions is kept,
lengthscales and periods are untouched, and the predictive mean depends on ``r`` only.

Measured on the paper protocol (``docs/model-card.md``): over the 24 evaluation kernels
on the five bundled datasets (split 0) the calibrated predictions have a lower test RMSE
than the network's on 87 % of the 120 (dataset, kernel) pairs and a lower test NLL on
88 %.

Two exact ways to evaluate the profile (``method``):

* ``"eigh"``: one symmetric eigendecomposition per kernel (eigenvalues ``lambda_i`` and
  projections ``z_i``), then ``O(n)`` per grid value; batched, any device;
* ``"tridiagonal"`` (the CPU default): one Householder reflection that maps ``y`` to
  ``|y| e_1`` and LAPACK's tridiagonalisation per kernel, then ``y^T (K + rI)^{-1} y``
  and ``log det(K + rI)`` from the ``O(n)`` pivot recurrence of the tridiagonal matrix
  (:mod:`amorgp.amortizer.stages.spectra`): no eigenvectors, about half the time of
  ``"eigh"`` on one thread (``docs/benchmarks/speed.md``).  The two agree to rounding (relative
  ``1e-8`` in the noise at worst on the paper kernels; the eigenvalue route clamps
  eigenvalues at 0, the recurrence does not need to).

Above :data:`MAX_POINTS` training points the calibration (either method) uses a random subset of
that size (seeded, as the encoder's subset), so the cost stays bounded for large ``n``.
A smaller cap is not a free speed-up: with 250 points instead of all 500 (the paper
protocol's concrete, energy and housing cells, 3 splits x 24 kernels each) the whole
amortized fit was faster, but the median test NLL rose by 0.004-0.028 nats per point (up to 1.0 on one cell) and the RMSE fell on concrete and rose on housing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.networks.structures import encoded
from amorgp.amortizer.stages.spectra import (
    Eigen,
    Tridiagonal,
    spectrum,
)
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import FLOORS, DimWiseStructure, ParamKind, Vocabulary

__all__ = [
    "COARSE_POINTS",
    "COARSE_STEP",
    "GRID_POINTS",
    "METHODS",
    "check_calibrate",
    "MAX_POINTS",
    "RATIO_RANGE",
    "Calibration",
    "Scaling",
    "calibrate",
    "calibrate_spectra",
]

GRID_POINTS = 241
"""Values of ``log r`` on the grid (0.05 decades apart over :data:`RATIO_RANGE`)."""

COARSE_STEP = 4
"""The grid search's first pass reads every ``COARSE_STEP``-th grid value (0.2 decades
apart), its second the values within ``COARSE_STEP`` of the best (:func:`_best_ratio`)."""

COARSE_POINTS = len(range(0, GRID_POINTS, COARSE_STEP))
"""Values of the grid search's first pass."""

RATIO_RANGE = (1e-8, 1e4)
"""Smallest and largest noise-to-signal ratio ``r = sigma^2 / s`` searched."""

MAX_POINTS = 1000
"""Most training points the calibration uses (a seeded random subset above)."""

METHODS = ("auto", "tridiagonal", "eigh")
"""Ways to evaluate the profile likelihood on the grid (see :func:`calibrate`)."""

CHUNK_ELEMENTS = 1 << 23
"""Most kernel-matrix entries (float64: 64 MiB) decomposed at once."""

_LOG_2PI = math.log(2.0 * math.pi)
_NOISE_MIN = 2.0 * FLOORS[ParamKind.NOISE]


@dataclass(frozen=True)
class Scaling:
    """How a global scale ``s`` enters ``K`` kernels' parameters ``(K, d, L, P)``.

    Every active dimension's addends are multiplied by ``s^(1/D)`` (``D`` active
    dimensions), each through its :meth:`~amorgp.kernel_grammar.Vocabulary.
    scale_slot_table` slots (the variance; LIN alone its constant as well), so the
    scaled kernel is ``s`` times the given one exactly, whatever its structure.

    Attributes:
        slots: ``(K, d, L, P)`` the slots multiplied.
        n_dims: ``(K,)`` float64 active dimensions ``D``.
        s_min: ``(K,)`` the smallest ``s`` that keeps every scaled slot at or above twice
            its floor (:data:`~amorgp.kernel_grammar.FLOORS`).
    """

    slots: Tensor
    n_dims: Tensor
    s_min: Tensor

    @classmethod
    def of(cls, vocabulary: Vocabulary, symbols: Tensor, mask: Tensor, params: Tensor) -> Scaling:
        """The scaling of ``params (K, d, L, P)`` float64 with ``symbols``/``mask (K, d, L)``."""
        import numpy as np

        dev = params.device
        P = params.shape[-1]
        kinds, _ = vocabulary.param_kind_table()
        floor = np.array([FLOORS.get(k, 0.0) for k in ParamKind])[kinds]  # (V + 1, P)
        table = torch.as_tensor(vocabulary.scale_slot_table(), device=dev)
        slots = table[symbols][..., :P] & mask[..., None]
        low = 2.0 * torch.as_tensor(floor, dtype=params.dtype, device=dev)[symbols][..., :P]
        room = torch.where(slots, params / low, torch.full_like(params, math.inf))
        n_dims = mask.any(-1).sum(-1).clamp_min(1).to(torch.float64)
        return cls(slots, n_dims, room.flatten(1).amin(1).reciprocal() ** n_dims)

    def apply(self, params: Tensor, s: Tensor) -> Tensor:
        """``params`` with each kernel scaled by ``s (K,)``."""
        factor = (s.to(torch.float64) ** (1.0 / self.n_dims)).to(params.dtype)
        return params * torch.where(self.slots, factor[:, None, None, None], 1.0)


def check_calibrate(calibrate: Any) -> bool:
    """``calibrate`` as a ``bool``.

    Raises:
        OptionError: anything but ``True`` or ``False``.
    """
    if not isinstance(calibrate, bool):
        raise OptionError(f"calibrate must be True or False, got {calibrate!r}")
    return calibrate


@functools.cache
def _blas_controller() -> Any:
    """threadpoolctl's controller of the loaded BLAS libraries (scanned once), or ``None``
    without threadpoolctl (it comes with scikit-learn).  SciPy's BLAS, which runs the
    tridiagonalisation, has its own thread pool, whose synchronisation costs far more
    than small reductions gain from it on a loaded machine (see :func:`one_thread`)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - without it the BLAS keeps its threads
        return None
    import scipy.linalg  # noqa: F401  (loads the BLAS the controller must see)

    return ThreadpoolController()


@contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """One intra-op thread on the CPU inside the block (restored after).

    The symmetric eigensolver synchronises its threads many times per matrix: on a
    machine whose cores are busy with other work, more threads can be orders of
    magnitude slower than one; at :data:`MAX_POINTS` points and below, one thread is as
    fast on an idle machine.  The grid search's element-wise work on
    ``(K, GRID_POINTS, n)`` tensors is as synchronisation-bound, so the whole calibration
    runs on one thread.
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        limits = _blas_controller()
        if limits is None:
            yield
        else:
            with limits.limit(limits=1, user_api="blas"):
                yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Calibration:
    """Calibrated parameters of ``K`` kernels.

    Attributes:
        params: ``(K, D, L, P)`` parameters scaled by :class:`Scaling` (same layout, dtype
            and device as given).
        noise: ``(K,)`` noise variances.
        scale: ``(K,)`` factor ``s`` applied to each kernel (1 where the network's
            prediction was kept).
        gain: ``(K,)`` increase of the log marginal likelihood on the points used
            (``>= 0``; ``0`` where the prediction was kept).
        log_marginal_likelihood: ``(K,)`` the exact log marginal likelihood of the scaled
            kernel matrices (``s`` times the given ones) plus the new noise on the points
            used (the calibrated kernel's own); ``-inf`` where a matrix is not finite.
    """

    params: Tensor
    noise: Tensor
    scale: Tensor
    gain: Tensor
    log_marginal_likelihood: Tensor


def min_noise(noise_floor: float | None) -> float:
    """The smallest noise variance the calibration returns for a noise floor (``None``:
    the transform's, ``FLOORS["noise"]``): twice the floor."""
    return _NOISE_MIN if noise_floor is None else 2.0 * noise_floor


def _log_grid(like: Tensor, noise_min: float = _NOISE_MIN) -> Tensor:
    """``(B, G)``: the :data:`GRID_POINTS` values of ``log r`` over :data:`RATIO_RANGE`,
    its low end lowered as far as ``noise_min`` is below the default floor's (``B``,
    dtype and device those of ``like``)."""
    lo, hi = (math.log(v) for v in RATIO_RANGE)
    lo += min(0.0, math.log(noise_min / _NOISE_MIN))
    grid = torch.linspace(lo, hi, GRID_POINTS, dtype=like.dtype, device=like.device)
    return grid.expand(like.shape[0], -1)


def _valid(
    lml: Tensor, s: Tensor, log_r: Tensor, s_min: Tensor, noise_min: float = _NOISE_MIN
) -> Tensor:
    """``lml`` with ``-inf`` where the noise or a scaled variance would fall below its floor
    (``s_min (B,)``: the smallest scale that keeps every variance above its floor)."""
    ok = (s * log_r.exp() >= noise_min) & (s >= s_min[:, None])
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


def _best_ratio(
    spec: Eigen | Tridiagonal,
    s_min: Tensor,
    noise: Tensor,
    noise_min: float = _NOISE_MIN,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Grid search and parabolic refinement of ``log r``: ``(log_r, s, lml, base)``, each
    ``(B,)``, where ``base`` is the exact likelihood at scale 1 and ``noise (B,)`` (the
    prediction), evaluated with the grid.

    The search reads the grid coarse to fine: every :data:`COARSE_STEP`-th value first,
    then the values within :data:`COARSE_STEP` of the best of those, then the parabola
    through the best and its neighbours.  The profile is smooth on the grid's scale
    (0.05 decades), so the fine search finds the grid's own best value at a quarter of
    the evaluations."""
    grid = _log_grid(noise, noise_min)  # (B, G)
    G = grid.shape[1]
    coarse = grid[:, ::COARSE_STEP]
    lml, s, base = spec.profile_and_exact(coarse, noise[:, None])
    centre = _valid(lml, s, coarse, s_min, noise_min).argmax(-1) * COARSE_STEP  # (B,)
    lo = (centre - COARSE_STEP).clamp(0, max(0, G - 1 - 2 * COARSE_STEP))
    window = lo[:, None] + torch.arange(min(G, 2 * COARSE_STEP + 1), device=grid.device)
    fine = grid.gather(1, window)
    lml_f, s_f = spec.profile(fine)
    cand = _candidates(fine, _valid(lml_f, s_f, fine, s_min, noise_min))
    lml_c, s_c = spec.profile(cand)
    lml_c = _valid(lml_c, s_c, cand, s_min, noise_min)
    j = lml_c.argmax(-1, keepdim=True)
    return cand.gather(1, j)[:, 0], s_c.gather(1, j)[:, 0], lml_c.gather(1, j)[:, 0], base[:, 0]


def _best_noise(
    spec: Eigen | Tridiagonal, like: Tensor, noise_min: float = _NOISE_MIN
) -> tuple[Tensor, Tensor]:
    """Grid search and parabolic refinement of the noise alone at scale 1: ``(noise,
    lml)``, each ``(B,)``.

    The grid of ``log sigma^2`` spans :data:`RATIO_RANGE` times the mean squared target,
    so it follows the targets' units; noises below the floor are the floor."""
    level = spec.mean_y2.clamp_min(1e-300)  # = mean(y^2)
    grid = _log_grid(like, noise_min) + level.log()  # (B, G)
    cand = _candidates(grid, spec.exact(grid.exp().clamp_min(noise_min)))
    noise = cand.exp().clamp_min(noise_min)
    lml = spec.exact(noise)
    j = lml.argmax(-1, keepdim=True)
    return noise.gather(1, j)[:, 0], lml.gather(1, j)[:, 0]


def _accept(
    finite: Tensor, lml: Tensor, base: Tensor, s: Tensor, noise: Tensor, given: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(scale, noise, gain, reached)`` of a chunk: the calibrated scale ``s`` and
    ``noise`` where their likelihood ``lml`` beats ``base`` (the ``given`` noise at scale
    1), else those; ``reached`` is the likelihood kept (``-inf`` where the matrix is not
    finite or the value not a number)."""
    better = finite & torch.isfinite(lml) & (lml > base)
    kept = torch.where(better, lml, base)
    return (
        torch.where(better, s, torch.ones_like(s)),
        torch.where(better, noise, given),
        torch.where(better, lml - base, torch.zeros_like(base)),
        torch.where(finite & ~torch.isnan(kept), kept, torch.full_like(kept, -math.inf)),
    )


def calibrate_spectra(
    spectra: Iterable[tuple[slice, Eigen | Tridiagonal, Tensor]],
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
    *,
    scale: bool = True,
    noise_min: float = _NOISE_MIN,
) -> Calibration:
    """The calibration of ``K`` kernels from the likelihoods' representations of chunks of
    them, ``(rows, spectrum, finite)`` each (:func:`~amorgp.amortizer.stages.spectra.spectrum`),
    read in turn on one thread: ``symbols``/``symbol_mask (K, d, L)``, ``params (K, D, L,
    P)``, ``noise (K,)``; ``scale`` and ``noise_min`` as in :func:`calibrate`."""
    K = params.shape[0]
    d, L = symbols.shape[1], symbols.shape[2]
    dev = params.device
    p64 = params.detach().to(torch.float64)[:, :d, :L]
    n64 = noise.detach().to(torch.float64)
    scaling = Scaling.of(vocabulary, symbols, symbol_mask, p64)
    factors = torch.ones(K, dtype=torch.float64, device=dev)
    new_noise = n64.clone()
    gain = torch.zeros(K, dtype=torch.float64, device=dev)
    reached = torch.full((K,), -math.inf, dtype=torch.float64, device=dev)
    with one_thread(dev):  # small, synchronisation-bound work: see one_thread
        for sl, spec, finite in spectra:
            if scale:
                log_r, s, lml, base = _best_ratio(spec, scaling.s_min[sl], n64[sl], noise_min)
                best_noise = s * log_r.exp()
            else:
                best_noise, lml = _best_noise(spec, n64[sl], noise_min)
                s = torch.ones_like(best_noise)
                base = spec.exact(n64[sl, None])[:, 0]
            factors[sl], new_noise[sl], gain[sl], reached[sl] = _accept(
                finite, lml, base, s, best_noise, n64[sl]
            )
    scaled = scaling.apply(p64, factors)
    out = params.detach().clone()
    out[:, :d, :L, : scaled.shape[-1]] = scaled.to(out.dtype)
    return Calibration(out, new_noise.to(noise.dtype), factors.to(noise.dtype), gain, reached)


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
    method: str = "auto",
    noise_floor: float | None = None,
    overwrite_matrices: bool = False,
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
            :func:`amorgp.amortizer.stages.batched.kernel_matrices`; only without a subset,
            ``n <=`` :data:`MAX_POINTS`); read, not modified unless
            ``overwrite_matrices``.
        method: how the likelihoods are evaluated on the grid (:data:`METHODS`):
            ``"tridiagonal"`` (CPU only), ``"eigh"``, or ``"auto"`` (the first on the
            CPU, the second elsewhere).  Both are exact; they agree to rounding.
        noise_floor: the noise variance's floor (``None``: the transform's,
            ``FLOORS["noise"]``); the calibrated noise stays at or above twice it, and the
            grid of ratios reaches as far below :data:`RATIO_RANGE` as the floor is below
            the transform's.
        overwrite_matrices: ``matrices`` may be overwritten (the caller does not read
            them again): the CPU's tridiagonal form is then computed in their memory.

    Returns:
        A :class:`Calibration`; a kernel whose eigendecomposition fails (non-finite
        matrix) keeps its prediction.
    """
    from amorgp.amortizer.networks.forward import encoder_subset
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    if method not in METHODS:
        raise OptionError(f"method must be one of {METHODS}, got {method!r}")
    K = len(structures)
    dev = params.device
    floor = min_noise(noise_floor)
    if method == "tridiagonal" and dev.type != "cpu":
        raise OptionError(f"the tridiagonal method runs on the CPU, not {dev}")
    X64 = Xn.detach().to(dev, torch.float64)
    y64 = yn.detach().to(dev, torch.float64)
    idx = encoder_subset(X64.shape[0], MAX_POINTS, seed)
    if idx is not None and matrices is not None:
        raise OptionError(f"precomputed matrices need n <= {MAX_POINTS} points, got {X64.shape[0]}")
    if idx is not None:
        X64, y64 = X64[idx.to(dev)], y64[idx.to(dev)]
    n, d = X64.shape
    p64 = params.detach().to(torch.float64)
    symbols, symbol_mask = encoded(structures, vocabulary, dev)
    p64 = p64[:, :d, : symbols.shape[2]]
    per_chunk = max(1, CHUNK_ELEMENTS // (n * n))

    def spectra() -> Iterator[tuple[slice, Eigen | Tridiagonal, Tensor]]:
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
            own = matrices is None or overwrite_matrices
            yield (sl, *spectrum(Km, y64, method, overwrite=own))

    return calibrate_spectra(
        spectra(), symbols, symbol_mask, params, noise, vocabulary, scale=scale,
        noise_min=floor,
    )  # fmt: skip
