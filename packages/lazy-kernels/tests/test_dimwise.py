"""Tests of the batched heterogeneous evaluator against the numpy reference formulas."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from amorgp.kernel_grammar import EXTENDED_VOCABULARY, PAPER_VOCABULARY, Vocabulary
from amorgp.lazy_kernels import circulant, evaluation, kernel_diag_dimwise, kernel_matrix_dimwise
from amorgp.lazy_kernels.testing import (
    DimWiseBatch,
    random_dimwise_batch,
    reference_diag_dimwise,
    reference_kernel_dimwise,
)

VOCABS = [PAPER_VOCABULARY, EXTENDED_VOCABULARY]


@pytest.mark.parametrize("vocab", VOCABS, ids=lambda v: v.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_matrix_matches_reference(vocab: Vocabulary, seed: int) -> None:
    batch = random_dimwise_batch(vocab, torch.Generator().manual_seed(seed), batch=6)
    K = kernel_matrix_dimwise(*batch.args())
    np.testing.assert_allclose(K.numpy(), reference_kernel_dimwise(batch), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("vocab", VOCABS, ids=lambda v: v.name)
def test_diag_matches_reference_and_matrix(vocab: Vocabulary) -> None:
    batch = random_dimwise_batch(vocab, torch.Generator().manual_seed(3), batch=6)
    diag = kernel_diag_dimwise(
        batch.X1, batch.symbols, batch.symbol_mask, batch.params, vocab, batch.dim_mask
    )
    np.testing.assert_allclose(diag.numpy(), reference_diag_dimwise(batch), rtol=1e-12, atol=1e-13)
    K = kernel_matrix_dimwise(batch.X1, batch.X1, *batch.args()[2:])
    torch.testing.assert_close(diag, torch.diagonal(K, dim1=1, dim2=2), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("vocab", VOCABS, ids=lambda v: v.name)
@pytest.mark.parametrize("n", [1, 6, 7])
def test_symmetric_path_matches_reference(vocab: Vocabulary, n: int) -> None:
    """``X2 is X1`` evaluates each unordered pair once (circulant packing, even and odd N);
    values must equal the oracle and the matrix be exactly symmetric."""
    batch = random_dimwise_batch(vocab, torch.Generator().manual_seed(5), batch=6, n=n)
    sym = dataclasses.replace(batch, X2=batch.X1)
    K = kernel_matrix_dimwise(batch.X1, batch.X1, *batch.args()[2:])
    np.testing.assert_allclose(K.numpy(), reference_kernel_dimwise(sym), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(K, K.transpose(1, 2), rtol=0, atol=0)


def test_symmetric_path_gradients() -> None:
    """Gradients through the packed triangle: gradcheck, and equal to the general path."""
    batch = random_dimwise_batch(
        EXTENDED_VOCABULARY, torch.Generator().manual_seed(6), batch=3, n=4, dims=2, addends=2
    )
    X = batch.X1.clone().requires_grad_()
    params = batch.params.clone().requires_grad_()
    rest = (batch.symbols, batch.symbol_mask)

    def f(a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return kernel_matrix_dimwise(a, a, *rest, p, batch.vocab, batch.dim_mask)

    assert torch.autograd.gradcheck(f, (X, params))
    w = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    g_sym = torch.autograd.grad((f(X, params) * w).sum(), (X, params))
    K_gen = kernel_matrix_dimwise(X, X.clone(), *rest, params, batch.vocab, batch.dim_mask)
    g_gen = torch.autograd.grad((K_gen * w).sum(), (X, params))
    for a, b in zip(g_sym, g_gen):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_views_of_the_same_points_take_the_symmetric_path() -> None:
    """``X2`` viewing ``X1``'s memory the same way (``X[None]`` twice) is evaluated like
    ``X2 is X1`` when no gradient reaches the inputs, and like two inputs when one does."""
    batch = random_dimwise_batch(EXTENDED_VOCABULARY, torch.Generator().manual_seed(9), n=7)
    X, rest = batch.X1, batch.args()[2:]
    K_same = kernel_matrix_dimwise(X, X, *rest)
    K_views = kernel_matrix_dimwise(X[:], X[:], *rest)
    torch.testing.assert_close(K_views, K_same, rtol=0, atol=0)
    torch.testing.assert_close(K_views, K_views.transpose(1, 2), rtol=0, atol=0)
    sym = dataclasses.replace(batch, X2=X)
    np.testing.assert_allclose(K_views.numpy(), reference_kernel_dimwise(sym), rtol=1e-12)
    Xg = X.clone().requires_grad_()
    w = torch.randn(K_same.shape, generator=torch.Generator().manual_seed(1), dtype=X.dtype)
    a, b = Xg[:], Xg[:]
    g_views = torch.autograd.grad((kernel_matrix_dimwise(a, b, *rest) * w).sum(), (a, b))
    a2, b2 = Xg.clone(), Xg.clone()
    g_two = torch.autograd.grad((kernel_matrix_dimwise(a2, b2, *rest) * w).sum(), (a2, b2))
    for g1, g2 in zip(g_views, g_two):
        torch.testing.assert_close(g1, g2, rtol=1e-13, atol=1e-14)


def test_gradients_after_an_inference_mode_call() -> None:
    """The symmetric path caches index tensors; one first built under ``inference_mode``
    must still serve a later differentiable call of the same size (regression test)."""
    n = 11  # a size no other test uses, so the cache is filled here
    batch = random_dimwise_batch(
        PAPER_VOCABULARY, torch.Generator().manual_seed(8), batch=2, n=n, dims=1, addends=1
    )
    rest = batch.args()[2:]
    with torch.inference_mode():
        K0 = kernel_matrix_dimwise(batch.X1, batch.X1, *rest)
    params = batch.params.clone().requires_grad_()
    args = (*rest[:2], params, *rest[3:])
    K = kernel_matrix_dimwise(batch.X1, batch.X1, *args)
    (g,) = torch.autograd.grad(K.sum(), params)
    assert torch.isfinite(g).all()
    torch.testing.assert_close(K.detach(), K0, rtol=0, atol=0)


@pytest.mark.parametrize("n", [1, 2, 5, 6, 1027])
def test_circulant_index_stores_each_pair_once(n: int) -> None:
    """Oracle for the packed index: entry ``(i, j)`` reads offset ``k < H`` of row ``r``,
    whose pair ``(r, (r + k) mod n)`` is ``{i, j}``; ``(i, j)`` and ``(j, i)`` read the same
    place (a large odd ``n`` too)."""
    half, full = circulant.circulant_packing(n, torch.device("cpu"))
    assert half == n // 2 + 1
    assert full.dtype == torch.int32  # half the memory of an int64 index
    pos = full.long().reshape(n, n).numpy()
    k, r = pos // n, pos % n
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert (k < half).all()
    partner = (r + k) % n
    assert (((r == i) & (partner == j)) | ((r == j) & (partner == i))).all()
    np.testing.assert_array_equal(pos, pos.T)


def test_circulant_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that grows ``n`` by one point per step (Bayesian optimisation, active
    learning) must not keep an index per size: the cached indices hold at most
    ``CIRCULANT_CACHE_BYTES`` together, the most recent kept, a larger one not cached
    (regression test: the cache was unbounded, 12 GiB of growth over n = 100..1500)."""
    cache = circulant._index_cache
    monkeypatch.setattr(circulant, "CIRCULANT_CACHE_BYTES", 4 * 30 * 30)  # one n = 30 index
    cache.clear()
    cpu = torch.device("cpu")
    for n in range(20, 34):
        batch = random_dimwise_batch(
            PAPER_VOCABULARY, torch.Generator().manual_seed(n), batch=1, n=n, dims=1, addends=1
        )
        K = kernel_matrix_dimwise(batch.X1, batch.X1, *batch.args()[2:])
        sym = dataclasses.replace(batch, X2=batch.X1)
        np.testing.assert_allclose(K.numpy(), reference_kernel_dimwise(sym), rtol=1e-12)
        torch.testing.assert_close(K, K.transpose(1, 2), rtol=0, atol=0)
        held = sum(t.numel() * t.element_size() for t in cache.values())
        assert held <= circulant.CIRCULANT_CACHE_BYTES
        assert ((n, cpu) in cache) == (n <= 30)  # the latest size, unless too large
    assert len(cache) == 1  # n = 30: every smaller one evicted by the next
    cache.clear()


