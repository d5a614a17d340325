"""The engine of :mod:`amorgp.lazy_kernels.dimwise`: evaluation of a validated padded batch.

See :mod:`amorgp.lazy_kernels.dimwise` for the contract and the algorithm.  What this
module adds to it, none of which changes a value (results are bit for bit those of the
plain formulation; the exceptions are :func:`~amorgp.lazy_kernels.tables.evaluate_symbol`
setting an addend below about ``6e-308`` to 0 without a graph on the CPU, where its
``exp`` would be subnormal, a slow path, and parameter gradients summed over blocks, equal
up to floating-point summation order):

* without a recorded graph (``torch.no_grad``, ``inference_mode``, or inputs and
  parameters that do not require grad) fresh tensors are updated in place (variance,
  ``exp``, the elementary kernels' own steps, the addend sums), and the evaluation runs
  by blocks of the first point axis of ``CHUNK_ELEMENTS`` values over all pairs (CPU), whose
  temporaries stay in cache and are recycled by the allocator (whole-matrix temporaries
  are fresh memory pages, which cost more than the arithmetic);
* with a graph for the parameters only (Type-2 ML, the network's training loss) the CPU
  forward runs by blocks in the same way and the backward rebuilds and backpropagates
  one block's graph at a time (:class:`_BlockwiseProduct`, activation checkpointing by
  block): no whole-matrix graph is stored;
* a symbol whose pairs are a consecutive run reads slices of the per-pair quantities
  instead of gathered copies, and a symbol on every pair starts the sum (no zero fill);
* when every batch element shares one (expanded) set of points, ``x - x'``, its square
  and ``x x'`` are formed once per dimension, not per (element, dimension) pair.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from amorgp.lazy_kernels.circulant import circulant_packing
from amorgp.lazy_kernels.tables import SymbolTables, _exp_, evaluate_symbol, log_form

__all__ = [
    "BLOCKWISE_MIN_ELEMENTS",
    "CHUNK_ELEMENTS",
    "blockwise_graph",
    "evaluate_padded",
    "host_copy",
    "remember_host_copy",
]

CHUNK_ELEMENTS = 1 << 18
"""Values per block of the point axis (over all active pairs) without a recorded graph."""

BLOCKWISE_MIN_ELEMENTS = 8 * CHUNK_ELEMENTS
"""Values (over all active pairs) from which a graph for the parameters only is recorded
block by block (:class:`_BlockwiseProduct`): below it the whole-matrix graph stays in
cache, and rebuilding it block by block costs more than it saves (on training batches
the two break even at a few blocks; ``benchmarks/bench_evaluator_speed.py``)."""


def blockwise_graph(n: int) -> bool:
    """Whether ``K(X, X)`` of ``n`` points, with a graph for the parameters only on the
    CPU, is recorded block by block (:class:`_BlockwiseProduct`) for any number of
    dimensions: the symmetric packing's ``(n // 2 + 1, n)`` values of one dimension reach
    :data:`BLOCKWISE_MIN_ELEMENTS` and span more than one block (from ``n = 2048``)."""
    half = n // 2 + 1
    return n * half >= BLOCKWISE_MIN_ELEMENTS and CHUNK_ELEMENTS // n < half


class _Owners(NamedTuple):
    """The batch element of each active pair: ``B`` elements, ``owner (A,)`` (on the
    device; pairs are element-major) and ``uniform``, every element's number of active
    pairs where they are all equal (else ``None``)."""

    B: int
    owner: Tensor
    uniform: int | None


class _Group(NamedTuple):
    """The tokens of one symbol id: their positions ``idx`` in the token list, their
    pairs ``a`` (``span = (first, stop, step)`` when ``a`` is the arithmetic run
    ``first, first + step, ..., < stop``: the sum starts or adds into a strided view,
    without a scatter) and the ``rows`` of the per-pair quantities they read (``a``, or
    the dimension when every element shares its points; ``row_span`` likewise: the
    quantities are then sliced, not gathered; kernels of several addends interleave
    their symbols, every ``L``-th pair)."""

    sid: int
    idx: Tensor
    a: Tensor
    span: tuple[int, int, int] | None
    rows: Tensor
    row_span: tuple[int, int, int] | None
    inverse: Tensor | None = None
    """Where the group's distinct tokens are evaluated once (:func:`_distinct`): ``idx``
    and ``rows`` are theirs, and ``inverse (len(a),)`` maps each pair to its value."""


def _span(a: Tensor) -> tuple[int, int, int] | None:
    """``(first, stop, step)`` of an arithmetic run of indices (``step >= 1``), else None."""
    if a.numel() < 2:
        return (int(a[0]), int(a[0]) + 1, 1) if a.numel() else None
    step = int(a[1] - a[0])
    return (
        (int(a[0]), int(a[-1]) + 1, step) if step >= 1 and bool((a.diff() == step).all()) else None
    )


def _plan(
    symbols: Tensor,
    symbol_mask: Tensor,
    dim_mask: Tensor,
    n_symbols: int,
    by_dim: bool,
    device: torch.device,
) -> tuple[Tensor, _Owners, Tensor, list[_Group], bool]:
    """Index plan of a padded batch, built from the host copies of the small structure
    tensors (:func:`host_copy`) and sent to ``device`` without waiting (``by_dim``: the
    per-pair quantities have one row per dimension, shared by all elements).

    Returns:
        ``pairs (A,)`` flat ``b * D + d`` of the active dimensions (b-major),
        the :class:`_Owners` of the pairs,
        ``tokens (T,)`` flat ``(b * D + d) * L + l`` of the active addends, per symbol id
        present its :class:`_Group` (all on the input's device), and whether every active
        pair has exactly one addend.
    """
    B, D, L = symbols.shape
    sym_h, smask_h, dmask_h = symbols, symbol_mask, dim_mask
    tok_mask = smask_h & dmask_h[..., None]
    pairs = dmask_h.reshape(-1).nonzero().squeeze(1)
    pair_pos = torch.full((B * D,), -1, dtype=torch.long)
    pair_pos[pairs] = torch.arange(pairs.shape[0])
    tokens = tok_mask.reshape(-1).nonzero().squeeze(1)
    token_pair = pair_pos[tokens // L]
    sym = sym_h.reshape(-1)[tokens]
    order = torch.argsort(sym, stable=True)
    counts = torch.bincount(sym, minlength=n_symbols + 1).tolist()
    groups: list[_Group] = []
    start = counts[0]
    for sid in range(1, n_symbols + 1):
        if counts[sid]:
            idx = order[start : start + counts[sid]]
            a = token_pair[idx]
            rows = pairs[a] % D if by_dim else a
            span, a_dev = _span(a), _to(a, device)
            row_span, rows_dev = (_span(rows), _to(rows, device)) if by_dim else (span, a_dev)
            groups.append(_Group(sid, _to(idx, device), a_dev, span, rows_dev, row_span))
            start += counts[sid]
    one_each = bool((torch.bincount(token_pair, minlength=pairs.shape[0]) == 1).all())
    counts_b = dmask_h.sum(-1)
    uniform = int(counts_b[0]) if bool((counts_b == counts_b[0]).all()) else None
    owners = _Owners(B, _to(pairs // D, device), uniform)
    return _to(pairs, device), owners, _to(tokens, device), groups, one_each


DISTINCT_SHARE = 0.75
"""A symbol's tokens are evaluated once per distinct value (:func:`_distinct`) when the
distinct ones are at most this share of them."""


def _distinct(groups: list[_Group], par: Tensor) -> list[_Group]:
    """``groups`` with each symbol's identical tokens (same dimension, same parameters)
    evaluated once, for a batch whose elements share their points (``by_dim``).

    Many parameter sets of a few kernels on the same points (the starts of a multi-start,
    the kernels of a family) repeat addends: the same periodic factor in a dimension
    that several starts leave alone, a prior-mean start that is the same in every kernel.
    Their values are equal, so each distinct token is evaluated once (its ``sin``,
    ``exp``...) and gathered to its pairs (one copy) before the sum over addends.  A
    group keeps its plan where fewer than ``1 - DISTINCT_SHARE`` of its tokens repeat."""
    out = []
    for g in groups:
        key = torch.cat([g.rows[:, None].to(par.dtype), par.index_select(0, g.idx)], 1)
        uniq, inverse = torch.unique(key, dim=0, return_inverse=True)
        if uniq.shape[0] > DISTINCT_SHARE * key.shape[0]:
            out.append(g)
            continue
        first = torch.empty(uniq.shape[0], dtype=torch.long, device=par.device)
        first.scatter_(0, inverse, torch.arange(key.shape[0], device=par.device))
        rows = g.rows.index_select(0, first)
        out.append(g._replace(idx=g.idx.index_select(0, first), rows=rows,
                              row_span=_span(rows), inverse=inverse))  # fmt: skip
    return out


def _to(t: Tensor, device: torch.device) -> Tensor:
    """A host index tensor on ``device``: an asynchronous copy (from pageable memory the
    copy is staged before the call returns, so the host tensor may go at once)."""
    return t.to(device, non_blocking=True)


_HOST_COPIES: dict[int, tuple[weakref.ref[Tensor], Tensor]] = {}


def remember_host_copy(device_tensor: Tensor, host_tensor: Tensor) -> None:
    """Record that the CPU tensor ``host_tensor`` holds the values of ``device_tensor``.

    The index plan of an evaluation (which pairs and addends are active, grouped by
    symbol) is built on the host from the structure tensors ``symbols``,
    ``symbol_mask`` and ``dim_mask``; for tensors on another device it reads their
    recorded host copies instead of copying them back, which would wait for the device.
    :meth:`amorgp.lazy_kernels.PaddedBatch.to` records the copies of a batch it moves,
    so a training step on a GPU never synchronises in the evaluator.  The record lives as
    long as ``device_tensor``; CPU tensors need none (ignored).
    """
    if device_tensor.device.type == "cpu":
        return
    key = id(device_tensor)

    def forget(ref: weakref.ref[Tensor]) -> None:
        entry = _HOST_COPIES.get(key)
        if entry is not None and entry[0] is ref:
            del _HOST_COPIES[key]

    _HOST_COPIES[key] = (weakref.ref(device_tensor, forget), host_tensor.detach().cpu().clone())


def _has_host_copy(t: Tensor) -> bool:
    entry = _HOST_COPIES.get(id(t))
    return entry is not None and entry[0]() is t


def host_copy(t: Tensor) -> Tensor:
    """``t`` on the CPU: itself, its recorded copy (:func:`remember_host_copy`), or a copy
    read back from its device (a synchronisation)."""
    if t.device.type == "cpu":
        return t
    entry = _HOST_COPIES.get(id(t))
    if entry is not None and entry[0]() is t:
        return entry[1]
    return t.cpu()


def _tail(u: Tensor, v: Tensor) -> tuple[int, ...]:
    """Broadcast shape of ``u`` and ``v`` (same rank, sizes equal or 1) without the pair axis
    (``torch.broadcast_shapes`` costs more than a small evaluation's arithmetic)."""
    return tuple(max(a, b) for a, b in zip(u.shape[1:], v.shape[1:]))


def _same_points(X1: Tensor, X2: Tensor | None) -> bool:
    """``X2`` is ``X1``, or holds the same values by viewing the same memory the same way
    (then only when neither records a gradient: each view must receive its own)."""
    if X2 is X1:
        return True
    return (
        X2 is not None
        and not (X1.requires_grad or X2.requires_grad)
        and X2.data_ptr() == X1.data_ptr()
        and X2.dtype == X1.dtype
        and X2.shape == X1.shape
        and X2.stride() == X1.stride()
    )


def _rows(t: Tensor | None, g: _Group) -> Tensor | None:
    """Rows ``g.a`` of a per-pair quantity: a slice (view) for a consecutive run."""
    if t is None:
        return None
    span = g.row_span
    return t[span[0] : span[1] : span[2]] if span is not None else t.index_select(0, g.rows)


def _add_rows_(total: Tensor, g: _Group, val: Tensor) -> Tensor:
    """``total`` with ``val`` added to the rows ``g.a``: into a strided view for an
    arithmetic run, else ``index_add_``."""
    span = g.span
    if span is None:
        return total.index_add_(0, g.a, val)
    total[span[0] : span[1] : span[2]].add_(val)
    return total


def _shared(u: Tensor, v: Tensor, needs: set[str]) -> tuple[Tensor | None, ...]:
    """``r = u - v``, ``r^2`` and ``x x'`` per active pair, only those some symbol reads.

    ``r^2`` overwrites ``r`` when ``r`` itself is not read and no graph is recorded.
    """
    r = u - v if needs & {"r", "r2"} else None
    r2 = None
    if r is not None and "r2" in needs:
        r2 = r.mul_(r) if "r" not in needs and not r.requires_grad else r * r
    if "r" not in needs:
        r = None
    xx = u * v if "xx" in needs else None
    return r, r2, xx


def _fusable(tables: SymbolTables, groups: list[_Group], one_each: bool) -> bool:
    """Every active pair has exactly one addend (``one_each``, from :func:`_plan`) and every
    symbol present is of log form (:func:`~amorgp.lazy_kernels.tables.log_form`): the
    product over dimensions can be one ``exp`` of a sum (:func:`_product`)."""
    return one_each and all(
        log_form(cs) for g in groups if (cs := tables.compiled[g.sid]) is not None
    )


def _sum_addends(
    u: Tensor,
    v: Tensor,
    par: Tensor,
    tables: SymbolTables,
    groups: list[_Group],
    A: int,
    log: bool = False,
) -> Tensor:
    """``(A, *tail)`` sums over the addends of each active pair, one symbol id at a time
    (``log``: one addend per pair, of log form, and its logarithm).

    Without a recorded graph the sums accumulate in place; a symbol covering every pair
    in order starts the sum (no zero fill, no scatter).
    """
    compiled = [tables.compiled[g.sid] for g in groups]
    needs = set().union(*(cs.needs for cs in compiled if cs is not None))
    r, r2, xx = _shared(u, v, needs)
    tail = _tail(u, v)
    total: Tensor | None = None
    saved = False  # ``total`` is a symbol's value, which its backward reads: no in-place update
    for cs, g in zip(compiled, groups):
        assert cs is not None
        x = "x" in cs.needs
        val = evaluate_symbol(
            cs,
            _rows(u, g) if x else None,
            _rows(v, g) if x else None,
            par.index_select(0, g.idx),
            r=_rows(r, g) if "r" in cs.needs else None,
            r2=_rows(r2, g) if "r2" in cs.needs else None,
            xx=_rows(xx, g) if "xx" in cs.needs else None,
            log=log,
        )
        if g.inverse is not None:  # each distinct token evaluated once: to its pairs
            val = val.index_select(0, g.inverse)
        # evaluate_symbol returns a fresh tensor of the full shape: it may become the sum
        whole = g.span == (0, A, 1) and val.shape[1:] == tail
        if total is None and whole:
            total, saved = val, val.requires_grad
        elif total is None:
            total = torch.zeros((A, *tail), dtype=par.dtype, device=par.device)
            total = _add_rows_(total, g, val)
        elif saved:
            total, saved = (total + val if whole else total.index_add(0, g.a, val)), False
        else:  # neither add_ nor index_add_ needs ``total``'s values for backward
            total = total.add_(val) if whole else _add_rows_(total, g, val)
    assert total is not None
    return total


def _product(
    u: Tensor,
    v: Tensor,
    par: Tensor,
    tables: SymbolTables,
    groups: list[_Group],
    n_dims: _Owners,
    A: int,
    fused: bool = False,
) -> Tensor:
    """``(B, *tail)``: the addend sums of the ``A`` pairs, multiplied over each element's.

    Where every pair has one addend of log form (SE-ARD, a periodic kernel per column...)
    the product over dimensions is one ``exp`` of the summed logarithms: one ``exp`` per
    entry instead of one per dimension and no product pass (the same values up to
    rounding); ``fused`` (:func:`_fusable`) says so."""
    if fused:
        logs = _sum_addends(u, v, par, tables, groups, A, log=True)
        if n_dims.B != A:
            logs = _reduce(logs, n_dims, "sum")
        return _exp_(logs) if not logs.requires_grad else logs.exp()
    pair_sum = _sum_addends(u, v, par, tables, groups, A)
    if n_dims.B == A:  # one active dimension per element: nothing to multiply
        return pair_sum
    return _reduce(pair_sum, n_dims, "prod")


def _reduce(vals: Tensor, owners: _Owners, op: str) -> Tensor:
    """``(B, *tail)``: the ``(A, *tail)`` per-pair values summed (``op="sum"``) or
    multiplied (``"prod"``) into their batch elements (the pairs are element-major).

    With as many active pairs in every element, one reduction of a view; else
    ``index_add_`` / ``index_reduce``, both several times faster than ``segment_reduce``
    on the CPU."""
    tail = vals.shape[1:]
    if owners.uniform is not None:
        grouped = vals.reshape(owners.B, owners.uniform, *tail)
        return grouped.sum(1) if op == "sum" else grouped.prod(1)
    if op == "sum":
        out = torch.zeros((owners.B, *tail), dtype=vals.dtype, device=vals.device)
        return out.index_add(0, owners.owner, vals)
    out = torch.ones((owners.B, *tail), dtype=vals.dtype, device=vals.device)
    with warnings.catch_warnings():  # index_reduce is marked beta; its "prod" is stable
        warnings.simplefilter("ignore")
        return out.index_reduce(0, owners.owner, vals, "prod")


def _block_rows(u: Tensor, v: Tensor, A: int) -> tuple[tuple[int, ...], int]:
    """Broadcast shape without the pair axis, and rows of the first point axis per block."""
    tail = _tail(u, v)
    return tail, max(1, CHUNK_ELEMENTS // (A * math.prod(tail[1:])))


def _block(t: Tensor, s: int, rows: int) -> Tensor:
    """Rows ``s .. s + rows - 1`` of a per-pair quantity's first point axis (all of a
    broadcast axis of size 1)."""
    return t[:, s : s + rows] if t.shape[1] > 1 else t


def _product_by_blocks(
    u: Tensor,
    v: Tensor,
    par: Tensor,
    tables: SymbolTables,
    groups: list[_Group],
    n_dims: _Owners,
    A: int,
    fused: bool = False,
) -> Tensor:
    """:func:`_product` without a graph, by blocks of ``rows`` of the first point axis."""
    tail, rows = _block_rows(u, v, A)
    out = torch.empty((n_dims.B, *tail), dtype=par.dtype, device=par.device)
    for s in range(0, tail[0], rows):
        ub, vb = _block(u, s, rows), _block(v, s, rows)
        out[:, s : s + rows] = _product(ub, vb, par, tables, groups, n_dims, A, fused)
    return out


class _BlockwiseProduct(torch.autograd.Function):
    """:func:`_product` with a gradient for the parameters only, by blocks of points.

    The forward runs without a graph (:func:`_product_by_blocks`); the backward rebuilds
    one block's graph at a time and backpropagates the block's slice of the output
    gradient through it (activation checkpointing by block).  The whole-matrix graph,
    several temporaries the size of the kernel matrix per symbol that the backward reads
    back from memory, is never stored: the blocks' work stays in cache, three times
    faster on a 500-point, 8-dimensional batch on one CPU thread and far less memory.
    The output is bit for bit the plain formulation's; the parameter gradient sums the
    blocks' contributions, so it equals the plain one up to floating-point summation
    order.  Not twice differentiable (a second derivative raises).
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        par: Tensor,
        u: Tensor,
        v: Tensor,
        tables: SymbolTables,
        groups: list[_Group],
        n_dims: _Owners,
        A: int,
        fused: bool,
    ) -> Tensor:
        ctx.save_for_backward(par, u, v)
        ctx.plan = (tables, groups, n_dims, A, fused)  # type: ignore[attr-defined]
        return _product_by_blocks(u, v, par, tables, groups, n_dims, A, fused)

    @staticmethod
    @once_differentiable
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor | None, ...]:
        par, u, v = ctx.saved_tensors  # type: ignore[attr-defined]
        tables, groups, n_dims, A, fused = ctx.plan  # type: ignore[attr-defined]
        tail, rows = _block_rows(u, v, A)
        total = torch.zeros_like(par)
        leaf = par.detach().requires_grad_()
        with torch.enable_grad():
            for s in range(0, tail[0], rows):
                ub, vb = _block(u, s, rows), _block(v, s, rows)
                out = _product(ub, vb, leaf, tables, groups, n_dims, A, fused)
                (g,) = torch.autograd.grad(out, leaf, grad[:, s : s + rows])
                total += g
        return total, None, None, None, None, None, None, None


def _chunked(
    u: Tensor,
    v: Tensor,
    par: Tensor,
    tables: SymbolTables,
    groups: list[_Group],
    n_dims: _Owners,
    A: int,
    fused: bool = False,
) -> Tensor:
    """:func:`_product`, by blocks of the first point axis on the CPU.

    A block's working tensors (``CHUNK_ELEMENTS`` values over all pairs) stay in cache and
    are recycled by the allocator, where whole-matrix temporaries are fresh memory pages.
    Without a recorded graph the blocks are evaluated in turn; with a graph for the
    parameters only (Type-2 ML, the network's training loss) by :class:`_BlockwiseProduct`;
    a graph for the points (gradients to the inputs), a single block or fewer than
    :data:`BLOCKWISE_MIN_ELEMENTS` values record the plain whole-matrix graph, as does any
    other device.
    """
    tail, rows = _block_rows(u, v, A)
    if rows >= tail[0] or u.device.type != "cpu":
        return _product(u, v, par, tables, groups, n_dims, A, fused)
    if not torch.is_grad_enabled() or not (u.requires_grad or v.requires_grad or par.requires_grad):
        return _product_by_blocks(u, v, par, tables, groups, n_dims, A, fused)
    if u.requires_grad or v.requires_grad or A * math.prod(tail) < BLOCKWISE_MIN_ELEMENTS:
        return _product(u, v, par, tables, groups, n_dims, A, fused)
    out: Tensor = _BlockwiseProduct.apply(par, u, v, tables, groups, n_dims, A, fused)
    return out


def _se_ard(
    X1: Tensor,
    X2: Tensor,
    sym_h: Tensor,
    smask_h: Tensor,
    dmask_h: Tensor,
    params: Tensor,
    tables: SymbolTables,
) -> Tensor | None:
    """Kernel matrices of a batch whose every active dimension holds ``SE`` alone (SE-ARD),
    without a recorded graph, or ``None`` when it does not apply.

    ``K_b = prod_d s_bd exp(-(x_d - x'_d)^2 / (2 l_bd^2)) = exp(sum_d log s_bd - |u - u'|^2
    / 2)`` with the scaled points ``u = x / l_b``: the squared distances come from one
    ``cdist`` over all dimensions (differences, not the matrix-product expansion, so no
    cancellation: the values equal the dimension-wise ones to rounding, symmetric with an
    exact diagonal), and one ``exp`` per entry, instead of per-dimension temporaries
    (``docs/benchmarks/se-ard-speed.md``).  Used from two active
    dimensions on; with one, the symmetric packing evaluates half the pairs."""
    if torch.is_grad_enabled() and (X1.requires_grad or X2.requires_grad or params.requires_grad):
        return None
    if int(dmask_h.sum(-1).max()) < 2:  # one dimension: the packed evaluation, half the pairs
        return None
    se = [sid for sid, cs in enumerate(tables.compiled) if cs is not None and cs.name == "SE"]
    if not se:
        return None
    cs = tables.compiled[se[0]]
    assert cs is not None
    tok = smask_h & dmask_h[..., None]
    if not bool(((sym_h == se[0]) | ~tok).all()) or not bool((tok.sum(-1) == dmask_h).all()):
        return None
    B, D, L = sym_h.shape
    ls_slot = cs.factors[0][1][0]
    slot = tok.to(torch.uint8).argmax(-1)  # (B, D) the addend of each active dimension
    flat = (torch.arange(B * D).reshape(B, D) * L + slot).reshape(-1)
    dev = X1.device
    par = params.reshape(B * D * L, -1).index_select(0, _to(flat, dev)).reshape(B, D, -1)
    active = _to(dmask_h, dev)
    one = torch.ones((), dtype=par.dtype, device=dev)
    log_var = torch.where(active, par[..., 0], one).log().sum(-1)  # (B,)
    inv_ls = torch.where(active, par[..., ls_slot].reciprocal(), torch.zeros_like(one))
    U1 = X1 * inv_ls[:, None, :].to(X1.dtype)
    U2 = U1 if X2 is X1 else X2 * inv_ls[:, None, :].to(X2.dtype)
    d2 = torch.cdist(U1, U2, compute_mode="donot_use_mm_for_euclid_dist").square_()
    return _exp_(d2.mul_(-0.5).add_(log_var[:, None, None].to(d2.dtype)))


def evaluate_padded(
    X1: Tensor,
    X2: Tensor | None,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    tables: SymbolTables,
    dim_mask: Tensor,
    diag: bool,
) -> Tensor:
    """Kernel matrices ``(B, N, M)`` (or diagonals ``(B, N)`` when ``diag``) of a padded
    batch already validated (arguments as in
    :func:`~amorgp.lazy_kernels.dimwise.kernel_matrix_dimwise`, ``tables`` the vocabulary's
    :class:`~amorgp.lazy_kernels.tables.SymbolTables`, ``dim_mask`` the effective mask)."""
    B, N, D = X1.shape
    P = tables.max_params
    same = not diag and _same_points(X1, X2)
    # every element's points are one (expanded) tensor: r, r^2, x x' per dimension, not pair
    by_dim = X1.stride(0) == 0 and (diag or same or (X2 is not None and X2.stride(0) == 0))
    dmask_h = host_copy(dim_mask)
    sym_h, smask_h = host_copy(symbols), host_copy(symbol_mask)
    if not diag:
        fast = _se_ard(X1, X1 if X2 is None else X2, sym_h, smask_h, dmask_h, params, tables)
        if fast is not None:
            return fast
    by_dim = by_dim and int(dmask_h.sum()) > D
    pairs, n_dims, tokens, groups, one_each = _plan(
        sym_h, smask_h, dmask_h, tables.n_symbols, by_dim, X1.device
    )
    A = pairs.shape[0]
    # index_select (a row copy) rather than advanced indexing: several times faster on CPU
    par = params.reshape(-1, params.shape[-1]).index_select(0, tokens)[:, :P]  # (T, P)
    if by_dim:
        cols1 = X1[0].T.contiguous()  # (D, N)
    else:
        cols1 = X1.transpose(1, 2).reshape(B * D, N).index_select(0, pairs)  # (A, N)
    full: Tensor | None = None
    if diag:
        u, v = cols1, cols1
    elif same:
        # symmetric: each unordered pair once, as x_i against x_{(i + k) mod N} for the
        # offsets k = 0..N // 2 (strided views, no gather); unpacked at the end
        H, full = circulant_packing(N, X1.device)
        u = cols1[:, None, :]  # (A, 1, N)
        v = torch.cat([cols1, cols1], 1).unfold(1, N, 1)[:, :H, :]  # (A, H, N)
    else:
        assert X2 is not None
        M = X2.shape[1]
        u = cols1[:, :, None]
        if by_dim:
            v = X2[0].T.contiguous()[:, None, :]  # (D, 1, M)
        else:
            v = X2.transpose(1, 2).reshape(B * D, M).index_select(0, pairs)[:, None, :]
    if by_dim and not diag and u.device.type == "cpu" and not par.requires_grad:
        groups = _distinct(groups, par)
    out = _chunked(u, v, par, tables, groups, n_dims, A, _fusable(tables, groups, one_each))
    if full is None:
        return out
    return out.reshape(B, -1).index_select(1, full).reshape(B, N, N)
