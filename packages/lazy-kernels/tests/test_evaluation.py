"""The evaluator's index plan: host copies instead of read-backs, and the pair reductions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.kernel_grammar import PAPER_VOCABULARY as V
from amorgp.kernel_grammar import DimWiseStructure, encode
from amorgp.lazy_kernels import PaddedBatch, kernel_matrix_dimwise
from amorgp.lazy_kernels.evaluation import host_copy, remember_host_copy

TEXTS = ["SE + PER", "(LIN + SE)@0 * (SE*PER)@2 * LIN@1", "SE"]


def _batch(
    seed: int = 0,
) -> tuple[list[DimWiseStructure], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    st = [DimWiseStructure.parse(t, 3, V) for t in TEXTS]
    s, m = (torch.as_tensor(a) for a in encode(st, V))
    g = torch.Generator().manual_seed(seed)
    B, D, L = s.shape
    X = torch.randn(B, 12, D, generator=g, dtype=torch.float64)
    P = 0.5 + torch.rand(B, D, L, V.max_params, generator=g, dtype=torch.float64)
    return st, X, s, m, P


def test_matrices_match_the_numpy_reference_with_ragged_dimensions() -> None:
    """Elements with different numbers of active dimensions (the ragged reduction)."""
    st = [
        DimWiseStructure.parse(t, d, V)
        for t, d in [("SE", 1), ("PER@0 * LIN@1", 2), ("SE + LIN", 3)]
    ]
    s, m = (torch.as_tensor(a) for a in encode(st, V))  # padded to 3 dimensions
    g = torch.Generator().manual_seed(1)
    B, D, L = s.shape
    X = torch.randn(B, 10, D, generator=g, dtype=torch.float64)
    P = 0.5 + torch.rand(B, D, L, V.max_params, generator=g, dtype=torch.float64)
    K = kernel_matrix_dimwise(X, X, s, m, P, V)
    for b, structure in enumerate(st):
        d = structure.n_dims
        Xb = X[b, :, :d].numpy()
        expect = structure.reference(Xb, Xb, P[b, :d, : structure.max_addends].numpy())
        np.testing.assert_allclose(K[b].numpy(), expect, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("grad", [False, True])
def test_evaluation_reads_no_value_back_from_the_device(grad: bool) -> None:
    """On the ``meta`` device (shapes, no values) any read-back raises; with the structure
    tensors' host copies recorded, the evaluation and its backward run without one (as a
    CUDA step in synchronisation-debug mode)."""
    _, X, s, m, P = _batch()
    sd, md = s.to("meta"), m.to("meta")
    Xm = X.to("meta")
    with pytest.raises(NotImplementedError):
        kernel_matrix_dimwise(Xm, Xm, sd, md, P.to("meta"), V, validate=False)
    remember_host_copy(sd, s)
    remember_host_copy(md, m)
    Pm = P.to("meta").requires_grad_(grad)
    K = kernel_matrix_dimwise(Xm, Xm, sd, md, Pm, V, validate=False)
    assert K.shape == (3, 12, 12)
    assert K.device.type == "meta"
    if grad:
        K.sum().backward()
        assert Pm.grad is not None
        assert Pm.grad.shape == P.shape


def test_a_moved_batch_records_its_host_copies() -> None:
    _st, X, s, m, _P = _batch()
    y = torch.zeros(X.shape[:2], dtype=torch.float64)
    batch = PaddedBatch(X, y, torch.ones(y.shape, dtype=torch.bool), m.any(-1), s, m, V)
    moved = batch.to("meta")
    assert torch.equal(host_copy(moved.symbols), s)
    assert torch.equal(host_copy(moved.symbol_mask), m)
    assert torch.equal(host_copy(moved.dim_mask), m.any(-1))
    before = s.clone()
    s.fill_(0)  # the record is a copy: later changes of the source do not reach it
    assert torch.equal(host_copy(moved.symbols), before)


@pytest.mark.parametrize("cross", [False, True])
def test_se_ard_matrices_match_the_numpy_reference(cross: bool) -> None:
    """SE in every active dimension (the ``cdist`` route), ragged dimensions, with and
    without a second point set: the dense numpy reference to rounding, exactly symmetric."""
    st = [DimWiseStructure.parse("SE", d, V) for d in (3, 2, 1)]
    s, m = (torch.as_tensor(a) for a in encode(st, V))
    g = torch.Generator().manual_seed(4)
    B, D, L = s.shape
    X = 2 * torch.randn(B, 30, D, generator=g, dtype=torch.float64)
    X2 = torch.randn(B, 9, D, generator=g, dtype=torch.float64) if cross else X
    P = 0.2 + torch.rand(B, D, L, V.max_params, generator=g, dtype=torch.float64)
    K = kernel_matrix_dimwise(X, X2, s, m, P, V)
    for b, structure in enumerate(st):
        d = structure.n_dims
        A, C = X[b, :, :d].numpy(), X2[b, :, :d].numpy()
        expect = structure.reference(A, C, P[b, :d, :1].numpy())
        np.testing.assert_allclose(K[b].numpy(), expect, rtol=1e-13, atol=1e-15)
    if not cross:
        torch.testing.assert_close(K, K.transpose(1, 2), rtol=0, atol=0)


@pytest.mark.parametrize("cross", [False, True])
def test_repeated_addends_on_shared_points_match_the_numpy_reference(cross: bool) -> None:
    """Many parameter sets on one point set that repeat addends (the starts of a
    multi-start): each distinct addend is evaluated once and gathered to its pairs, and
    every matrix still equals the dense numpy reference of its own parameters."""
    from amorgp.lazy_kernels import evaluation

    texts = ["SE + PER", "PER@0 * (SE + LIN)@1 * (SE*PER)@2", "(LIN*PER + SE)@0 * LIN@1 * PER@2"]
    st = [DimWiseStructure.parse(t, 3, V) for t in texts for _ in range(4)]
    s, m = (torch.as_tensor(a) for a in encode(st, V))
    g = torch.Generator().manual_seed(7)
    B, D, L = s.shape
    X = torch.randn(1, 15, D, generator=g, dtype=torch.float64).expand(B, 15, D)
    X2 = torch.randn(1, 6, D, generator=g, dtype=torch.float64).expand(B, 6, D) if cross else X
    base = 0.5 + torch.rand(len(texts), D, L, V.max_params, generator=g, dtype=torch.float64)
    P = base.repeat_interleave(4, 0).clone()
    P[1::4, 0] += 0.25  # each structure's copies differ in one dimension, or not at all
    P[2::4, 2] *= 1.5
    plans: list[int] = []
    real = evaluation._distinct

    def spy(groups: list, par: torch.Tensor) -> list:
        out = real(groups, par)
        plans.append(sum(gr.inverse is not None for gr in out))
        return out

    evaluation._distinct = spy
    try:
        K = kernel_matrix_dimwise(X, X2, s, m, P, V)
    finally:
        evaluation._distinct = real
    assert plans  # the repeated tokens were evaluated once
    assert plans[0] > 0
    for b, structure in enumerate(st):
        A, C = X[b].numpy(), X2[b].numpy()
        expect = structure.reference(A, C, P[b, :, : structure.max_addends].numpy())
        np.testing.assert_allclose(K[b].numpy(), expect, rtol=1e-12, atol=1e-14)


def test_arithmetic_runs_of_pairs_are_sliced_not_gathered() -> None:
    """The pairs of one symbol form an arithmetic run when kernels interleave their
    addends (every ``L``-th pair): a strided slice, which reads the same rows."""
    from amorgp.lazy_kernels.evaluation import _span

    assert _span(torch.tensor([3, 5, 7, 9])) == (3, 10, 2)
    assert _span(torch.tensor([0, 1, 2])) == (0, 3, 1)
    assert _span(torch.tensor([4])) == (4, 5, 1)
    assert _span(torch.tensor([], dtype=torch.long)) is None
    assert _span(torch.tensor([1, 2, 4])) is None
    assert _span(torch.tensor([5, 3, 1])) is None  # decreasing: gathered
    a = torch.tensor([2, 5, 8, 11])
    t = torch.arange(40.0).reshape(20, 2)
    first, stop, step = _span(a)  # type: ignore[misc]
    torch.testing.assert_close(t[first:stop:step], t.index_select(0, a), rtol=0, atol=0)


@pytest.mark.parametrize("grad", [False, True])
def test_strided_pairs_match_the_numpy_reference(
    grad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one product over two dimensions (each symbol's pairs every second
    pair: strided slices and adds), on each element's own points, with and without a
    graph for the parameters (finite differences of one parameter against the dense
    reference)."""
    from amorgp.lazy_kernels import evaluation

    st = [DimWiseStructure.parse("SE@0 * (PER + LIN)@1", 2, V) for _ in range(6)]
    s, m = (torch.as_tensor(a) for a in encode(st, V))
    g = torch.Generator().manual_seed(11)
    B, D, L = s.shape
    X = torch.randn(B, 9, D, generator=g, dtype=torch.float64)
    P = 0.5 + torch.rand(B, D, L, V.max_params, generator=g, dtype=torch.float64)
    P.requires_grad_(grad)
    spans: list[tuple[int, int, int] | None] = []
    real = evaluation._span
    monkeypatch.setattr(evaluation, "_span", lambda a: spans.append(real(a)) or spans[-1])
    K = kernel_matrix_dimwise(X, X, s, m, P, V)
    assert any(sp is not None and sp[2] == 2 for sp in spans)
    for b, structure in enumerate(st):
        Xb = X[b].numpy()
        expect = structure.reference(Xb, Xb, P[b, :, : structure.max_addends].detach().numpy())
        np.testing.assert_allclose(K[b].detach().numpy(), expect, rtol=1e-12, atol=1e-14)
    if grad:
        K[4].sum().backward()
        assert P.grad is not None
        h = 1e-6
        Pd = P.detach().numpy()
        Xb = X[4].numpy()
        up, down = Pd[4, :, :L].copy(), Pd[4, :, :L].copy()
        up[1, 0, 0] += h
        down[1, 0, 0] -= h
        fd = (st[4].reference(Xb, Xb, up).sum() - st[4].reference(Xb, Xb, down).sum()) / (2 * h)
        assert float(P.grad[4, 1, 0, 0]) == pytest.approx(fd, rel=1e-6)
