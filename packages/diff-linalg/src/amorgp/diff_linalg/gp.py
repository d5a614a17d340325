"""GP log marginal likelihood on (ragged, padded) batches.

For one dataset with kernel matrix ``K`` (without noise), targets ``y`` and
noise variance ``sigma^2``::

    A = K + sigma^2 I
    log p(y) = -1/2 y^T A^{-1} y - 1/2 log det A - n/2 log(2 pi)

computed from one Cholesky ``A = L L^T`` (``log det A = 2 sum_i log L_ii``,
``alpha = A^{-1} y`` by two triangular solves).

Padded batches: with a point mask ``m``, the matrix actually factored is
``A_ij = m_i m_j (K_ij + sigma^2 delta_ij) + (1 - m_i) delta_ij``, i.e. the
padded rows and columns form an identity block, and padded targets are set to
zero.  The identity block has log-determinant 0 and contributes nothing to the
quadratic form, so padding changes nothing (``n`` counts valid points only).

Ragged batches are evaluated by one of three strategies (see
:data:`DEFAULT_STRATEGY` and ``docs/benchmarks/diff-linalg.md``):

* ``"pad"``: one batched Cholesky of the whole ``(B, N, N)`` padded batch;
* ``"bucket"``: elements sorted by their number of valid points and split into
  size buckets, each cropped to its own largest size (valid points are moved
  first by a permutation, which leaves the likelihood unchanged);
* ``"loop"``: each element cropped to its own size (a Python loop; reference).

On the CPU bucketing is the fastest of the three for batches of mixed sizes, and the
fused adjoint makes differentiating through the Cholesky factor cheaper
(``docs/benchmarks/diff-linalg.md``).
"""

from __future__ import annotations

import math
from typing import Any, Literal, overload

import torch

from amorgp.diff_linalg._validation import check_finite, check_square, check_tensor
from amorgp.diff_linalg.buckets import size_buckets
from amorgp.diff_linalg.cholesky import jittered_cholesky_ex, robust_cholesky

__all__ = ["DEFAULT_STRATEGY", "Strategy", "gp_log_marginal_likelihood"]

Strategy = Literal["auto", "pad", "bucket", "loop"]

#: Strategy used by ``strategy="auto"`` on the CPU (chosen from the benchmark report);
#: on other devices ``"auto"`` pads (no host synchronisation).
DEFAULT_STRATEGY: Literal["pad", "bucket", "loop"] = "bucket"

_LOG_2PI = math.log(2.0 * math.pi)


class _FusedLML(torch.autograd.Function):
    """``-1/2 y^T A^{-1} y - sum log diag L`` with the fused adjoint.

    Backward: ``Abar = 1/2 (alpha alpha^T - A^{-1}) * g``, ``ybar = -alpha * g``
    with ``A^{-1}`` from ``cholesky_inverse(L)`` (no second factorisation).
    Failed elements give NaN values and zero gradients.
    """

    @staticmethod
    def forward(ctx: Any, A: torch.Tensor, y: torch.Tensor, jitter: float, max_tries: int) -> Any:
        L, _eps, failed = jittered_cholesky_ex(A, jitter, max_tries)  # a ladder off the CPU
        alpha = torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1)
        value = -0.5 * (y * alpha).sum(-1) - L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        value = torch.where(failed, torch.full_like(value, math.nan), value)
        ctx.mark_non_differentiable(failed)
        ctx.save_for_backward(L, alpha, failed)
        return value, failed

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor, _gfailed: torch.Tensor) -> Any:
        L, alpha, failed = ctx.saved_tensors
        g = torch.where(failed, torch.zeros_like(g), g)
        gA = gy = None
        if ctx.needs_input_grad[0]:
            a_inv = torch.cholesky_inverse(L)
            gA = (0.5 * g)[:, None, None] * (alpha.unsqueeze(-1) * alpha.unsqueeze(-2) - a_inv)
        if ctx.needs_input_grad[1]:
            gy = -g[:, None] * alpha
        return gA, gy, None, None


