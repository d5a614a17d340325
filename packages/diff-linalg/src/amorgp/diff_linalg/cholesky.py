"""Robust batched Cholesky factorisation with per-element escalating jitter.

A batch of kernel matrices usually holds a few that are numerically singular
(very long lengthscales, duplicated inputs).  :func:`robust_cholesky` factors the
whole batch with one ``torch.linalg.cholesky_ex`` call, then retries *only* the
elements that failed, with a diagonal jitter that grows tenfold per retry.
Elements that still fail are reported in ``failed`` and get an identity factor
(with zero gradient), so one bad matrix never kills the batch.

On an accelerator, for matrices of at most :data:`LADDER_MAX_N` rows, the retries are
not conditional: the whole jitter ladder is factored in one batched call and each
element keeps its first success (``ladder=True``).  That costs ``max_tries + 1``
factorisations per matrix but never reads a value back to the host, so a training step
of many small factorisations is not stalled by a synchronisation; the results are those
of the lazy retries.  Larger matrices retry lazily, where the work dominates.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from amorgp.diff_linalg._adjoints import potrf_backward
from amorgp.diff_linalg._validation import check_finite, check_square

__all__ = ["LADDER_MAX_N", "CholeskyResult", "jittered_cholesky_ex", "robust_cholesky"]

#: Largest matrix size factored as one jitter ladder by default (off the CPU only).
LADDER_MAX_N = 512


class CholeskyResult(NamedTuple):
    """Result of :func:`robust_cholesky`.

    Attributes:
        L: lower Cholesky factors, shape ``(..., n, n)``; ``L L^T = A + jitter I``.
            Elements that failed hold the identity matrix.
        jitter: absolute jitter added to the diagonal of each matrix, shape ``(...,)``
            (0 where the first factorisation succeeded; the last value tried where
            the element failed).
        failed: ``True`` where no factorisation succeeded, shape ``(...,)``.
    """

    L: torch.Tensor
    jitter: torch.Tensor
    failed: torch.Tensor


@torch.no_grad()
def jittered_cholesky_ex(
    A: torch.Tensor, jitter: float, max_tries: int, *, ladder: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Non-differentiable core of :func:`robust_cholesky` on a flat batch ``(b, n, n)``.

    Try ``k = 0`` factors ``A``; try ``k = 1..max_tries`` factors
    ``A + eps_k I`` with ``eps_k = jitter * 10^(k-1) * mean(|diag A|)`` for the
    elements that have failed so far.

    Args:
        ladder: factor every try at once and keep each element's first success (no
            host synchronisation; ``max_tries + 1`` times the work); ``None``: off the
            CPU for matrices of at most :data:`LADDER_MAX_N` rows.

    Returns:
        ``(L, eps, failed)`` with shapes ``(b, n, n)``, ``(b,)``, ``(b,)``.
    """
    if ladder is None:
        ladder = A.device.type != "cpu" and A.shape[-1] <= LADDER_MAX_N
    if ladder:
        return _ladder_cholesky_ex(A, jitter, max_tries)
    L, info = torch.linalg.cholesky_ex(A)
    failed = info != 0
    eps = torch.zeros(A.shape[0], dtype=A.dtype, device=A.device)
    if not bool(failed.any()):
        return L, eps, failed
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    scale = _jitter_scale(A)
    for k in range(max_tries):
        idx = failed.nonzero().squeeze(-1)
        if idx.numel() == 0:
            break
        eps_k = jitter * (10.0**k) * scale[idx]
        L_k, info_k = torch.linalg.cholesky_ex(A[idx] + eps_k[:, None, None] * eye)
        L[idx] = L_k
        eps[idx] = eps_k
        failed[idx] = info_k != 0
    L[failed] = eye
    return L, eps, failed


