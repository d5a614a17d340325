"""Circulant packing of a symmetric kernel matrix: each unordered point pair once.

For ``K(X, X)`` the evaluator (:mod:`amorgp.lazy_kernels.evaluation`) computes the pairs
``(i, (i + k) mod N)`` for the offsets ``k = 0..N // 2`` as strided views of the columns,
``(N // 2 + 1) N`` entries instead of ``N^2``, and unpacks them with one gather through
the index built here, so the matrix is exactly symmetric.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch
from torch import Tensor

__all__ = ["CIRCULANT_CACHE_BYTES", "circulant_packing"]

CIRCULANT_CACHE_BYTES = 16 * 2**20
"""Most memory the cached circulant indices hold together (least recently used evicted;
an index larger than this, above 2048 points, is rebuilt per call)."""

_INDEX_BLOCK = 1 << 20
"""Entries of the circulant index built at once (bounds its temporaries)."""

_index_cache: OrderedDict[tuple[int, torch.device], Tensor] = OrderedDict()
_index_cache_lock = threading.Lock()


def _circulant_index(N: int, device: torch.device) -> Tensor:
    """``full (N * N,)``: the packed position of each entry ``(i, j)`` of a symmetric
    ``(N, N)`` matrix (see :func:`circulant_packing`), int32 where it fits.

    Built by blocks of rows into one preallocated tensor, so the temporaries stay at
    :data:`_INDEX_BLOCK` entries whatever ``N``.  Built outside inference mode: a tensor
    created under ``torch.inference_mode`` cannot be saved for backward, and the cache
    outlives the call that filled it.
    """
    dtype = torch.int32 if N * N < 2**31 else torch.int64
    with torch.inference_mode(False):
        full = torch.empty((N, N), dtype=dtype, device=device)
        j = torch.arange(N, dtype=dtype, device=device)[None, :]
        rows = max(1, _INDEX_BLOCK // N)
        for s in range(0, N, rows):
            i = torch.arange(s, min(N, s + rows), dtype=dtype, device=device)[:, None]
            k = (j - i) % N
            fwd = k * N + i  # pair stored at offset k from row i
            bwd = ((N - k) % N) * N + j  # same pair stored at offset N - k from row j
            tie = k * N + torch.minimum(i, j)  # k == N - k (even N): both stored; pick one
            full[s : s + rows] = torch.where(2 * k < N, fwd, torch.where(2 * k > N, bwd, tie))
    return full.reshape(-1)


def _cached_circulant_index(N: int, device: torch.device) -> Tensor:
    """:func:`_circulant_index` through a least-recently-used cache bounded by
    :data:`CIRCULANT_CACHE_BYTES`."""
    key = (N, torch.device(device))
    with _index_cache_lock:
        hit = _index_cache.get(key)
        if hit is not None:
            _index_cache.move_to_end(key)
            return hit
    full = _circulant_index(N, device)
    size = full.numel() * full.element_size()
    if size > CIRCULANT_CACHE_BYTES:
        return full
    with _index_cache_lock:
        _index_cache[key] = full
        total = sum(t.numel() * t.element_size() for t in _index_cache.values())
        while total > CIRCULANT_CACHE_BYTES:
            _, old = _index_cache.popitem(last=False)
            total -= old.numel() * old.element_size()
    return full


def circulant_packing(N: int, device: torch.device) -> tuple[int, Tensor]:
    """Circulant packing of a symmetric ``(N, N)`` matrix: ``H = N // 2 + 1`` offsets.

    Entry ``(k, i)`` of the packed ``(H, N)`` array holds the pair ``(i, (i + k) mod N)``;
    every unordered pair appears (at least) once.  Returns ``H`` and ``full (N * N,)``,
    the packed position of each matrix entry ``(i, j)`` (symmetric: ``(i, j)`` and
    ``(j, i)`` read the same position).

    The indices of the most recent sizes are cached (an optimiser or a training loop
    evaluates the same ``N`` many times; rebuilding costs a third of a one-addend
    evaluation at 2000 points), within :data:`CIRCULANT_CACHE_BYTES`.  An unbounded
    cache would keep an ``N x N`` index for every size ever seen: a Bayesian-optimisation
    loop adding one point per step up to 1500 points grew by 12 GiB that way
    (``docs/benchmarks/lazy-kernels.md``, section 11).
    """
    return N // 2 + 1, _cached_circulant_index(N, device)
