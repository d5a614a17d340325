"""Input checks shared by the public functions (clear ``ValueError`` messages)."""

from __future__ import annotations

import torch


def check_tensor(x: object, name: str, *, min_dim: int = 0) -> torch.Tensor:
    """Return ``x`` if it is a floating-point tensor with at least ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}"
        )
    return x


def check_square(x: object, name: str) -> torch.Tensor:
    """Return ``x`` if it is a floating-point tensor of shape ``(..., n, n)`` with ``n >= 1``."""
    t = check_tensor(x, name, min_dim=2)
    if t.shape[-1] != t.shape[-2]:
        raise ValueError(
            f"{name} must be square in its last two dimensions, got shape {tuple(t.shape)}"
        )
    if t.shape[-1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    return t


def check_finite(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or infinite values."""
    if not bool(torch.isfinite(x).all()):
        n_nan = int(torch.isnan(x).sum())
        n_inf = int(torch.isinf(x).sum())
        raise ValueError(f"{name} contains {n_nan} NaN and {n_inf} infinite values")