def _core(
    K: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    mask: torch.Tensor | None,
    jitter: float,
    max_tries: int,
    fused: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised ``-1/2 y^T A^{-1} y - 1/2 log det A`` on a flat batch ``(b, n, n)``."""
    n = K.shape[-1]
    eye = torch.eye(n, dtype=K.dtype, device=K.device)
    A = K + noise[:, None, None] * eye
    if mask is not None:
        mf = mask.to(K.dtype)
        A = A * (mf.unsqueeze(-1) * mf.unsqueeze(-2)) + torch.diag_embed(1.0 - mf)
        y = y * mf
    if fused:
        value, failed = _FusedLML.apply(A, y, jitter, max_tries)
        return value, failed
    L, _eps, failed = robust_cholesky(A, jitter=jitter, max_tries=max_tries, validate=False)
    alpha = torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1)
    value = -0.5 * (y * alpha).sum(-1) - L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    value = torch.where(failed, torch.full_like(value, math.nan), value)
    return value, failed


def _valid_first(
    K: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Permute the valid points of every element to the front and crop to ``size``."""
    if bool((mask[:, :size].sum(-1) == mask.sum(-1)).all()):
        return K[:, :size, :size], y[:, :size], mask[:, :size]
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[:, :size]
    y_c = torch.gather(y, 1, order)
    m_c = torch.gather(mask, 1, order)
    rows = torch.gather(K, 1, order.unsqueeze(-1).expand(-1, -1, K.shape[-1]))
    K_c = torch.gather(rows, 2, order.unsqueeze(1).expand(-1, size, -1))
    return K_c, y_c, m_c


def _ragged(
    K: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    mask: torch.Tensor,
    counts: torch.Tensor,
    n_groups: int,
    jitter: float,
    max_tries: int,
    fused: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_core`` per size bucket (:func:`~amorgp.diff_linalg.size_buckets`), reassembled.

    One gather into bucket order, then contiguous splits: the backward allocates the
    full batch gradient once instead of once per bucket.  ``n_groups = B`` is the
    per-element loop.
    """
    groups = size_buckets(counts, n_groups)
    order = torch.cat([idx for idx, _ in groups])
    lens = [int(idx.numel()) for idx, _ in groups]
    Ks, ys, ns, ms = K[order], y[order], noise[order], mask[order]
    parts = zip(Ks.split(lens), ys.split(lens), ns.split(lens), ms.split(lens), groups)
    values, fails = [], []
    for K_p, y_p, n_p, m_p, (_, size) in parts:
        K_c, y_c, m_c = _valid_first(K_p, y_p, m_p, size)
        full = bool(m_c.all())
        v, f = _core(K_c, y_c, n_p, None if full else m_c, jitter, max_tries, fused)
        values.append(v)
        fails.append(f)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=K.device)
    return torch.cat(values)[inverse], torch.cat(fails)[inverse]


@overload
def gp_log_marginal_likelihood(
    K: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor | float,
    mask: torch.Tensor | None = None,
    per_point: bool = False,
    *,
    return_failed: Literal[False] = False,
    strategy: Strategy = "auto",
    n_buckets: int = 4,
    fused: bool = True,
    jitter: float = 1e-8,
    max_tries: int = 5,
    validate: bool = True,
) -> torch.Tensor: ...


@overload
def gp_log_marginal_likelihood(
    K: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor | float,
    mask: torch.Tensor | None = None,
    per_point: bool = False,
    *,
    return_failed: Literal[True],
    strategy: Strategy = "auto",
    n_buckets: int = 4,
    fused: bool = True,
    jitter: float = 1e-8,
    max_tries: int = 5,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]: ...


def gp_log_marginal_likelihood(
    K: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor | float,
    mask: torch.Tensor | None = None,
    per_point: bool = False,
    *,
    return_failed: bool = False,
    strategy: Strategy = "auto",
    n_buckets: int = 4,
    fused: bool = True,
    jitter: float = 1e-8,
    max_tries: int = 5,
    validate: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Exact GP log marginal likelihood, batched and padding-aware.

    ``log p(y) = -1/2 y^T (K + sigma^2 I)^{-1} y - 1/2 log det(K + sigma^2 I) - n/2 log 2 pi``
    from one Cholesky per matrix (jitter escalates only on elements that fail,
    see :func:`~amorgp.diff_linalg.robust_cholesky`).  With ``per_point=True``
    the value is divided by the number of valid points ``n`` (the paper's
    training loss is the negative of this, averaged over the batch).

    Args:
        K: kernel matrices without noise, shape ``(..., N, N)``.
        y: targets, shape ``(..., N)``.
        noise: noise variances ``sigma^2 > 0``, shape ``(...)`` (or a float).
        mask: ``True`` for valid points, shape ``(..., N)``; padded rows and
            columns are replaced by an identity block, padded targets by 0
            (padded entries may hold any finite values).
        per_point: divide by the number of valid points.
        return_failed: also return the per-element failure mask.
        strategy: ``"pad"``, ``"bucket"``, ``"loop"`` or ``"auto"``
            (:data:`DEFAULT_STRATEGY`) for ragged batches; ignored without mask.
        n_buckets: number of size buckets of the ``"bucket"`` strategy.
        fused: use the fused adjoint ``Abar = 1/2 (alpha alpha^T - A^{-1})``
            (first derivatives only); ``False`` differentiates through the
            Cholesky factor and supports higher derivatives.
        jitter: relative jitter of the first Cholesky retry.
        max_tries: number of jittered retries.
        validate: check the values (finite ``K``, ``y`` and noise, positive noise, a
            valid point per element), which reads them back to the host; ``False``
            skips these checks (shapes are still checked) on hot paths whose inputs are
            valid by construction: with it, on a GPU, nothing synchronises with the
            host (``"auto"`` pads there, and the jitter retries of matrices up to
            :data:`~amorgp.diff_linalg.cholesky.LADDER_MAX_N` rows run as one ladder).

    Returns:
        Log marginal likelihoods, shape ``(...)``; NaN where the Cholesky failed
        even after jitter (such elements get zero gradient).  With
        ``return_failed=True`` a tuple ``(value, failed)`` with ``failed`` a bool
        tensor of the same shape.

    Raises:
        ValueError: on shape mismatches, NaN/Inf inputs, non-positive noise,
            an element without valid points, or an unknown strategy.
    """
    K = check_square(K, "K")
    y = check_tensor(y, "y", min_dim=1)
    batch, n = K.shape[:-2], K.shape[-1]
    if tuple(y.shape) != (*batch, n):
        raise ValueError(
            f"y must have shape {(*batch, n)} to match K {tuple(K.shape)}, got {tuple(y.shape)}"
        )
    noise_t = torch.as_tensor(noise, dtype=K.dtype, device=K.device)
    try:
        noise_t = noise_t.expand(batch)
    except RuntimeError:
        raise ValueError(
            f"noise must broadcast to the batch shape {tuple(batch)}, got {tuple(noise_t.shape)}"
        ) from None
    if validate:
        check_finite(K, "K")
        check_finite(y, "y")
        check_finite(noise_t, "noise")
        if not bool((noise_t > 0).all()):
            raise ValueError("noise variances must be positive")
    if strategy not in ("auto", "pad", "bucket", "loop"):
        raise ValueError(
            f"unknown strategy {strategy!r}; expected 'auto', 'pad', 'bucket' or 'loop'"
        )
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError("mask must be a bool tensor")
        if tuple(mask.shape) != (*batch, n):
            raise ValueError(f"mask must have shape {(*batch, n)}, got {tuple(mask.shape)}")

    Kf = K.reshape(-1, n, n)
    yf = y.reshape(-1, n)
    nf = noise_t.reshape(-1)
    mf = None if mask is None else mask.reshape(-1, n)
    counts = (
        torch.full((Kf.shape[0],), n, dtype=torch.long, device=K.device)
        if mf is None
        else mf.sum(-1)
    )
    if validate and bool((counts == 0).any()):
        raise ValueError("every batch element needs at least one valid point (mask is all False)")

    if strategy == "auto":  # size buckets read sizes on the host: measured on the CPU only
        chosen = DEFAULT_STRATEGY if K.device.type == "cpu" else "pad"
    else:
        chosen = strategy
    if mf is None or chosen == "pad" or Kf.shape[0] == 1:
        value, failed = _core(Kf, yf, nf, mf, jitter, max_tries, fused)
    else:
        n_groups = Kf.shape[0] if chosen == "loop" else n_buckets
        value, failed = _ragged(Kf, yf, nf, mf, counts, n_groups, jitter, max_tries, fused)

    value = value - 0.5 * counts.to(value.dtype) * _LOG_2PI
    if per_point:
        value = value / counts.to(value.dtype)
    value = value.reshape(batch)
    failed = failed.reshape(batch)
    if return_failed:
        return value, failed
    return value
