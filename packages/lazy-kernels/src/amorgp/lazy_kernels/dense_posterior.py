"""Exact GP posteriors of batches of dense kernel matrices: :class:`DensePosterior`,
one Cholesky factor each (``Posterior.dense`` builds one).

The single factorisation behind the baselines' exact predictive, the ensembles' batched
member predictive and the GPyTorch/BoTorch bridge; see ``docs/architecture.md`` §6.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from amorgp.core.errors import DataError
from amorgp.diff_linalg import robust_cholesky

__all__ = ["DensePosterior"]

_LOG_2PI = math.log(2.0 * math.pi)


class _DenseLML(torch.autograd.Function):
    """Batched ``-1/2 y^T alpha - sum log diag L`` from given factors; backward
    ``Abar = 1/2 (alpha alpha^T - A^{-1}) g`` and ``ybar = -alpha g`` per element (any
    batch shape, none included: the Cholesky solver's cached factor uses it too)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, y: Tensor, L: Tensor, alpha: Tensor) -> Tensor:
        ctx.save_for_backward(L, alpha)
        return -0.5 * (y * alpha).sum(-1) - torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: Tensor) -> Any:
        L, alpha = ctx.saved_tensors
        gA = gy = None
        if ctx.needs_input_grad[0]:
            outer = alpha[..., :, None] * alpha[..., None, :]
            gA = (0.5 * g)[..., None, None] * (outer - torch.cholesky_inverse(L))
        if ctx.needs_input_grad[1]:
            gy = -g[..., None] * alpha
        return gA, gy, None, None