def _jitter_scale(A: torch.Tensor) -> torch.Tensor:
    scale = A.diagonal(dim1=-2, dim2=-1).abs().mean(-1)
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _ladder_cholesky_ex(
    A: torch.Tensor, jitter: float, max_tries: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every try of :func:`jittered_cholesky_ex` in one call; the first success wins."""
    b, n = A.shape[0], A.shape[-1]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    levels = torch.cat(
        [
            torch.zeros(1, dtype=A.dtype, device=A.device),
            jitter * 10.0 ** torch.arange(max_tries, dtype=A.dtype, device=A.device),
        ]
    )
    eps_all = levels[:, None] * _jitter_scale(A)  # (T, b)
    L_all, info = torch.linalg.cholesky_ex(A + eps_all[..., None, None] * eye)
    ok = info == 0  # (T, b)
    failed = ~ok.any(0)
    first = torch.where(failed, max_tries, ok.to(A.dtype).argmax(0))  # the first success
    L = L_all.gather(0, first.view(1, b, 1, 1).expand(1, b, n, n))[0]
    eps = eps_all.gather(0, first.view(1, b))[0]
    L = torch.where(failed[:, None, None], eye, L)
    return L, eps, failed


class _RobustPotrf(torch.autograd.Function):
    """Cholesky with per-element jitter; backward by Murray's formula (jitter treated as constant)."""

    @staticmethod
    def forward(
        ctx: Any, A: torch.Tensor, jitter: float, max_tries: int, ladder: bool | None
    ) -> Any:
        L, eps, failed = jittered_cholesky_ex(A, jitter, max_tries, ladder=ladder)
        ctx.mark_non_differentiable(eps, failed)
        ctx.save_for_backward(L, failed)
        return L, eps, failed

    @staticmethod
    def backward(ctx: Any, gL: torch.Tensor, _geps: torch.Tensor, _gfailed: torch.Tensor) -> Any:
        L, failed = ctx.saved_tensors
        gA = potrf_backward(L, gL)
        gA = torch.where(failed[:, None, None], torch.zeros_like(gA), gA)
        return gA, None, None, None


def robust_cholesky(
    A: torch.Tensor,
    *,
    jitter: float = 1e-8,
    max_tries: int = 5,
    upcast: bool = False,
    ladder: bool | None = None,
    validate: bool = True,
) -> CholeskyResult:
    """Batched Cholesky ``A = L L^T`` with jitter only on the elements that fail.

    The first attempt factors every matrix as given.  For the elements that
    fail, retry ``k = 1..max_tries`` factors ``A + eps_k I`` with the relative
    jitter ``eps_k = jitter * 10^(k-1) * mean_i |A_ii|``.  Elements that fail
    every retry are flagged in ``failed`` and get ``L = I`` with zero gradient,
    so that a loss masked with ``~failed`` stays finite.

    Only the lower triangle of ``A`` is read.  The backward is Murray's formula
    ``Abar = sym(L^{-T} Phi(L^T Lbar) L^{-1})`` (the jitter is a constant);
    it is written in differentiable operations, so second derivatives work.

    Args:
        A: symmetric matrices, shape ``(..., n, n)``, float32 or float64.
        jitter: relative jitter of the first retry (``> 0``).
        max_tries: number of jittered retries (``>= 0``).
        upcast: factor in float64 and cast ``L`` back to ``A.dtype``.
        ladder: factor the whole jitter ladder at once (no host synchronisation, see
            :func:`jittered_cholesky_ex`); ``None``: off the CPU, for small matrices.
        validate: check that ``A`` is finite (a host synchronisation); ``False`` on hot
            paths whose inputs are finite by construction.

    Returns:
        :class:`CholeskyResult` ``(L (..., n, n), jitter (...,), failed (...,) bool)``.

    Raises:
        ValueError: if ``A`` is not a floating square tensor, holds NaN/Inf,
            or ``jitter``/``max_tries`` are invalid.
    """
    A = check_square(A, "A")
    if validate:
        check_finite(A, "A")
    if not jitter > 0:
        raise ValueError(f"jitter must be positive, got {jitter}")
    if max_tries < 0:
        raise ValueError(f"max_tries must be >= 0, got {max_tries}")
    batch, n = A.shape[:-2], A.shape[-1]
    work = A.to(torch.float64) if upcast else A
    L, eps, failed = _RobustPotrf.apply(
        work.reshape(-1, n, n), float(jitter), int(max_tries), ladder
    )
    L = L.reshape(*batch, n, n).to(A.dtype)
    return CholeskyResult(L, eps.reshape(batch).to(A.dtype), failed.reshape(batch))