def test_negative_inputs_lin_products() -> None:
    """LIN factors go negative for negative inputs; the evaluator must not assume positivity."""
    vocab = Vocabulary(("LIN", "SE*LIN", "LIN*PER"))
    batch = random_dimwise_batch(vocab, torch.Generator().manual_seed(5), x_low=-2.0, x_high=1.0)
    K = kernel_matrix_dimwise(*batch.args())
    assert (K < 0).any()
    np.testing.assert_allclose(K.numpy(), reference_kernel_dimwise(batch), rtol=1e-12, atol=1e-13)


def test_batch_equals_loop() -> None:
    batch = random_dimwise_batch(EXTENDED_VOCABULARY, torch.Generator().manual_seed(7), batch=5)
    K = kernel_matrix_dimwise(*batch.args())
    for b in range(5):
        Kb = kernel_matrix_dimwise(
            batch.X1[b : b + 1],
            batch.X2[b : b + 1],
            batch.symbols[b : b + 1],
            batch.symbol_mask[b : b + 1],
            batch.params[b : b + 1],
            batch.vocab,
            batch.dim_mask[b : b + 1],
        )
        torch.testing.assert_close(Kb[0], K[b], rtol=1e-14, atol=0.0)


def _plan_shapes_batch(vocab: Vocabulary, seed: int) -> DimWiseBatch:
    """A batch whose symbol groups take every path of the evaluator's plan: a symbol on
    every active dimension in order (starts the sum), one on a consecutive run of
    dimensions (sliced), one scattered, and one twice in the same dimension (repeated
    pair, gathered)."""
    g = torch.Generator().manual_seed(seed)
    batch = random_dimwise_batch(vocab, g, batch=4, n=7, m=5, dims=3, addends=4)
    B, D, L = batch.symbols.shape
    dim_mask = torch.ones(B, D, dtype=torch.bool)
    dim_mask[1, 2] = False
    ids = torch.randperm(len(vocab), generator=g)[:3] + 1
    symbols = torch.zeros(B, D, L, dtype=torch.int64)
    mask = torch.zeros(B, D, L, dtype=torch.bool)
    symbols[:, :, 0], mask[:, :, 0] = ids[0], True  # every pair
    symbols[1:3, :, 1], mask[1:3, :, 1] = ids[1], True  # a consecutive run of pairs
    symbols[0, 0, 2], symbols[3, 1, 2], mask[0, 0, 2], mask[3, 1, 2] = ids[2], ids[2], True, True
    symbols[2, 0, 3], mask[2, 0, 3] = ids[1], True  # ids[1] twice in pair (2, 0)
    mask &= dim_mask[..., None]
    symbols = torch.where(mask, symbols, torch.zeros_like(symbols))
    params = 0.3 + 1.2 * torch.rand(batch.params.shape, generator=g, dtype=torch.float64)
    return dataclasses.replace(
        batch, symbols=symbols, symbol_mask=mask, dim_mask=dim_mask, params=params
    )


