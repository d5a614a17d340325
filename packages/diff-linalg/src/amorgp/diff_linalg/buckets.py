"""Size buckets: batch elements grouped by size so each group is padded only to its own largest.

Used wherever a ragged padded batch is cut into a few dense sub-batches: the
bucketed log marginal likelihood here, the simulator's kernel and Cholesky per
group of similar ``n``, and the amortizer's encoder on datasets sorted by size.
"""

from __future__ import annotations

import torch

__all__ = ["size_buckets"]


def size_buckets(counts: torch.Tensor, n_buckets: int) -> list[tuple[torch.Tensor, int]]:
    """Batch elements grouped by size, for padding each group only to its largest size.

    Elements are sorted by ``counts (B,)`` (stable) and split into at most
    ``n_buckets`` contiguous groups of equal count (``torch.tensor_split``: the
    first ``B mod n_buckets`` groups hold one element more).

    Args:
        counts: ``(B,)`` integer sizes (e.g. valid points per element).
        n_buckets: the number of groups wanted (at least 1 is used, at most ``B``).

    Returns:
        ``[(indices, width), ...]``: the element indices of each non-empty group in
        ascending size (concatenated they are the stable sort order of ``counts``)
        and ``width``, the group's largest count.
    """
    order = torch.argsort(counts, stable=True)
    groups = []
    for idx in order.tensor_split(max(1, min(int(n_buckets), counts.numel()))):
        if idx.numel():
            groups.append((idx, int(counts[idx].max())))
    return groups
