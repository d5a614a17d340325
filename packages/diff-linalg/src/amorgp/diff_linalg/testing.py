"""Reusable test helpers: matrices with controlled conditioning and gradient checks.

Every generator takes an explicit ``torch.Generator`` so that tests are
deterministic and independent of the global random state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = [
    "assert_gradients",
    "random_full_rank",
    "random_lower_triangular",
    "random_orthogonal",
    "random_spd",
    "random_symmetric",
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
