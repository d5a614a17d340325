"""Reusable test helpers: matrices with controlled conditioning, gradient checks and
dense GP oracles.

Every generator takes an explicit ``torch.Generator`` so that tests are
deterministic and independent of the global random state.  The dense GP oracles
(:func:`dense_gp_log_marginal_likelihood`, :func:`dense_gp_predictive`) are the one
reference every package's tests compare against: float64, a general LU solve and
``slogdet`` (no Cholesky, so they share no code path with the operators under test).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, overload

import numpy as np
import torch

__all__ = [
    "assert_gradients",
    "dense_gp_log_marginal_likelihood",
    "dense_gp_predictive",
    "random_full_rank",
    "random_lower_triangular",
    "random_orthogonal",
    "random_spd",
    "random_symmetric",
    "torch_settings",
]


def random_orthogonal(
    n: int,
    *,
    batch_shape: Sequence[int] = (),
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator,
) -> torch.Tensor:
    """Haar-distributed orthogonal matrices, shape ``(*batch_shape, n, n)``."""
    g = torch.randn(*batch_shape, n, n, dtype=torch.float64, generator=generator)
    q, r = torch.linalg.qr(g)
    q = q * torch.sign(r.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)
    return q.to(dtype)


def random_spd(
    n: int,
    *,
    cond: float = 10.0,
    batch_shape: Sequence[int] = (),
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator,
) -> torch.Tensor:
    """Symmetric positive definite ``Q diag(lambda) Q^T`` with condition number ``cond``.

    Eigenvalues are log-spaced between ``1`` and ``cond`` (``cond >= 1``).
    """
    if cond < 1:
        raise ValueError(f"cond must be >= 1, got {cond}")
    lam = torch.logspace(0.0, float(torch.log10(torch.tensor(cond))), n, dtype=torch.float64)
    return _with_spectrum(lam, batch_shape, dtype, generator)


def random_symmetric(
    n: int,
    *,
    gap: float = 0.5,
    batch_shape: Sequence[int] = (),
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator,
) -> torch.Tensor:
    """Symmetric matrices with eigenvalues ``-1 + gap * k`` (separated by ``gap``)."""
    lam = -1.0 + gap * torch.arange(n, dtype=torch.float64)
    return _with_spectrum(lam, batch_shape, dtype, generator)


def _with_spectrum(
    lam: torch.Tensor,
    batch_shape: Sequence[int],
    dtype: torch.dtype,
    generator: torch.Generator,
) -> torch.Tensor:
    """``Q diag(lam) Q^T`` (symmetrised) with a random orthogonal ``Q``, built in float64."""
    q = random_orthogonal(
        lam.shape[0], batch_shape=batch_shape, dtype=torch.float64, generator=generator
    )
    a = (q * lam) @ q.mT
    return (0.5 * (a + a.mT)).to(dtype)


def random_lower_triangular(
    n: int,
    *,
    cond: float = 10.0,
    batch_shape: Sequence[int] = (),
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator,
) -> torch.Tensor:
    """Cholesky factor of :func:`random_spd` (condition number ``sqrt(cond)``), positive diagonal."""
    a = random_spd(n, cond=cond, batch_shape=batch_shape, generator=generator)
    return torch.linalg.cholesky(a).to(dtype)


def random_full_rank(
    m: int,
    n: int,
    *,
    cond: float = 10.0,
    batch_shape: Sequence[int] = (),
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator,
) -> torch.Tensor:
    """``(m, n)`` matrices ``U diag(s) V^T`` with singular values log-spaced in ``[1, cond]``."""
    k = min(m, n)
    u = random_orthogonal(m, batch_shape=batch_shape, generator=generator)[..., :k]
    v = random_orthogonal(n, batch_shape=batch_shape, generator=generator)[..., :k]
    s = torch.logspace(0.0, float(torch.log10(torch.tensor(cond))), k, dtype=torch.float64)
    return ((u * s) @ v.mT).to(dtype)


def assert_gradients(
    fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
    inputs: Sequence[torch.Tensor],
    *,
    second_order: bool = True,
    atol: float = 1e-6,
    rtol: float = 1e-4,
    eps: float = 1e-6,
    fast_mode: bool = False,
) -> None:
    """``torch.autograd.gradcheck`` (and ``gradgradcheck``) in float64.

    Args:
        fn: function of ``inputs``.
        inputs: float64 tensors; those with ``requires_grad`` are checked.
        second_order: also run ``gradgradcheck``.
        atol, rtol, eps: tolerances and finite-difference step.
        fast_mode: check random projections of the Jacobian (``gradcheck``'s fast mode).

    Raises:
        AssertionError: if a check fails.
    """
    for x in inputs:
        if x.is_floating_point() and x.requires_grad and x.dtype != torch.float64:
            raise ValueError("gradient checks need float64 inputs")
    kw = {"eps": eps, "atol": atol, "rtol": rtol, "fast_mode": fast_mode, "raise_exception": False}
    if not torch.autograd.gradcheck(fn, tuple(inputs), **kw):  # type: ignore[arg-type]
        raise AssertionError("gradcheck failed: analytical and numerical Jacobians differ")
    if second_order and not torch.autograd.gradgradcheck(fn, tuple(inputs), **kw):  # type: ignore[arg-type]
        raise AssertionError("gradgradcheck failed: second derivatives differ")


@contextmanager
def torch_settings(
    *,
    num_threads: int | None = None,
    allow_tf32: bool | None = None,
    deterministic: bool | None = None,
) -> Iterator[None]:
    """Set process-wide torch settings for the ``with`` block and restore them afterwards.

    Tests that compare numbers on CUDA turn TF32 off; tests of small float64 problems run
    single-threaded.  Both are global to the process, so a test must give them back.

    Args:
        num_threads: ``torch.set_num_threads`` inside the block (``None``: unchanged).
        allow_tf32: ``torch.backends.cuda.matmul.allow_tf32`` and
            ``torch.backends.cudnn.allow_tf32`` inside the block (``None``: unchanged).
        deterministic: ``torch.use_deterministic_algorithms`` inside the block, with
            ``warn_only=True`` (an operation without a deterministic form warns instead of
            raising; ``None``: unchanged).  On CUDA, ``index_add`` (the kernels' sum over
            addends) adds in a fixed order only then.
    """
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    threads = torch.get_num_threads()
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    det = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if allow_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            torch.backends.cudnn.allow_tf32 = allow_tf32
        if deterministic is not None:
            torch.use_deterministic_algorithms(deterministic, warn_only=True)
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        torch.use_deterministic_algorithms(det[0], warn_only=det[1])


def _as_float64(x: Any) -> torch.Tensor:
    """``x`` (tensor, array or number) as a float64 tensor; tensors keep their autograd graph."""
    if isinstance(x, torch.Tensor):
        return x.to(torch.float64)
    return torch.from_numpy(np.array(x, dtype=np.float64))


def _noisy(K: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``K + noise I`` with ``noise`` broadcast over the leading (batch) dimensions of ``K``."""
    if K.ndim < 2 or K.shape[-1] != K.shape[-2]:
        raise ValueError(f"K must be square, shape (..., n, n); got {tuple(K.shape)}")
    eye = torch.eye(K.shape[-1], dtype=torch.float64, device=K.device)
    return K + noise[..., None, None] * eye


@overload
def dense_gp_log_marginal_likelihood(
    K: torch.Tensor, y: torch.Tensor, noise: torch.Tensor | float
) -> torch.Tensor: ...
@overload
def dense_gp_log_marginal_likelihood(K: np.ndarray, y: Any, noise: Any) -> Any: ...
def dense_gp_log_marginal_likelihood(K: Any, y: Any, noise: Any) -> Any:
    """Dense float64 oracle of the GP log marginal likelihood ``log N(y | 0, K + noise I)``.

    ``-1/2 y^T A^{-1} y - 1/2 log det A - n/2 log(2 pi)`` with ``A = K + noise I``, by
    ``torch.linalg.solve`` and ``torch.linalg.slogdet``.

    Args:
        K: kernel matrices, shape ``(..., n, n)``; a torch tensor (the result is then
            differentiable with respect to every tensor argument) or a numpy array.
        y: targets, shape ``(..., n)`` (broadcast against the batch shape of ``K``).
        noise: noise variances, a number or shape ``(...)``.

    Returns:
        Log marginal likelihoods, shape ``(...)``; ``NaN`` where ``A`` is not positive
        definite (``slogdet`` sign not positive).  A tensor if ``K`` is a tensor, else a
        numpy array (a Python ``float`` for a single matrix).

    Raises:
        ValueError: if ``K`` is not square or ``y`` does not match its size.
    """
    Kt, yt, nt = _as_float64(K), _as_float64(y), _as_float64(noise)
    A = _noisy(Kt, nt)
    n = A.shape[-1]
    if yt.shape[-1:] != (n,):
        raise ValueError(f"y must have shape (..., {n}) to match K; got {tuple(yt.shape)}")
    batch = torch.broadcast_shapes(A.shape[:-2], yt.shape[:-1])
    A, yt = A.expand(*batch, n, n), yt.expand(*batch, n)
    quad = (yt * torch.linalg.solve(A, yt.unsqueeze(-1)).squeeze(-1)).sum(-1)
    sign, logdet = torch.linalg.slogdet(A)
    logdet = torch.where(sign > 0, logdet, torch.full_like(logdet, math.nan))
    out = -0.5 * quad - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi)
    if isinstance(K, torch.Tensor):
        return out
    return float(out) if out.ndim == 0 else out.numpy()


