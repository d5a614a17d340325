"""The exact log marginal likelihood of ``s K + sigma^2 I`` as a function of the scale
``s`` and the noise-to-signal ratio ``r = sigma^2 / s``, for a batch of kernel matrices
``K``: the representations the calibration (:mod:`amorgp.amortizer.stages.calibrate`) searches.

* :class:`Eigen`: eigenvalues ``lambda_i`` and projections ``z_i = q_i^T y`` (one batched
  ``eigh``, any device); ``O(n)`` per ratio;
* :class:`Tridiagonal` (the CPU's): one Householder reflection mapping ``y`` to
  ``|y| e_1`` and LAPACK's tridiagonalisation per matrix, then an ``O(n)`` pivot
  recurrence per ratio; no eigenvectors.

Both take one target vector for the whole batch or one per matrix, and agree to rounding.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

__all__ = ["profile_log_likelihood", "tridiagonal_form"]

_LOG_2PI = math.log(2.0 * math.pi)


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


class Eigen:
    """The likelihoods from eigenvalues ``lam (B, n)`` (clamped at 0) and squared
    projections ``z2 (B, n)`` of the targets."""

    def __init__(self, lam: Tensor, z2: Tensor) -> None:
        self.lam, self.z2 = lam, z2
        self.mean_y2 = z2.mean(-1, keepdim=True)  # (B, 1)

    def profile(self, log_r: Tensor) -> tuple[Tensor, Tensor]:
        return profile_log_likelihood(self.lam, self.z2, log_r)

    def exact(self, noise: Tensor) -> Tensor:
        return _exact_log_likelihood(self.lam, self.z2, noise)

    def profile_and_exact(self, log_r: Tensor, noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`profile` at ``log_r (B, G)`` and :meth:`exact` at ``noise (B, J)``."""
        return (*self.profile(log_r), self.exact(noise))