class DensePosterior:
    """Exact GP posteriors of a batch of dense kernel matrices, one Cholesky factor each.

    For every batch element ``b``: ``A_b = K_b + sigma_b^2 I = L_b L_b^T`` (plus jitter
    where the factorisation needs it), ``alpha_b = A_b^{-1} y_b``; from these the log
    marginal likelihood, ``A_b^{-1}`` and the predictive at test points whose
    cross-covariance ``K(X, X*)`` is given.  Built by :meth:`Posterior.dense`.

    With ``point_mask`` (``(..., n)`` bool, the padded-batch contract) the padded points
    are an identity block with zero targets: they change neither the likelihood nor
    the predictive.  Elements whose ``A`` is not finite or does not factor even with
    jitter are flagged in :attr:`failed` (``L = I``) and get NaN results, never an
    exception.  The factor is built without autograd; the log marginal likelihood is
    differentiable w.r.t. ``K``, ``noise`` and ``y`` (fused adjoint), predictions are not.

    Args:
        K: ``(..., n, n)`` symmetric kernel matrices without noise (float64 for GP algebra).
        y: ``(..., n)`` targets (minus any mean).
        noise: ``sigma^2``, a scalar or ``(...,)``.
        point_mask: ``(..., n)`` bool, ``True`` for real points; ``None``: all real.
        jitter, max_tries: :func:`amorgp.diff_linalg.robust_cholesky`'s relative jitter
            ladder (``jitter * 10^k * mean |A_ii|``).
        jitter_ladder: absolute jitters tried in order instead, per failing element, e.g.
            GPyTorch's ``psd_safe_cholesky`` in float64: ``(1e-8, 1e-7, 1e-6)``.

    One unbatched matrix without ``point_mask`` takes a fast path (the bridge's objectives
    evaluate thousands of small ones): one plain Cholesky before any check, jitter and the
    finiteness checks only when it fails, no broadcasting or mask algebra; the results
    are those of the general path.

    Raises:
        DataError: on shape mismatches.
    """

    A: Tensor
    """``(..., n, n)`` ``K + sigma^2 I`` (identity block on padded points), differentiable."""
    y: Tensor
    """``(..., n)`` the targets (zero on padded points)."""
    noise: Tensor
    """``(...,)`` ``sigma^2``."""
    point_mask: Tensor | None
    """The ``point_mask`` given."""
    n_points: Tensor | float
    """The number of real points (``(...,)`` with ``point_mask``)."""
    L: Tensor
    """``(..., n, n)`` lower factors of ``A + jitter I`` (identity where failed)."""
    jitter: Tensor
    """``(...,)`` absolute jitter each factor needed (0 where none)."""
    failed: Tensor
    """``(...,)`` bool: ``A`` not finite or not positive definite even with jitter."""
    alpha: Tensor
    """``(..., n)`` ``A^{-1} y``."""
    any_failed: bool
    """Whether any element failed."""

    def __init__(
        self,
        K: Tensor,
        y: Tensor,
        noise: float | Tensor,
        *,
        point_mask: Tensor | None = None,
        jitter: float = 1e-8,
        max_tries: int = 5,
        jitter_ladder: tuple[float, ...] | None = None,
    ) -> None:
        if not isinstance(K, Tensor) or K.ndim < 2 or K.shape[-1] != K.shape[-2]:
            raise DataError(f"K must have shape (..., n, n), got {tuple(getattr(K, 'shape', ()))}")
        batch, n = K.shape[:-2], K.shape[-1]
        if not isinstance(y, Tensor) or tuple(y.shape) != (*batch, n):
            got = tuple(getattr(y, "shape", ()))
            raise DataError(f"y must have shape {(*batch, n)} to match K, got {got}")
        if (
            point_mask is None
            and not batch
            and (isinstance(noise, float | int) or (isinstance(noise, Tensor) and noise.ndim == 0))
            and self._factor_single(K, y, noise)
        ):
            return
        noise_t = torch.as_tensor(noise, dtype=K.dtype, device=K.device)
        if noise_t.ndim > len(batch) or not _broadcasts(noise_t.shape, batch):
            raise DataError(f"noise must be a scalar or have shape {tuple(batch)}, got {noise!r}")
        noise_t = noise_t.expand(batch)
        y = y.to(K.dtype)
        if point_mask is None:
            A = K.clone()
            A.diagonal(dim1=-2, dim2=-1).add_(noise_t.unsqueeze(-1))
            self.n_points = float(n)
        else:
            if tuple(point_mask.shape) != (*batch, n):
                got = tuple(point_mask.shape)
                raise DataError(f"point_mask must have shape {(*batch, n)}, got {got}")
            mf = point_mask.to(K.dtype)
            A = K * (mf[..., :, None] * mf[..., None, :]) + torch.diag_embed(
                noise_t[..., None] * mf + (1.0 - mf)
            )
            y = y * mf
            self.n_points = mf.sum(-1)
        self.A, self.y, self.noise, self.point_mask = A, y, noise_t, point_mask
        with torch.no_grad():
            L, eps, failed, any_failed = _factor(A.detach(), jitter, max_tries, jitter_ladder)
            self._store(L, eps, failed, any_failed)

    def _factor_single(self, K: Tensor, y: Tensor, noise: float | Tensor) -> bool:
        """The fast path of one unmasked ``(n, n)`` matrix with a scalar noise: one plain
        Cholesky, no mask, no broadcasting, no host check before it, no autograd context.
        ``False`` (nothing stored) when ``A`` needs jitter or is not finite: the general path
        takes over, with the same result as if it had run alone."""
        n = K.shape[-1]
        if isinstance(noise, Tensor):
            A = K + noise * _eye(n, K.dtype, K.device)
        else:
            A = torch.add(K, _eye(n, K.dtype, K.device), alpha=float(noise))
        Ad = A.detach() if A.requires_grad else A
        L, info = torch.linalg.cholesky_ex(Ad)
        # a successful factor of a non-finite A has an infinite diagonal entry, and a
        # non-finite entry above the diagonal is not read: the sum catches both
        if info.item() != 0 or not math.isfinite(Ad.sum().item()):
            return False
        y = y if y.dtype == K.dtype else y.to(K.dtype)
        self.A, self.y, self.L, self.point_mask, self.n_points = A, y, L, None, float(n)
        self.any_failed = False
        self._lazy = (noise, K.dtype, K.device)
        yd = y.detach() if y.requires_grad else y
        self.alpha = torch.cholesky_solve(yd.unsqueeze(1), L).squeeze(1)
        return True

    def __getattr__(self, name: str) -> Any:
        # the attributes the fast path knows without computing them, made on first use
        lazy = self.__dict__.get("_lazy")
        if lazy is None or name not in ("jitter", "failed", "noise"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        noise, dtype, device = lazy
        if name == "noise":
            value = torch.as_tensor(noise, dtype=dtype, device=device)
        else:
            value = torch.zeros((), dtype=dtype if name == "jitter" else torch.bool, device=device)
        setattr(self, name, value)
        return value

    def _store(self, L: Tensor, eps: Tensor, failed: Tensor, any_failed: bool) -> None:
        self.L, self.jitter, self.failed, self.any_failed = L, eps, failed, any_failed
        self.alpha = torch.cholesky_solve(self.y.detach().unsqueeze(-1), L).squeeze(-1)

    def _nan_where_failed(self, value: Tensor) -> Tensor:
        if not self.any_failed:
            return value
        bad = self.failed.reshape((*self.failed.shape, *([1] * (value.ndim - self.failed.ndim))))
        return torch.where(bad, torch.full_like(value, float("nan")), value)

    def log_marginal_likelihood(self) -> Tensor:
        """``(...,)`` ``log N(y; 0, A)`` over the real points; NaN where failed."""
        value = _DenseLML.apply(self.A, self.y, self.L, self.alpha)
        return self._nan_where_failed(value - 0.5 * self.n_points * _LOG_2PI)

    def inverse(self) -> Tensor:
        """``(..., n, n)`` ``A^{-1}`` from the factor (identity block on padded points)."""
        return torch.cholesky_inverse(self.L)

    def predict(
        self, Ks: Tensor, kss: Tensor, *, include_noise: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Predictive ``(mean (..., m), var (..., m))`` from ``Ks = K(X, X*) (..., n, m)`` and
        the prior variances ``kss = k(x*, x*) (..., m)``.

        ``mean = Ks^T alpha``, ``var = kss - ||L^{-1} Ks||^2`` per column clamped at 0,
        plus ``sigma^2`` with ``include_noise``; NaN where failed.
        """
        batch, n = self.L.shape[:-2], self.L.shape[-1]
        if tuple(Ks.shape[:-1]) != (*batch, n) or tuple(kss.shape) != (*batch, Ks.shape[-1]):
            raise DataError(
                f"Ks must have shape {(*batch, n)} + (m,) and kss the leading shape + (m,); "
                f"got {tuple(Ks.shape)} and {tuple(kss.shape)}"
            )
        with torch.no_grad():
            if self.point_mask is not None:
                Ks = Ks * self.point_mask.to(Ks.dtype)[..., None]
            mean = (Ks * self.alpha[..., None]).sum(-2)
            V = torch.linalg.solve_triangular(self.L, Ks, upper=False)
            var = (kss - (V * V).sum(-2)).clamp_min(0.0)
            if include_noise:
                var = var + self.noise.detach()[..., None]
        return self._nan_where_failed(mean), self._nan_where_failed(var)

    def __repr__(self) -> str:
        return f"DensePosterior(batch={tuple(self.L.shape[:-2])}, n={self.L.shape[-1]})"


_EYES: dict[tuple[int, torch.dtype, torch.device], Tensor] = {}


def _eye(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A shared ``(n, n)`` identity, made once per size (never modified: only read)."""
    key = (n, dtype, device)
    eye = _EYES.get(key)
    if eye is None:
        if len(_EYES) > 64:
            _EYES.clear()
        eye = _EYES[key] = torch.eye(n, dtype=dtype, device=device)
    return eye


def _broadcasts(shape: torch.Size, batch: torch.Size) -> bool:
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(batch), strict=False))


