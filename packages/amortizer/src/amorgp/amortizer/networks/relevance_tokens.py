"""Relevance tokens: how much each input dimension matters, as the structured network reads it.

A network built with ``NetworkConfig(relevance_tokens=True)`` computes, for every input
dimension of every dataset it encodes, two nearest-neighbour statistics
(:func:`neighbour_relevance`) and adds their projection to the kernel tokens of that
dimension (the projection starts at zero, so a converted network starts from the old
network's tokens):

* ``log(e_without_d / e_all)``: how much the error of a ``K``-nearest-neighbour
  prediction of the targets grows when dimension ``d`` is left out of the distances (about
  0 for an irrelevant input, large for one the targets depend on, interactions included);
* ``log(e_only_d / var)``: the same prediction from dimension ``d`` alone against the
  targets' variance (an additive effect of that input).

Such a network also predicts lengthscales with an exponential tail
(:func:`long_positive`): identical to the usual ``floor + softplus(raw)`` up to
``raw = KNEE`` and ``exp``-like beyond it (continuous with its slope), so reaching the
lengthscales of irrelevant inputs (tens to thousands of input ranges) is a step in log
space rather than a linear climb.

Computed without gradients (distances in float32, errors in float64) on the inputs as the network reads them
(normalised to [0, 1]); padded points and dimensions are left out.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "KNEE",
    "K_NEIGHBOURS",
    "MAX_LENGTHSCALE",
    "N_FEATURES",
    "long_positive",
    "neighbour_relevance",
]

K_NEIGHBOURS = 5
"""Neighbours of the prediction."""

KNEE = 2.0
"""Raw value above which :func:`long_positive` grows exponentially."""

N_FEATURES = 2
"""Features per dimension."""

_BIG = 1e30

BLOCK_ELEMENTS = 2**21
"""Squared distances evaluated at once (``datasets x D N^2``, at least one dataset; 8 MiB
in float32): the datasets of a batch in blocks that stay near the cache."""

DEVICE_BLOCK_ELEMENTS = 2**25
""":data:`BLOCK_ELEMENTS` on an accelerator (128 MiB in float32), where a block costs its
kernel launches more than its memory traffic: a training batch of 128 datasets of 100
points in 8 inputs in one block instead of 5."""


MAX_LENGTHSCALE = 1000.0
"""Largest lengthscale of the tail, in input ranges (where Type-2 ML puts irrelevant
inputs; beyond it the kernel is constant to 1e-6 over the data)."""


def long_positive(raw: Tensor, floor: float) -> Tensor:
    """``floor + softplus(raw)`` up to :data:`KNEE`, then ``v_k exp(s (raw - KNEE) / v_k)``
    with ``v_k = softplus(KNEE)`` and ``s = sigmoid(KNEE)`` its slope (value and slope
    continuous at the knee), at most :data:`MAX_LENGTHSCALE` (``raw`` clipped)."""
    vk = math.log1p(math.exp(KNEE))
    slope = 1.0 / (1.0 + math.exp(-KNEE))
    top = KNEE + math.log(MAX_LENGTHSCALE / vk) * vk / slope
    soft = torch.nn.functional.softplus(raw)
    tail = vk * torch.exp(slope * (raw.clamp(max=top) - KNEE) / vk)
    return floor + torch.where(raw > KNEE, tail, soft)


@torch.no_grad()
def _knn_error(sq: Tensor, y: Tensor, pm: Tensor, k: int, scratch: bool = False) -> Tensor:
    """``(B, M)`` mean squared error of the ``k``-nearest-neighbour mean of ``y (B, N)``
    under ``M`` squared distances ``sq (B, M, N, N)`` (self and padded points excluded;
    ``scratch``: ``sq`` is not used again and is masked in place)."""
    B, M, N, _ = sq.shape
    eye = torch.eye(N, dtype=torch.bool, device=sq.device)
    excluded = (eye | ~pm[:, None, :])[:, None]
    sq = sq.masked_fill_(excluded, _BIG) if scratch else sq.masked_fill(excluded, _BIG)
    idx = sq.topk(k, dim=-1, largest=False).indices  # (B, M, N, k)
    pred = y[:, None, :].expand(B, M, N).gather(-1, idx.flatten(2)).view(B, M, N, k).mean(-1)
    w = pm.to(y.dtype)[:, None, :]
    resid = (y[:, None, :] - pred) * w
    return (resid * resid).sum(-1) / w.sum(-1).clamp_min(1)


def _errors(Xt: Tensor, yc: Tensor, pm: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The neighbour errors of a block of datasets ``Xt (b, D, N)``: with all inputs
    ``(b,)``, without each input ``(b, D)`` and with each input alone ``(b, D)``."""
    per_dim = (Xt[..., :, None] - Xt[..., None, :]).square_()  # (b, D, N, N)
    full = per_dim.sum(1)  # (b, N, N)
    e_all = _knn_error(full[:, None], yc, pm, k)[:, 0]
    e_without = _knn_error(full[:, None] - per_dim, yc, pm, k, scratch=True)
    e_only = _knn_error(per_dim, yc, pm, k, scratch=True)
    return e_all, e_without, e_only


@torch.no_grad()
def neighbour_relevance(
    X: Tensor,
    y: Tensor,
    point_mask: Tensor | None = None,
    dim_mask: Tensor | None = None,
    k: int = K_NEIGHBOURS,
) -> Tensor:
    """``(B, D, 2)`` float64 relevance features (module docstring) of ``X (B, N, D)``,
    ``y (B, N)``; 0 on padded dimensions and for datasets of at most ``k + 1`` points."""
    X = X.detach().to(torch.float32)  # distances in float32: only their order matters
    y = y.detach().to(torch.float64)
    B, N, D = X.shape
    dev = X.device
    pm = torch.ones(B, N, dtype=torch.bool, device=dev) if point_mask is None else point_mask
    dm = torch.ones(B, D, dtype=torch.bool, device=dev) if dim_mask is None else dim_mask
    out = torch.zeros(B, D, N_FEATURES, dtype=torch.float64, device=dev)
    n = pm.sum(1)
    if X.shape[1] <= k + 1:  # too few points for a neighbour mean without oneself
        return out
    w = pm.to(torch.float64)
    yc = (y - (w * y).sum(1, keepdim=True) / n.clamp_min(1)[:, None]) * w
    var = (yc * yc).sum(1) / n.clamp_min(1)  # (B,)
    Xm = torch.where(dm[:, None, :], X, torch.zeros((), dtype=X.dtype, device=dev))
    Xt = Xm.transpose(1, 2)  # (B, D, N)
    elements = BLOCK_ELEMENTS if dev.type == "cpu" else DEVICE_BLOCK_ELEMENTS
    size = max(1, elements // (D * N * N))  # datasets per block of distances
    errors = [
        _errors(Xt[i : i + size], yc[i : i + size], pm[i : i + size], k) for i in range(0, B, size)
    ]
    e_all, e_without, e_only = (torch.cat([e[j] for e in errors]) for j in range(3))
    tiny = 1e-12 * var.clamp_min(1e-300)[:, None]
    drop = torch.log((e_without + tiny) / (e_all[:, None] + tiny))
    alone = torch.log((e_only + tiny) / (var[:, None] + tiny))
    ok = dm & (n > k + 1)[:, None] & (var > 0)[:, None]
    out[..., 0] = torch.where(ok, drop, 0.0)
    out[..., 1] = torch.where(ok, alone, 0.0)
    return out
