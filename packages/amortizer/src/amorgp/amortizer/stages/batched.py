"""Exact GP algebra of ``K`` kernels on one dataset, batched over the kernels.

:meth:`Amortizer.infer_many <amorgp.amortizer.frontends.inference.Amortizer.infer_many>` evaluates
the kernel matrices of all its kernels in one call of the dimension-wise evaluator
(:func:`kernel_matrices`), hands them to the calibration, and factors every
``K_k + sigma_k^2 I`` in one batched Cholesky (:func:`factor`).  Each kernel's
:class:`~amorgp.lazy_kernels.Posterior` (``KernelResult.posterior``) is built on its
element of that factor (:meth:`Posterior.from_cholesky
<amorgp.lazy_kernels.Posterior.from_cholesky>`), so the log marginal likelihood and every
prediction use that one factorisation per matrix.

:func:`score` is the same path as a function: the exact log marginal likelihood of ``K``
candidate parameter sets (one structure each, repeated as needed) on normalised data,
e.g. to pick the best of several starting points after calibration.

This module owns the exact dense factorisation of the amortizer: :func:`factor` (with
the jitter ladder of :class:`~amorgp.lazy_kernels.Posterior`, for the factors results
keep) and :func:`exact_solve` (no jitter: a point whose covariance needs jitter is no
valid start or step; for the scoring, the calibration's checks and the refinement's
objectives).

Nothing here reads a value back to the host (the jittered Cholesky does so only when a
factorisation fails on the CPU, see :func:`amorgp.diff_linalg.jittered_cholesky_ex`), so
the path runs asynchronously on a GPU.  The kernel matrices of ``K`` kernels take
``8 K n^2`` bytes in float64 (and as much for the factors): callers chunk the kernels
(:func:`chunks`) to bound the memory.  The factors of a chunk share one tensor, which
stays in memory while any of its kernels' results does (at most :data:`CHUNK_BYTES`).

On the CPU the factorisation loops over the matrices of a chunk (LAPACK factors a batch
one matrix at a time anyway, after copying the whole batch: matrix by matrix the copy
stays in cache); elsewhere it is one batched call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from amorgp.amortizer.networks.structures import KernelBatch, encoded, pick
from amorgp.diff_linalg.cholesky import jittered_cholesky_ex
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary
from amorgp.lazy_kernels import CHUNK_BYTES

__all__ = [
    "CHUNK_BYTES",
    "Factors",
    "KernelBatch",
    "chunks",
    "encoded",
    "exact_solve",
    "factor",
    "kernel_matrices",
    "pick",
    "score",
]

Factor = tuple[Tensor, Tensor, Tensor | float, Tensor | float]
"""One kernel's dense factorisation ``(L, alpha, jitter, lml)``: the lower Cholesky factor
of ``K + sigma^2 I + jitter I``, ``alpha = (K + sigma^2 I)^{-1} y``, the absolute jitter
it needed and the 0-d log marginal likelihood (one element of :func:`factor`)."""

"""Most bytes of kernel matrices (and as much again for their factors) held at once."""

JITTER = 1e-8
"""Relative jitter of the first retry of a failed factorisation (as
:class:`~amorgp.lazy_kernels.Posterior`)."""

MAX_TRIES = 5
"""Jittered retries of a failed factorisation (as :class:`~amorgp.lazy_kernels.Posterior`)."""

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class Factors:
    """Cholesky factors of ``A_k = K_k + sigma_k^2 I`` for ``K`` kernels.

    Attributes:
        L: ``(K, n, n)`` lower factors (the identity where ``failed``).
        alpha: ``(K, n)``: ``A_k^{-1} y``.
        jitter: ``(K,)`` absolute jitter added to the diagonal (0 where none was needed).
        failed: ``(K,)`` bool: not positive definite even with jitter.
        lml: ``(K,)`` exact log marginal likelihoods (``-inf`` where ``failed``).
    """

    L: Tensor
    alpha: Tensor
    jitter: Tensor
    failed: Tensor
    lml: Tensor


def chunks(n_kernels: int, n: int, budget: float = CHUNK_BYTES) -> list[slice]:
    """Slices of the kernel axis whose ``(k, n, n)`` float64 matrices fit ``budget`` bytes
    (at least one kernel per slice)."""
    per = max(1, int(budget // (8 * n * n)))
    return [slice(s, min(n_kernels, s + per)) for s in range(0, n_kernels, per)]


def kernel_matrices(
    X: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
) -> Tensor:
    """``(K, n, n)`` kernel matrices ``K_k(X, X)`` of ``K`` structures in one evaluator call.

    Args:
        X: ``(n, d)`` inputs (dtype of the result).
        structures: ``K`` structures on the ``d`` columns.
        vocabulary: the vocabulary of the parameter layout.
        params: ``(K, >= d, >= L, >= P)`` positive parameters (each symbol's slot order).
    """
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    n, d = X.shape
    symbols, mask = encoded(structures, vocabulary, X.device)
    K, _, L = symbols.shape
    par = params.detach()[:, :d, :L].to(X.dtype)
    Xb = X.detach().expand(K, n, d)
    return kernel_matrix_dimwise(Xb, Xb, symbols, mask, par, vocabulary, validate=False)


def factor(
    Km: Tensor,
    y: Tensor,
    noise: Tensor,
    scale: Tensor | None = None,
    *,
    jitter: float = JITTER,
    max_tries: int = MAX_TRIES,
) -> Factors:
    """One batched Cholesky of ``A_k = s_k K_k + sigma_k^2 I`` and the exact likelihoods.

    Args:
        Km: ``(K, n, n)`` kernel matrices (consumed: overwritten by the factors).
        y: ``(n,)`` targets.
        noise: ``(K,)`` noise variances ``sigma_k^2``.
        scale: ``(K,)`` factors ``s_k`` of the matrices (default 1).
        jitter, max_tries: as :func:`amorgp.diff_linalg.robust_cholesky` (and
            :class:`~amorgp.lazy_kernels.Posterior`): a factorisation that fails retries
            with ``jitter * 10^k * mean|diag A|`` added.

    Returns:
        :class:`Factors`; ``log p(y) = -1/2 y^T alpha - sum log diag L - n/2 log 2 pi``.
    """
    A = Km.detach()
    if scale is not None:
        A.mul_(scale.to(A.dtype)[:, None, None])
    A.diagonal(dim1=-2, dim2=-1).add_(noise.to(A.dtype)[:, None])
    if A.device.type == "cpu":
        # matrix by matrix (module docstring); each factor overwrites its matrix while
        # in cache: A becomes L
        eps = torch.zeros(A.shape[0], dtype=A.dtype)
        failed = torch.zeros(A.shape[0], dtype=torch.bool)
        for i in range(A.shape[0]):
            L_i, eps[i : i + 1], failed[i : i + 1] = jittered_cholesky_ex(
                A[i : i + 1], jitter, max_tries
            )
            A[i : i + 1] = L_i
        L = A
    else:
        L, eps, failed = jittered_cholesky_ex(A, jitter, max_tries)
        del A
    del Km
    alpha, lml = _solve(L, y)
    bad = failed | ~torch.isfinite(lml)
    lml = torch.where(bad, torch.full_like(lml, -math.inf), lml)
    return Factors(L, alpha, eps, bad, lml)


def exact_solve(A: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The exact factorisation of covariances ``A (..., n, n)`` (noise included) without
    jitter, and the log marginal likelihoods of targets ``y (..., n)`` (broadcast).

    Returns ``(L, alpha, lml, ok)``: the lower Cholesky factors, ``alpha = A^-1 y``, the
    log marginal likelihoods and whether each matrix is finite and positive definite;
    where it is not, ``L`` is the identity and ``lml`` is ``-inf``.  Differentiable where
    ``ok``.  On an accelerator no value is read back to the host; on the CPU the matrices
    are replaced only where one fails (no copy of the batch when all pass).
    """
    n = A.shape[-1]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    host = A.device.type == "cpu"  # there a check costs no transfer: no copy where all pass
    if host and not A.requires_grad:
        # no pass over the matrices' n^2 entries before the factorisation: a
        # non-finite entry of the lower triangle, the part factored, reaches the factor's
        # diagonal or fails the factorisation, and so the likelihood; rows where either
        # happened get the identity and -inf afterwards
        L, info = torch.linalg.cholesky_ex(A)
        alpha, lml = _solve(L, y)
        ok = (info == 0) & torch.isfinite(lml)
        if not bool(ok.all()):
            L = torch.where(ok[..., None, None], L, eye)
            yb = y.to(L.dtype).expand(*L.shape[:-1])
            alpha = torch.where(ok[..., None], alpha, yb)
        return L, alpha, torch.where(ok, lml, torch.full_like(lml, -math.inf)), ok
    finite = torch.isfinite(A).flatten(-2).all(-1)
    if not (host and bool(finite.all())):
        A = torch.where(finite[..., None, None], A, eye)
    L, info = torch.linalg.cholesky_ex(A)
    ok = finite & (info == 0)
    if not (host and bool(ok.all())):
        L = torch.where(ok[..., None, None], L, eye)
    alpha, lml = _solve(L, y)
    ok = ok & torch.isfinite(lml)
    return L, alpha, torch.where(ok, lml, torch.full_like(lml, -math.inf)), ok


def _solve(L: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """``alpha = A^-1 y`` and the log marginal likelihood of ``y (..., n)`` (broadcast)
    from the lower factors ``L (..., n, n)`` of ``A``."""
    n = L.shape[-1]
    yb = y.to(L.dtype).expand(*L.shape[:-1])[..., None].contiguous()
    # two triangular solves: torch's batched cholesky_solve is several times slower on CPU
    alpha = torch.linalg.solve_triangular(
        L.mT, torch.linalg.solve_triangular(L, yb, upper=False), upper=True
    )[..., 0]
    logdet = L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return alpha, -0.5 * (yb[..., 0] * alpha).sum(-1) - logdet - 0.5 * n * _LOG_2PI


def score(
    X: Tensor,
    y: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
    noise: Tensor,
    *,
    budget: float = CHUNK_BYTES,
) -> Tensor:
    """Exact log marginal likelihoods of ``K`` candidate parameter sets, batched.

    Candidate ``k`` is the GP of ``structures[k]`` with ``params[k]`` and noise
    ``noise[k]`` on the normalised data ``(X, y)``; to score several starting points of
    one kernel, repeat its structure.  The kernel matrices are evaluated in one call and
    factored by one batched Cholesky per chunk of ``budget`` bytes (:func:`chunks`); no
    value is read back to the host.

    Args:
        X: ``(n, d)`` normalised inputs.
        y: ``(n,)`` standardised targets.
        structures: ``K`` structures.
        vocabulary: the vocabulary of the parameter layout.
        params: ``(K, d, L, P)`` positive parameters.
        noise: ``(K,)`` positive noise variances.
        budget: bytes of kernel matrices per chunk.

    Returns:
        ``(K,)`` log marginal likelihoods in the dtype of ``X`` (``-inf`` where ``K_k +
        sigma_k^2 I`` is not positive definite even with jitter).
    """
    out = []
    for sl in chunks(len(structures), X.shape[0], budget):
        Km = kernel_matrices(X, structures[sl], vocabulary, params[sl])
        out.append(factor(Km, y, noise[sl].to(X.dtype)).lml)
    return torch.cat(out)
