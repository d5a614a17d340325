"""Masked set-Transformer building blocks shared by the structured and AHGP networks.

Conventions: a *set* is a tensor ``(..., S, C)`` with a boolean ``mask (..., S)``
(True = present).  Blocks have no positional encoding and no dropout, so they
are permutation equivariant over ``S``; padded rows are written as zeros, and
keys of padded rows are excluded from attention, so padding never changes the
rows that are present.  ``mask=None`` means every row is present: the same result
without the masking operations (the fast path of one unpadded dataset, e.g. one
Bayesian-optimisation fit, where the network's cost is per-operation overhead).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "KernelEncoderBlock",
    "MaskedSelfAttention",
    "TransformerBlock",
    "TransformerStack",
    "dense_mask",
    "masked_mean",
    "zero_padded",
]


def dense_mask(mask: Tensor) -> Tensor | None:
    """``None`` when ``mask`` is a CPU tensor with every entry True, else ``mask``.

    The test reads the mask on the host, so it is done on the CPU only (on other devices
    the masked path runs, without a host synchronisation).
    """
    if mask.device.type == "cpu" and bool(mask.all()):
        return None
    return mask


def zero_padded(x: Tensor, mask: Tensor | None) -> Tensor:
    """Rows of ``x (..., S, C)`` where ``mask (..., S)`` is False set to exactly 0.

    Uses ``where`` (not a product), so NaN or Inf in padded rows cannot leak.
    ``mask=None``: every row is present, ``x`` is returned as it is.
    """
    if mask is None:
        return x
    return torch.where(mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_mean(x: Tensor, mask: Tensor | None, dim: int) -> Tensor:
    """Mean of ``x`` over axis ``dim`` counting only rows where ``mask`` is True.

    Args:
        x: values ``(..., S, ..., C)``.
        mask: bool with the shape of ``x`` without its last axis.
        dim: the axis of ``x`` to reduce (not the last one).

    Returns:
        The masked mean; an all-padded set gives 0 (never NaN).  ``mask=None``: the
        plain mean.
    """
    if mask is None:
        return x.mean(dim)
    m = mask.unsqueeze(-1).to(x.dtype)
    total = zero_padded(x, mask).sum(dim)
    count = m.sum(dim).clamp_min(1.0)
    return total / count


class MaskedSelfAttention(nn.Module):
    """Multi-head self-attention over the set axis with a key mask.

    ``softmax(Q K^T / sqrt(c)) V`` per head, where keys with ``mask == False`` get
    weight 0.  A set without any present key attends to all keys (its rows are
    padding and are zeroed by the caller), so no NaN is produced.
    """

    def __init__(self, width: int, n_heads: int) -> None:
        super().__init__()
        if width % n_heads:
            raise ValueError(f"width {width} not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """``x (..., S, C)``, ``mask (..., S)`` or ``None`` (all present) -> ``(..., S, C)``."""
        lead = x.shape[:-2]
        s, c = x.shape[-2], x.shape[-1]
        h = self.n_heads
        q, k, v = self.qkv(x).reshape(-1, s, 3, h, c // h).permute(2, 0, 3, 1, 4)
        if mask is None:
            attn = F.scaled_dot_product_attention(q, k, v)
        else:
            keys = mask.reshape(-1, s)
            keys = keys | ~keys.any(-1, keepdim=True)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keys[:, None, None, :])
        return self.out(attn.transpose(1, 2).reshape(*lead, s, c))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm Transformer encoder block without positional encoding or dropout.

    ``x <- x + Attn(LN(x))``, ``x <- x + FF(LN(x))``, padded rows zeroed.
    """

    def __init__(self, width: int, n_heads: int, ff_mult: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = MaskedSelfAttention(width, n_heads)
        self.norm2 = nn.LayerNorm(width)
        self.ff = nn.Sequential(
            nn.Linear(width, ff_mult * width), nn.GELU(), nn.Linear(ff_mult * width, width)
        )

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = x + self.attn(self.norm1(x), mask)
        x = x + self.ff(self.norm2(x))
        return zero_padded(x, mask)


class TransformerStack(nn.Module):
    """``n`` :class:`TransformerBlock` in sequence (``n = 0`` is the identity on present rows)."""

    def __init__(self, n: int, width: int, n_heads: int, ff_mult: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(TransformerBlock(width, n_heads, ff_mult) for _ in range(n))

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = zero_padded(x, mask)
        for block in self.blocks:
            x = block(x, mask)
        return x


class KernelEncoderBlock(nn.Module):
    """Kernel-Encoder-Block (Bitzer et al. 2023, §3.1).

    Self-attention over the symbols of one dimension, then an MLP that also
    receives the context vector of that dimension:
    ``t <- t + Attn(LN(t))``, ``t <- t + MLP([LN(t), c])`` with tokens
    ``t (..., L, K)``, context ``c (..., C)`` broadcast over the L symbols.
    """

    def __init__(self, width: int, context: int, n_heads: int, ff_mult: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = MaskedSelfAttention(width, n_heads)
        self.norm2 = nn.LayerNorm(width)
        self.ff = nn.Sequential(
            nn.Linear(width + context, ff_mult * width),
            nn.GELU(),
            nn.Linear(ff_mult * width, width),
        )

    def forward(self, t: Tensor, context: Tensor, mask: Tensor | None) -> Tensor:
        """``t (..., L, K)``, ``context (..., C)``, ``mask (..., L)`` -> ``(..., L, K)``."""
        t = t + self.attn(self.norm1(t), mask)
        ctx = context.unsqueeze(-2).expand(*t.shape[:-1], context.shape[-1])
        t = t + self.ff(torch.cat([self.norm2(t), ctx], dim=-1))
        return zero_padded(t, mask)