def _factor(
    A: Tensor, jitter: float, max_tries: int, ladder: tuple[float, ...] | None
) -> tuple[Tensor, Tensor, Tensor, bool]:
    """``(L, jitter, failed, any failed)`` of ``A (..., n, n)`` (no autograd): non-finite
    elements are failed with ``L = I``; the others by ``robust_cholesky``'s relative
    ladder or, given ``ladder``, by :func:`_ladder_cholesky`."""
    bad = None
    if not bool(torch.isfinite(A).all()):
        bad = ~torch.isfinite(A).all(-1).all(-1)
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        A = torch.where(bad[..., None, None], eye.expand_as(A), A)
    if ladder is None:
        res = robust_cholesky(A, jitter=jitter, max_tries=max_tries, validate=False)
        L, eps, failed = res.L, res.jitter, res.failed
        any_failed = bool(failed.any())
    else:
        L, eps, failed, any_failed = _ladder_cholesky(A, ladder)
    if bad is not None:
        failed, any_failed = failed | bad, True
    return L, eps, failed, any_failed


def _ladder_cholesky(A: Tensor, ladder: tuple[float, ...]) -> tuple[Tensor, Tensor, Tensor, bool]:
    """Cholesky of ``A (..., n, n)``, retrying each failing element with the absolute
    jitters of ``ladder`` in order: ``(L, jitter, failed, any failed)``, ``L = I`` where
    failed."""
    L, info = torch.linalg.cholesky_ex(A)
    failed = info != 0
    eps = torch.zeros(A.shape[:-2], dtype=A.dtype, device=A.device)
    if not bool(failed.any()):
        return L, eps, failed, False
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    for value in ladder:
        if not bool(failed.any()):
            break
        L2, info2 = torch.linalg.cholesky_ex(A + value * eye)
        L = torch.where(failed[..., None, None], L2, L)
        eps = torch.where(failed, torch.full_like(eps, value), eps)
        failed = failed & (info2 != 0)
    any_failed = bool(failed.any())
    return torch.where(failed[..., None, None], eye.expand_as(L), L), eps, failed, any_failed
