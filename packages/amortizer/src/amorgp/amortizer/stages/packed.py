"""Symmetric matrices packed: the pairs of ``n`` points, the upper triangle with the
diagonal (``P = n (n + 1) / 2`` values), for the refinement's batched objective
(:class:`~amorgp.amortizer.stages.fisher_objective.BatchLogMarginalLikelihood`), whose
element-wise work runs on them; :func:`unpack` forms the full matrix where it is needed.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["CACHED_PAIRS", "PackedPairs", "pair_indices", "unpack"]

CACHED_PAIRS = 500
"""Sizes up to which the packed pairs' indices are kept for every objective of that size
(a fleet's buckets and a halving's rounds build many; ``5 n^2 / 2`` integers each);
larger sizes build them per objective and keep nothing after it."""


class PackedPairs(NamedTuple):
    """The packed pairs of ``n`` points (never written to)."""

    rows: Tensor
    """``(P,)`` the pairs' rows ``i``."""
    cols: Tensor
    """``(P,)`` their columns ``j >= i``."""
    upper: Tensor
    """``(P,)`` their flat positions ``i n + j`` in an ``n x n`` matrix."""
    pair_of: Tensor
    """``(n^2,)`` for each flat position its pair (mirror images share one)."""
    weights: Tensor
    """``(P,)`` float64: 2 off the diagonal, 1 on it, so that a weighted sum over the
    pairs is the sum over a symmetric matrix."""


def pair_indices(n: int) -> PackedPairs:
    """The packed pairs of ``n`` points, shared by every objective of that size up to
    :data:`CACHED_PAIRS`."""
    return _cached_pairs(n) if n <= CACHED_PAIRS else _build_pairs(n)


@functools.lru_cache(maxsize=8)
def _cached_pairs(n: int) -> PackedPairs:
    return _build_pairs(n)


def _build_pairs(n: int) -> PackedPairs:
    iu, ju = torch.triu_indices(n, n)
    upper = iu * n + ju
    pair_of = torch.empty(n * n, dtype=torch.long)
    pair_of[upper] = torch.arange(iu.numel())
    pair_of[ju * n + iu] = torch.arange(iu.numel())
    weights = torch.where(iu == ju, 1.0, 2.0).to(torch.float64)
    return PackedPairs(iu, ju, upper, pair_of, weights)


def unpack(out: Tensor, packed: Tensor, pair_of: Tensor) -> Tensor:
    """Write the symmetric matrices of the pairs' values ``packed (..., P)`` into ``out
    (..., n, n)`` (one gather; ``pair_of`` of :class:`PackedPairs`); returns ``out``."""
    lead = out.shape[:-2]
    flat = out.view(*lead, pair_of.numel())
    torch.gather(packed.expand(*lead, -1), -1, pair_of.expand(*lead, -1), out=flat)
    return out