@overload
def dense_gp_predictive(
    K: torch.Tensor,
    K_cross: torch.Tensor,
    k_diag: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor | float,
    *,
    include_noise: bool = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def dense_gp_predictive(
    K: np.ndarray, K_cross: Any, k_diag: Any, y: Any, noise: Any, *, include_noise: bool = ...
) -> tuple[np.ndarray, np.ndarray]: ...
def dense_gp_predictive(
    K: Any, K_cross: Any, k_diag: Any, y: Any, noise: Any, *, include_noise: bool = True
) -> tuple[Any, Any]:
    """Dense float64 oracle of the exact GP posterior predictive at ``m`` new points.

    With ``A = K + noise I``: mean ``K_cross^T A^{-1} y`` and variance
    ``k_diag - diag(K_cross^T A^{-1} K_cross)`` (``+ noise`` for the predictive of ``y``),
    by ``torch.linalg.solve``.  The variance is not clamped.

    Args:
        K: training kernel matrix, shape ``(..., n, n)`` (tensor or numpy array).
        K_cross: cross covariances ``k(X, X_new)``, shape ``(..., n, m)``.
        k_diag: prior variances ``k(x_new, x_new)``, shape ``(..., m)``.
        y: training targets, shape ``(..., n)``.
        noise: noise variances, a number or shape ``(...)``.
        include_noise: add ``noise`` to the variance (predictive of ``y``, not of ``f``).

    Returns:
        ``(mean, var)``, each of shape ``(..., m)``; tensors if ``K`` is a tensor, else numpy.

    Raises:
        ValueError: if ``K`` is not square.
    """
    Kt, Ks, kss = _as_float64(K), _as_float64(K_cross), _as_float64(k_diag)
    yt, nt = _as_float64(y), _as_float64(noise)
    A = _noisy(Kt, nt)
    rhs = torch.cat([yt.unsqueeze(-1).expand(*Ks.shape[:-1], 1), Ks], dim=-1)
    sol = torch.linalg.solve(A, rhs)
    mean = (Ks * sol[..., :1]).sum(-2)
    var = kss - (Ks * sol[..., 1:]).sum(-2)
    if include_noise:
        var = var + nt[..., None]
    if isinstance(K, torch.Tensor):
        return mean, var
    return mean.numpy(), var.numpy()