class Tridiagonal:
    """The likelihoods from the tridiagonal form of ``H K H^T`` where ``H`` is orthogonal
    and ``H y = |y| e_1``: with ``T = Q^T H K H^T Q`` (Householder tridiagonalisation,
    whose ``Q`` leaves ``e_1`` fixed),

    ``y^T (K + r I)^{-1} y = |y|^2 [(T + r I)^{-1}]_{11}`` and
    ``log det (K + r I) = log det (T + r I)``,

    both from the pivots ``g`` of the factorisation of ``T + r I`` from its last row:
    ``g_n = a_n + r``, ``g_i = a_i + r - b_i^2 / g_{i+1}``, then ``[(T + r I)^{-1}]_{11} =
    1 / g_1`` and ``log det = sum_i log g_i`` (``O(n)`` per ratio, no eigenvectors).
    ``a (B, n)`` is the diagonal of ``T``, ``b2 (B, n - 1)`` its squared off-diagonal,
    ``yy (B,)`` each matrix's ``|y|^2`` (its targets, shared or its own)."""

    def __init__(self, a: Tensor, b2: Tensor, yy: Tensor) -> None:
        self.a, self.b2, self.yy = a.numpy(), b2.numpy(), yy.numpy()[:, None]
        self.dtype = a.dtype
        self.mean_y2 = (yy / a.shape[1])[:, None]
        self.finite = a.isfinite().all(1) & b2.isfinite().all(1)
        """``(B,)`` rows whose form is finite (those whose matrix is)."""

    def _quad_logdet(self, r: Tensor) -> tuple[Tensor, Tensor]:
        """``(y^T (K + r I)^{-1} y, log det(K + r I))`` at ``r (B, G)``, each ``(B, G)``."""
        import numpy as np

        n = self.a.shape[1]
        rr = r.numpy()
        g = np.empty((n, *rr.shape))
        np.add(self.a.T[:, :, None], rr[None], out=g)  # a_i + r, then the pivots in place
        b2 = self.b2.T[:, :, None]
        tmp = np.empty(rr.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            for i in range(n - 2, -1, -1):  # the recurrence is sequential in i
                np.divide(b2[i], g[i + 1], out=tmp)
                np.subtract(g[i], tmp, out=g[i])
            quad = self.yy / g[0]
            logdet = _log_product(g)
        return torch.from_numpy(quad), torch.from_numpy(logdet)

    def profile(self, log_r: Tensor) -> tuple[Tensor, Tensor]:
        n = self.a.shape[1]
        quad, logdet = self._quad_logdet(log_r.exp())
        s = quad / n
        lml = -0.5 * (n * (s.log() + 1.0 + _LOG_2PI) + logdet)
        return lml, s

    def exact(self, noise: Tensor) -> Tensor:
        n = self.a.shape[1]
        quad, logdet = self._quad_logdet(noise)
        return -0.5 * (quad + logdet + n * _LOG_2PI)

    def profile_and_exact(self, log_r: Tensor, noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`profile` at ``log_r (B, G)`` and :meth:`exact` at ``noise (B, J)`` in one
        pass of the recurrence (its cost is the Python loop over ``n``, not the width)."""
        n, G = self.a.shape[1], log_r.shape[1]
        quad, logdet = self._quad_logdet(torch.cat([log_r.exp(), noise], 1))
        s = quad[:, :G] / n
        lml = -0.5 * (n * (s.log() + 1.0 + _LOG_2PI) + logdet[:, :G])
        exact = -0.5 * (quad[:, G:] + logdet[:, G:] + n * _LOG_2PI)
        return lml, s, exact


LOG_BLOCK = 8
"""Pivots multiplied together before one logarithm in :func:`_log_product`."""


def _log_product(g: np.ndarray) -> np.ndarray:
    """``sum_i log g_i`` over the first axis of the pivots ``g (n, ...)``, with one
    logarithm per :data:`LOG_BLOCK` pivots (their product: the pivots of ``T + r I`` lie
    between ``r`` and ``|T| + r``, so a block's product stays far inside the float64
    range; the logarithms were most of the grid's time).  ``nan`` where a pivot is not
    positive, as the sum of the logarithms would be (``-inf`` for a zero pivot)."""
    n = g.shape[0]
    full = n - n % LOG_BLOCK
    prod = g[:full].reshape(full // LOG_BLOCK, LOG_BLOCK, *g.shape[1:]).prod(1)
    out = np.log(prod).sum(0) + np.log(g[full:]).sum(0)
    low = g.min(0)
    out[low < 0] = np.nan
    out[low == 0] = -np.inf
    return out


@functools.lru_cache(maxsize=64)
def _dsytrd_lwork(n: int) -> int:
    """LAPACK's optimal workspace for ``dsytrd`` at order ``n``.

    With the optimal workspace ``dsytrd`` runs its blocked (level-3 BLAS) reduction;
    SciPy's default, the minimal workspace, falls back to the slower unblocked one."""
    from scipy.linalg import lapack

    lwork, info = lapack.dsytrd_lwork(max(n, 1), lower=1)
    return max(int(lwork), 1) if info == 0 else max(n, 1)


def tridiagonal_form(
    Km: Tensor, Y: Tensor, overwrite: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, b2, yy)``: the diagonal ``(B, n)``, squared off-diagonal ``(B, n - 1)`` of the
    tridiagonal form of ``H_b K_b H_b`` and ``|y_b|^2 (B,)``, for CPU float64 matrices
    ``Km (B, n, n)`` and targets ``Y``, one ``(n,)`` for all or ``(B, n)`` each.

    One Householder reflection ``H = I - 2 v v^T`` per target (``H y = -sign(y_1) |y|
    e_1``), applied to every matrix at once (a rank-2 update, in the matrices' own memory
    where ``overwrite``), then LAPACK's ``dsytrd`` per matrix (``4/3 n^3`` flops, about a
    third of ``eigh``'s time at ``n = 500``: no eigenvectors, no back-transformation)."""
    from scipy.linalg import lapack

    B, n = Km.shape[0], Km.shape[-1]
    Yb = Y.expand(B, n)
    yy = torch.einsum("bn,bn->b", Yb, Yb)
    v = Yb.clone()
    v[:, 0] += torch.copysign(yy.sqrt(), Yb[:, 0])
    v = v / v.norm(dim=1, keepdim=True)
    w = (Km @ v[..., None])[..., 0]  # (B, n)
    w = w - (w * v).sum(1, keepdim=True) * v
    if overwrite:
        Kt = Km.baddbmm_(v[:, :, None], w[:, None, :], alpha=-2.0)  # H K H, rank 2
    else:
        Kt = torch.baddbmm(Km, v[:, :, None], w[:, None, :], alpha=-2.0)
    Kt.baddbmm_(w[:, :, None], v[:, None, :], alpha=-2.0)
    a = torch.empty((B, n), dtype=torch.float64)
    b = torch.empty((B, max(n - 1, 0)), dtype=torch.float64)
    lwork = _dsytrd_lwork(n)
    for i in range(B):  # LAPACK has no batched tridiagonalisation
        # the symmetric C-ordered matrix is its own Fortran-ordered transpose
        _, d, e, _, info = lapack.dsytrd(Kt[i].numpy().T, lower=1, overwrite_a=1, lwork=lwork)
        if info != 0:
            raise RuntimeError(f"dsytrd failed with info {info}")
        a[i], b[i] = torch.from_numpy(d), torch.from_numpy(e)
    return a, b * b, yy


def _tridiagonal(Km: Tensor, Y: Tensor, overwrite: bool = False) -> Tridiagonal:
    """:class:`Tridiagonal` of CPU float64 matrices ``Km (B, n, n)`` and targets ``Y``,
    ``(n,)`` for all or ``(B, n)`` each (:func:`tridiagonal_form`)."""
    return Tridiagonal(*tridiagonal_form(Km, Y, overwrite))


def _eigen(Km: Tensor, Y: Tensor) -> Eigen:
    """:class:`Eigen` of ``Km (B, n, n)`` and targets ``Y``, ``(n,)`` for all or ``(B, n)``
    each: one batched ``eigh``."""
    lam, Q = torch.linalg.eigh(Km)
    z2 = (Q.transpose(1, 2) @ Y.expand(Km.shape[:2])[..., None])[..., 0] ** 2
    return Eigen(lam.clamp_min(0.0), z2)


_SPECTRA: dict[str, Callable[[Tensor, Tensor], Eigen | Tridiagonal]] = {
    "tridiagonal": _tridiagonal,
    "eigh": _eigen,
}
"""The representation of the likelihoods by method name (:data:`METHODS` less ``auto``)."""


def spectrum(
    Km: Tensor, Y: Tensor, method: str, overwrite: bool = False
) -> tuple[Eigen | Tridiagonal, Tensor]:
    """The likelihoods' representation of ``Km (B, n, n)`` and targets ``Y`` (``(n,)`` or
    ``(B, n)``) by ``method`` (see :data:`METHODS`; ``"auto"``: the tridiagonal form on
    the CPU, ``eigh`` elsewhere), and ``(B,)`` which matrices are finite (the others'
    likelihoods are not numbers).  The tridiagonal form, a direct reduction, is finite
    where its matrix is (``Km`` is its workspace where ``overwrite``); ``eigh`` gets the
    identity in place of a matrix that is not finite."""
    if method == "auto":
        method = "tridiagonal" if Km.device.type == "cpu" else "eigh"
    if method == "tridiagonal":
        spec = _tridiagonal(Km, Y, overwrite)
        return spec, spec.finite
    lo, hi = Km.flatten(1).aminmax(dim=1)  # one pass; NaN propagates
    finite = torch.isfinite(lo) & torch.isfinite(hi)
    if Km.device.type != "cpu" or not bool(finite.all()):  # no device to wait on the CPU
        eye = torch.eye(Km.shape[-1], dtype=Km.dtype, device=Km.device)
        Km = torch.where(finite[:, None, None], Km, eye)
    return _SPECTRA[method](Km, Y), finite
