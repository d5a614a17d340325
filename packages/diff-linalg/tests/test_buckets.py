"""size_buckets: a partition of the batch in size order, each group with its own width."""

from __future__ import annotations

import torch

from amorgp.diff_linalg import gp_log_marginal_likelihood, size_buckets


def test_groups_partition_the_sorted_batch() -> None:
    counts = torch.tensor([5, 1, 9, 3, 7, 3])
    groups = size_buckets(counts, 4)
    order = torch.cat([idx for idx, _ in groups])
    assert torch.equal(order, torch.argsort(counts, stable=True))
    assert [len(idx) for idx, _ in groups] == [2, 2, 1, 1]
    assert [w for _, w in groups] == [int(counts[idx].max()) for idx, _ in groups]
    assert len(size_buckets(counts, 0)) == 1
    assert len(size_buckets(counts, 100)) == 6


def test_bucket_and_loop_strategies_equal_padding() -> None:
    """Every grouping gives the padded batch's log marginal likelihoods and gradients."""
    g = torch.Generator().manual_seed(0)
    B, N = 7, 12
    A = torch.randn(B, N, N, generator=g, dtype=torch.float64)
    K = (A @ A.transpose(1, 2) / N).requires_grad_()
    y = torch.randn(B, N, generator=g, dtype=torch.float64)
    n = torch.tensor([12, 3, 7, 5, 12, 9, 4])
    mask = torch.arange(N)[None] < n[:, None]
    mask = mask[:, torch.randperm(N, generator=g)]  # valid points not a prefix
    ref = gp_log_marginal_likelihood(K, y, 0.1, mask, strategy="pad")
    (gref,) = torch.autograd.grad(ref.sum(), K)
    for strategy, k in (("bucket", 1), ("bucket", 3), ("bucket", 7), ("loop", 4)):
        out = gp_log_marginal_likelihood(K, y, 0.1, mask, strategy=strategy, n_buckets=k)
        (gout,) = torch.autograd.grad(out.sum(), K)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gout, gref, rtol=1e-10, atol=1e-12)
