"""PaddedBatch: construction, validation, select/to/repeat, point operations, size buckets."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from amorgp.kernel_grammar import EXTENDED_VOCABULARY, PAPER_VOCABULARY, DimWiseStructure
from amorgp.lazy_kernels import PaddedBatch, kernel_matrix_dimwise, size_buckets

VOCAB = PAPER_VOCABULARY


def _batch(seed: int = 0) -> PaddedBatch:
    g = torch.Generator().manual_seed(seed)
    sizes = [(5, 2), (3, 1), (8, 3), (4, 2)]
    texts = ["SE + PER", "LIN", "(SE*LIN)@0 * PER@1 * (SE + LIN)@2", "SE*PER"]
    data = [
        (torch.rand(n, d, generator=g, dtype=torch.float64), torch.randn(n, generator=g))
        for n, d in sizes
    ]
    structs = [DimWiseStructure.parse(t, d) for t, (_, d) in zip(texts, sizes, strict=True)]
    return PaddedBatch.from_datasets([(X, y.double()) for X, y in data], structs, VOCAB).validate()


def test_from_datasets_pads_and_round_trips_the_structures() -> None:
    b = _batch()
    assert b.X.shape == (4, 8, 3)
    assert b.n_points.tolist() == [5, 3, 8, 4]
    assert b.n_dims.tolist() == [2, 1, 3, 2]
    assert bool((b.X[~(b.point_mask[:, :, None] & b.dim_mask[:, None, :])] == 0).all())
    texts = [("SE + PER", 2), ("LIN", 1), ("(SE*LIN)@0 * PER@1 * (SE + LIN)@2", 3), ("SE*PER", 2)]
    assert b.structures() == [DimWiseStructure.parse(t, d) for t, d in texts]
    assert b.param_shape == (4, 3, 2, VOCAB.max_params)
    with pytest.raises(ValueError, match="input dimensions"):
        PaddedBatch.from_datasets(
            [(torch.rand(3, 2), torch.rand(3))], [DimWiseStructure.parse("SE", 1)]
        )
    with pytest.raises(ValueError, match="one structure per dataset"):
        PaddedBatch.from_datasets([], [])


def test_select_to_repeat_and_points() -> None:
    b = _batch()
    sub = b.select(torch.tensor([2, 0]))
    assert torch.equal(sub.X[0], b.X[2])
    assert sub.structures() == [b.structures()[2], b.structures()[0]]
    assert len(b.select(-1)) == 1
    assert torch.equal(b.select([1, 3]).y, b.y[[1, 3]])
    low = b.to(dtype=torch.float32)
    assert low.X.dtype == torch.float32
    assert low.symbols.dtype == torch.int64
    assert low.point_mask.dtype == torch.bool
    rep = b.repeat(3)
    assert len(rep) == 12
    assert torch.equal(rep.X[4], b.X[1])
    shuffled = b.take_points(
        torch.randperm(8, generator=torch.Generator().manual_seed(1)).expand(4, -1)
    )
    first = shuffled.points_first()
    assert torch.equal(first.point_mask, b.point_mask)  # present points first, axis cropped
    for i in range(len(b)):  # the same present points (as sets)
        n = int(b.n_points[i])
        key = lambda X: X[torch.argsort(X[:, 0])]  # noqa: E731
        torch.testing.assert_close(key(first.X[i, :n]), key(b.X[i, :n]), rtol=0, atol=0)
    assert torch.equal(b.points_first().X, b.X)
    assert b.points_first(3).X.shape[1] == 3
    small = b.subsample_points(4, torch.Generator().manual_seed(2))
    assert small.X.shape[1] == 4
    assert small.n_points.tolist() == [4, 3, 4, 4]
    assert b.subsample_points(0, None) is b


def test_size_buckets_cover_every_element_once_and_crop_to_the_largest() -> None:
    b = _batch()
    groups = b.size_buckets(2)
    idx = torch.cat([i for i, _ in groups])
    assert sorted(idx.tolist()) == [0, 1, 2, 3]
    for i, sub in groups:
        assert sub.X.shape[1] == int(b.n_points[i].max())
        assert torch.equal(sub.n_points, b.n_points[i])
    counts = torch.tensor([5, 1, 9, 3, 7])
    assert [(i.tolist(), w) for i, w in size_buckets(counts, 2)] == [([1, 3, 0], 5), ([4, 2], 9)]
    assert len(size_buckets(counts, 10)) == 5


def test_padding_does_not_change_the_kernel_matrices() -> None:
    """Each pair alone and inside the padded batch gives the same kernel matrix."""
    b = _batch()
    g = torch.Generator().manual_seed(3)
    params = 0.3 + torch.rand(b.param_shape, generator=g, dtype=torch.float64)
    K = kernel_matrix_dimwise(b.X, b.X, b.symbols, b.symbol_mask, params, VOCAB, b.dim_mask)
    for i in range(len(b)):
        n, d = int(b.n_points[i]), int(b.n_dims[i])
        one = PaddedBatch.from_datasets([(b.X[i, :n, :d], b.y[i, :n])], [b.structures()[i]], VOCAB)
        L = one.symbols.shape[2]
        Ki = kernel_matrix_dimwise(
            one.X, one.X, one.symbols, one.symbol_mask, params[i : i + 1, :d, :L], VOCAB
        )
        torch.testing.assert_close(Ki[0], K[i, :n, :n], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: {"X": b.X[0]}, "X must have shape"),
        (lambda b: {"y": b.y[:, :-1]}, "y must have shape"),
        (lambda b: {"X": b.X.long()}, "X must be a float"),
        (lambda b: {"point_mask": b.point_mask.int()}, "point_mask must be a bool"),
        (lambda b: {"symbols": b.symbols.double()}, "symbols must be a int"),
        (lambda b: {"symbols": b.symbols[:, :2]}, "symbols must have shape"),
        (lambda b: {"symbol_mask": b.symbol_mask[..., :1]}, "symbol_mask must have shape"),
        (lambda b: {"symbols": b.symbols + 7 * b.symbol_mask}, "symbol ids must lie"),
        (lambda b: {"symbol_mask": torch.ones_like(b.symbol_mask)}, "padding id 0"),
        (lambda b: {"dim_mask": torch.zeros_like(b.dim_mask)}, "dimension 0, which its data"),
        (lambda b: {"point_mask": torch.zeros_like(b.point_mask)}, "at least one point"),
        (
            lambda b: {
                "X": b.X.masked_fill(torch.ones_like(b.point_mask)[:, :, None], float("nan"))
            },
            "X contains NaN",
        ),
        (lambda b: {"y": b.y.masked_fill(b.point_mask, float("inf"))}, "y contains NaN"),
        (lambda b: {"vocab": EXTENDED_VOCABULARY, "symbols": b.symbols + 20}, "0..15"),
        (lambda b: {"params": torch.ones(b.param_shape, dtype=torch.float64)}, "together"),
        (
            lambda b: {
                "params": torch.zeros(b.param_shape, dtype=torch.float64),
                "noise": torch.ones(4, dtype=torch.float64),
            },
            "positive in every used slot",
        ),
        (
            lambda b: {
                "params": torch.ones(b.param_shape, dtype=torch.float64),
                "noise": torch.zeros(4, dtype=torch.float64),
            },
            "noise variances",
        ),
    ],
)
def test_validate_names_the_problem(change, message: str) -> None:
    b = _batch()
    with pytest.raises(ValueError, match=message):
        replace(b, **change(b)).validate()


def test_validate_accepts_junk_at_padding_and_unused_slots() -> None:
    b = _batch()
    pad = ~(b.point_mask[:, :, None] & b.dim_mask[:, None, :])
    X = b.X.masked_fill(pad, float("nan"))
    y = b.y.masked_fill(~b.point_mask, float("inf"))
    params = torch.ones(b.param_shape, dtype=torch.float64).masked_fill(~b.used_slots(), -5.0)
    noise = torch.full((4,), 0.1, dtype=torch.float64)
    replace(b, X=X, y=y, params=params, noise=noise).validate()
    mask = b.symbol_mask.clone()
    mask[0, 1] = False
    with pytest.raises(ValueError, match="dimension 1 has no addend"):
        replace(b, symbol_mask=mask).validate()