@pytest.mark.parametrize("vocab", VOCABS, ids=lambda v: v.name)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["cross", "symmetric", "diag"])
@pytest.mark.parametrize("chunk", [None, 1, 40])
def test_recording_modes_match_reference(
    vocab: Vocabulary, seed: int, kind: str, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a recorded graph the evaluator updates fresh tensors in place and works by
    blocks of points (``chunk`` values per block: one row, a few rows); with one it does
    neither.  Every mode (graph, ``no_grad``, ``inference_mode``) must give the oracle's
    values, on random heterogeneous batches and on one taking every path of the plan."""
    if chunk is not None:
        monkeypatch.setattr(evaluation, "CHUNK_ELEMENTS", chunk)
    shared = random_dimwise_batch(vocab, torch.Generator().manual_seed(30 + seed), batch=8, n=6)
    shared = dataclasses.replace(  # one set of points for every element (expanded)
        shared, X1=shared.X1[:1].expand_as(shared.X1), X2=shared.X2[:1].expand_as(shared.X2)
    )
    for batch in (
        random_dimwise_batch(vocab, torch.Generator().manual_seed(20 + seed), batch=8, n=6),
        _plan_shapes_batch(vocab, seed),
        shared,
    ):
        if kind == "symmetric":
            batch = dataclasses.replace(batch, X2=batch.X1)
        want = reference_diag_dimwise(batch) if kind == "diag" else reference_kernel_dimwise(batch)
        rest = (batch.symbols, batch.symbol_mask)

        def k(p: torch.Tensor, batch: DimWiseBatch = batch, rest: tuple = rest) -> torch.Tensor:
            if kind == "diag":
                return kernel_diag_dimwise(batch.X1, *rest, p, vocab, batch.dim_mask)
            X2 = batch.X1 if kind == "symmetric" else batch.X2
            return kernel_matrix_dimwise(batch.X1, X2, *rest, p, vocab, batch.dim_mask)

        with torch.no_grad():
            got_no_grad = k(batch.params)
        with torch.inference_mode():
            got_inference = k(batch.params)
        p = batch.params.clone().requires_grad_()
        got_graph = k(p)
        assert got_graph.requires_grad
        for got in (got_no_grad, got_inference, got_graph):
            np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-13)
        # the graph's gradients against central finite differences of the oracle
        w = torch.randn(got_graph.shape, generator=torch.Generator().manual_seed(seed))
        (grad,) = torch.autograd.grad((got_graph * w.double()).sum(), p)
        used = batch.symbol_mask.nonzero()[0].tolist()
        for slot in range(2):
            e = torch.zeros_like(batch.params)
            e[(*used, slot)] = 1e-6
            plus = dataclasses.replace(batch, params=batch.params + e)
            minus = dataclasses.replace(batch, params=batch.params - e)
            f = reference_diag_dimwise if kind == "diag" else reference_kernel_dimwise
            fd = ((f(plus) - f(minus)) / 2e-6 * w.double().numpy()).sum()
            assert abs(float(grad[(*used, slot)]) - fd) <= 1e-6 * (1.0 + abs(fd))


@pytest.mark.parametrize("kind", ["cross", "symmetric", "diag"])
def test_shared_points_gradients(kind: str) -> None:
    """Elements sharing one (expanded) set of points are evaluated per dimension; values and
    gradients (to the points and the parameters) equal those of a materialised copy."""
    batch = random_dimwise_batch(EXTENDED_VOCABULARY, torch.Generator().manual_seed(4), batch=6)
    rest = (batch.symbols, batch.symbol_mask)
    w = torch.randn(6, 6, 6 if kind == "symmetric" else 5, dtype=torch.float64)
    results = []
    for expand in (True, False):
        x1 = batch.X1[0].clone().requires_grad_()
        x2 = batch.X2[0].clone().requires_grad_()
        p = batch.params.clone().requires_grad_()
        X1 = x1.expand(6, -1, -1) if expand else x1.repeat(6, 1, 1)
        X2 = x2.expand(6, -1, -1) if expand else x2.repeat(6, 1, 1)
        if kind == "diag":
            K = kernel_diag_dimwise(X1, *rest, p, batch.vocab, batch.dim_mask)
            weight = w[:, :, 0]
        else:
            K = kernel_matrix_dimwise(
                X1, X1 if kind == "symmetric" else X2, *rest, p, batch.vocab, batch.dim_mask
            )
            weight = w
        inputs = (x1, p) if kind != "cross" else (x1, x2, p)
        results.append((K.detach(), torch.autograd.grad((K * weight).sum(), inputs)))
    (K_e, g_e), (K_m, g_m) = results
    torch.testing.assert_close(K_e, K_m, rtol=1e-14, atol=1e-15)
    for a, b in zip(g_e, g_m):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", ["shared", "per-element"])
@pytest.mark.parametrize("chunk", [1, 7, 40])
def test_blockwise_graph_matches_whole_graph(
    kind: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graph for the parameters only is recorded block by block on the CPU (forward
    without a graph, each block's graph rebuilt in the backward): the values are bit for
    bit those of the whole-matrix graph and the parameter gradients equal it up to
    summation order; a second derivative raises instead of returning a wrong one."""
    batch = random_dimwise_batch(PAPER_VOCABULARY, torch.Generator().manual_seed(5), batch=5, n=9)
    if kind == "shared":
        batch = dataclasses.replace(batch, X1=batch.X1[:1].expand_as(batch.X1))
    rest = (batch.symbols, batch.symbol_mask)
    w = torch.randn(5, 9, 9, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    calls = []
    real = evaluation._BlockwiseProduct.apply
    monkeypatch.setattr(
        evaluation._BlockwiseProduct, "apply", lambda *a: calls.append(1) or real(*a)
    )

    def value_and_grad(elements: int) -> tuple[torch.Tensor, torch.Tensor]:
        monkeypatch.setattr(evaluation, "CHUNK_ELEMENTS", elements)
        monkeypatch.setattr(evaluation, "BLOCKWISE_MIN_ELEMENTS", 2 * elements)
        p = batch.params.clone().requires_grad_()
        K = kernel_matrix_dimwise(batch.X1, batch.X1, *rest, p, PAPER_VOCABULARY, batch.dim_mask)
        return K.detach(), torch.autograd.grad((K * w).sum(), p)[0]

    K_whole, g_whole = value_and_grad(1 << 30)
    assert not calls
    K_blocks, g_blocks = value_and_grad(chunk)
    assert calls, "the blockwise graph was not used"
    assert torch.equal(K_blocks, K_whole)
    torch.testing.assert_close(g_blocks, g_whole, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        K_blocks.numpy(),
        reference_kernel_dimwise(dataclasses.replace(batch, X2=batch.X1)),
        rtol=1e-12,
        atol=1e-13,
    )
    p = batch.params.clone().requires_grad_()
    K = kernel_matrix_dimwise(batch.X1, batch.X1, *rest, p, PAPER_VOCABULARY, batch.dim_mask)
    (g,) = torch.autograd.grad((K * K * w).sum(), p, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


def test_underflowing_values_flush_to_zero() -> None:
    """Far-apart points under short lengthscales: without a graph, addends below about
    6e-308 (their exp would be subnormal: a slow path) are exactly 0, the rest as the
    oracle; with a graph, as before."""
    batch = random_dimwise_batch(
        PAPER_VOCABULARY, torch.Generator().manual_seed(12), batch=6, n=9, x_low=-40.0, x_high=40.0
    )
    want = reference_kernel_dimwise(batch)
    tiny = torch.finfo(torch.float64).tiny
    assert (np.abs(want) < tiny).any()
    assert (np.abs(want) > 1e-3).any()
    with torch.no_grad():
        K = kernel_matrix_dimwise(*batch.args()).numpy()
    np.testing.assert_allclose(K, want, rtol=1e-12, atol=1e-306)
    p = batch.params.clone().requires_grad_()
    K_graph = kernel_matrix_dimwise(*batch.args()[:4], p, *batch.args()[5:])
    np.testing.assert_allclose(K_graph.detach().numpy(), want, rtol=1e-12, atol=1e-300)


def test_padding_invariance() -> None:
    """Extra padded dimensions, addends (with garbage ids/params) and points change nothing."""
    g = torch.Generator().manual_seed(11)
    batch = random_dimwise_batch(PAPER_VOCABULARY, g, batch=3, n=5, m=4, dims=2, addends=2)
    K = kernel_matrix_dimwise(*batch.args())
    B, N, D = batch.X1.shape
    L = batch.symbols.shape[2]
    P = batch.params.shape[3]
    X1 = torch.cat([batch.X1, torch.rand(B, 3, D, generator=g, dtype=torch.float64)], 1)
    X1 = torch.cat([X1, torch.full((B, N + 3, 2), 123.0, dtype=torch.float64)], 2)
    X2 = torch.cat([batch.X2, torch.full((B, batch.X2.shape[1], 2), -7.0, dtype=torch.float64)], 2)
    sym = torch.zeros(B, D + 2, L + 2, dtype=torch.int64)
    sym[:, :D, :L] = batch.symbols
    sym[:, :, L:] = 3  # garbage ids under a False mask
    smask = torch.zeros(B, D + 2, L + 2, dtype=torch.bool)
    smask[:, :D, :L] = batch.symbol_mask
    par = torch.full((B, D + 2, L + 2, P + 1), -5.0, dtype=torch.float64)  # garbage, even negative
    par[:, :D, :L, :P] = batch.params
    dmask = torch.zeros(B, D + 2, dtype=torch.bool)
    dmask[:, :D] = batch.dim_mask
    Kp = kernel_matrix_dimwise(X1, X2, sym, smask, par, PAPER_VOCABULARY, dmask)
    torch.testing.assert_close(Kp[:, :N, :], K, rtol=1e-14, atol=0.0)


def test_default_dim_mask_and_validate_false_agree() -> None:
    batch = random_dimwise_batch(EXTENDED_VOCABULARY, torch.Generator().manual_seed(2))
    K = kernel_matrix_dimwise(*batch.args())
    K2 = kernel_matrix_dimwise(*batch.args()[:6])
    K3 = kernel_matrix_dimwise(*batch.args(), validate=False)
    torch.testing.assert_close(K2, K, rtol=0, atol=0)
    torch.testing.assert_close(K3, K, rtol=0, atol=0)


def test_gradcheck_inputs_and_params() -> None:
    batch = random_dimwise_batch(
        EXTENDED_VOCABULARY, torch.Generator().manual_seed(4), batch=3, n=3, m=2, dims=2, addends=2
    )
    X1 = batch.X1.clone().requires_grad_()
    X2 = batch.X2.clone().requires_grad_()
    params = batch.params.clone().requires_grad_()

    def f(a: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return kernel_matrix_dimwise(
            a, b, batch.symbols, batch.symbol_mask, p, batch.vocab, batch.dim_mask
        )

    assert torch.autograd.gradcheck(f, (X1, X2, params))

    def fd(a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return kernel_diag_dimwise(
            a, batch.symbols, batch.symbol_mask, p, batch.vocab, batch.dim_mask
        )

    assert torch.autograd.gradcheck(fd, (X1, params))


def test_float32_close_to_float64() -> None:
    batch = random_dimwise_batch(PAPER_VOCABULARY, torch.Generator().manual_seed(9))
    K64 = kernel_matrix_dimwise(*batch.args())
    args32 = [
        a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        for a in batch.args()
    ]
    K32 = kernel_matrix_dimwise(*args32)
    assert K32.dtype == torch.float32
    torch.testing.assert_close(K32.double(), K64, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- validation


def _args() -> list:
    batch = random_dimwise_batch(PAPER_VOCABULARY, torch.Generator().manual_seed(0), batch=2)
    return list(batch.args())


def _call(args: list) -> None:
    kernel_matrix_dimwise(*args)


def test_rejects_shape_mismatch() -> None:
    args = _args()
    args[1] = args[1][:, :, :2]
    with pytest.raises(ValueError, match="disagree"):
        _call(args)
    args = _args()
    args[0] = args[0][0]
    with pytest.raises(ValueError, match="X1 must be a"):
        _call(args)
    args = _args()
    args[3] = args[3][..., :1]
    with pytest.raises(ValueError, match="symbol_mask"):
        _call(args)
    args = _args()
    args[4] = args[4][..., :2]
    with pytest.raises(ValueError, match="slots"):
        _call(args)


def test_rejects_structure_with_more_dims_than_data() -> None:
    args = _args()
    args[0], args[1] = args[0][:, :, :2], args[1][:, :, :2]
    args[6] = None
    with pytest.raises(ValueError, match="exceeds the data"):
        _call(args)


def test_rejects_symbol_in_padded_dimension() -> None:
    args = _args()
    args[6] = args[6].clone()
    args[6][0, 0] = False
    with pytest.raises(ValueError, match="dimension 0"):
        _call(args)


def test_rejects_nan_and_inf() -> None:
    args = _args()
    args[0] = args[0].clone()
    args[0][0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="X1 contains NaN"):
        _call(args)
    args = _args()
    args[1] = args[1].clone()
    args[1][1, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="X2 contains NaN"):
        _call(args)
    args = _args()
    args[4] = args[4].clone()
    args[4][0, 0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="params contains NaN"):
        _call(args)


def test_rejects_non_positive_params() -> None:
    args = _args()
    args[4] = args[4].clone()
    args[4][0, 0, 0, 1] = 0.0
    with pytest.raises(ValueError, match="positive"):
        _call(args)


def test_rejects_unknown_ids() -> None:
    args = _args()
    args[2] = args[2].clone()
    args[2][0, 0, 0] = len(PAPER_VOCABULARY) + 1
    with pytest.raises(ValueError, match="unknown symbol id"):
        _call(args)
    args = _args()
    args[2] = args[2].clone()
    args[2][0, 0, 0] = 0
    with pytest.raises(ValueError, match="unknown symbol id 0"):
        _call(args)


def test_rejects_empty_dimension_and_empty_element() -> None:
    args = _args()
    args[3] = args[3].clone()
    args[3][0, 0] = False
    with pytest.raises(ValueError, match="has no addend"):
        _call(args)
    args = _args()
    args[3] = args[3].clone()
    args[6] = args[6].clone()
    args[3][1] = False
    args[6][1] = False
    with pytest.raises(ValueError, match="no active dimension"):
        _call(args)


def test_rejects_bad_dtypes() -> None:
    args = _args()
    args[2] = args[2].double()
    with pytest.raises(ValueError, match="integer ids"):
        _call(args)
    args = _args()
    args[3] = args[3].long()
    with pytest.raises(ValueError, match="bool"):
        _call(args)
    args = _args()
    args[4] = args[4].float()
    with pytest.raises(ValueError, match="must match X1"):
        _call(args)


LOG_FORM = Vocabulary(("SE", "PER", "SE*PER"), name="log-form")


@pytest.mark.parametrize("same", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_one_log_form_addend_per_dimension_fuses_the_product(
    same: bool, shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One addend of log form per dimension (SE-ARD, PER per column, SE*PER): the product
    over dimensions is one ``exp`` of a sum.  The fused path is taken, its values equal the
    reference formulas, and its parameter gradients (whole graph and block by block) equal
    central finite differences."""
    batch = random_dimwise_batch(
        LOG_FORM, torch.Generator().manual_seed(11), batch=4, n=7, m=5, dims=3, addends=1
    )
    if shared:
        batch = dataclasses.replace(
            batch, X1=batch.X1[:1].expand_as(batch.X1), X2=batch.X2[:1].expand_as(batch.X2)
        )
    if same:
        batch = dataclasses.replace(batch, X2=batch.X1)
    fused = []
    real = evaluation._fusable
    monkeypatch.setattr(evaluation, "_fusable", lambda *a: fused.append(real(*a)) or fused[-1])
    K = kernel_matrix_dimwise(*batch.args())
    assert fused == [True]
    np.testing.assert_allclose(K.numpy(), reference_kernel_dimwise(batch), rtol=1e-12, atol=1e-13)
    w = torch.randn(K.shape, generator=torch.Generator().manual_seed(12), dtype=torch.float64)

    def loss(p: torch.Tensor) -> torch.Tensor:
        args = list(batch.args())
        args[4] = p
        return (kernel_matrix_dimwise(*args) * w).sum()

    for elements in (1 << 30, 8):  # whole graph, then block by block
        monkeypatch.setattr(evaluation, "CHUNK_ELEMENTS", elements)
        monkeypatch.setattr(evaluation, "BLOCKWISE_MIN_ELEMENTS", 2 * elements)
        p = batch.params.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(p), p)
        fd = torch.zeros_like(p)
        active = batch.symbol_mask.nonzero().tolist()
        for b, d, a in active:
            for i in range(batch.params.shape[-1]):
                h = 1e-6 * float(batch.params[b, d, a, i])
                up, down = batch.params.clone(), batch.params.clone()
                up[b, d, a, i] += h
                down[b, d, a, i] -= h
                with torch.no_grad():
                    fd[b, d, a, i] = (loss(up) - loss(down)) / (2 * h)
        mask = batch.symbol_mask[..., None].expand_as(p)
        torch.testing.assert_close(g[mask], fd[mask], rtol=1e-6, atol=1e-8)


def test_mixed_dimensions_are_not_fused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two addends in a dimension, or a LIN factor, keep the product of sums."""
    fused = []
    real = evaluation._fusable
    monkeypatch.setattr(evaluation, "_fusable", lambda *a: fused.append(real(*a)) or fused[-1])
    for vocab, addends in ((LOG_FORM, 3), (PAPER_VOCABULARY, 1)):
        batch = random_dimwise_batch(
            vocab, torch.Generator().manual_seed(13), batch=6, dims=3, addends=addends
        )
        K = kernel_matrix_dimwise(*batch.args())
        np.testing.assert_allclose(
            K.numpy(), reference_kernel_dimwise(batch), rtol=1e-12, atol=1e-13
        )
    assert fused == [False, False]
