"""Batched heterogeneous evaluation of dimension-wise kernels on padded batches.

A batch element ``b`` carries its own dimension-wise structure

.. math::

    K_b(x, x') = \\prod_{d:\\,\\mathrm{dim\\_mask}[b, d]}
                 \\sum_{l:\\,\\mathrm{symbol\\_mask}[b, d, l]}
                 k_{s_{bdl}}(x_d, x'_d;\\ \\theta_{bdl}),

where ``k_s = s^2 kt_A kt_B`` for a product symbol ``A*B`` (one variance) and
``k_LIN = s^2 x x' + c^2`` for LIN alone (see :mod:`amorgp.kernel_grammar.registry`).

Padded batch contract (``B`` batch, ``N``/``M`` points, ``D`` dimensions,
``L`` addends, ``P`` parameter slots):

* ``X1 (B, N, D)``, ``X2 (B, M, D)`` floating inputs;
* ``symbols (B, D, L)`` integer vocabulary ids (``0`` = padding) and
  ``symbol_mask (B, D, L)`` bool;
* ``params (B, D, L, P)`` constrained (positive) parameters, slot order of each
  symbol's ``BaseSymbol.params`` (variance first), unused slots arbitrary;
* ``dim_mask (B, D)`` bool, default ``symbol_mask.any(-1)``.  A padded dimension
  contributes the factor 1 and a padded addend contributes 0.  Padded *points*
  are evaluated like any other point; mask them downstream.

Algorithm (no Python loop over batch, dimension or addend; the only Python loop is
over the vocabulary symbols present): the small structure tensors are read on the
host once and turned into an index plan (active ``(b, d)`` pairs, active tokens
``(b, d, l)`` grouped by symbol id).  Per active pair the shared quantities
``r = x - x'``, ``r^2`` and ``x x'`` are formed once (only those the symbols
present need); each symbol group then gathers its rows with ``index_select``,
evaluates ``s^2 kt_A kt_B`` for all its tokens at once (stationary factors and the
variance fused into one ``exp``) and adds them into its pair with ``index_add``.
Pairs are multiplied into their batch element with ``segment_reduce(prod)``.
When ``X2 is X1`` (or, with no gradient to the inputs, ``X2`` views the same memory
in the same layout, e.g. ``X[None]`` twice) only one entry per unordered point pair is
evaluated: the pairs
``(i, (i + k) mod N)`` for offsets ``k = 0..N // 2`` are strided views of the
columns (circulant packing, ``(N // 2 + 1) N`` entries instead of ``N^2``), and
the matrix is unpacked with one gather at the end, exactly symmetric.  Memory is
``O((T + #pairs) N M)`` instead of ``O(B D L N M)``, which matters because most
slots of a simulated batch are padding.
"""

from __future__ import annotations

import math
from functools import cache
from typing import NamedTuple

import torch
from torch import Tensor

from amorgp.kernel_grammar import Vocabulary
from amorgp.lazy_kernels.tables import SymbolTables, evaluate_symbol, symbol_tables

__all__ = ["kernel_diag_dimwise", "kernel_matrix_dimwise", "validate_dimwise"]

CHUNK_ELEMENTS = 1 << 18
"""Values per block of the point axis (over all active pairs) without a recorded graph."""


def _fail(msg: str) -> None:
    raise ValueError(msg)


def validate_dimwise(
    X1: Tensor,
    X2: Tensor | None,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    vocab: Vocabulary,
    dim_mask: Tensor | None = None,
) -> Tensor:
    """Check a padded batch against the contract and return the effective ``dim_mask``.

    Checks shapes, dtypes and devices; that inputs are finite in active dimensions;
    that used parameters are finite and positive; that ids are known; that no symbol
    sits in a padded dimension (a structure using a dimension the data lacks) and
    that every active dimension has an addend and every batch element an active
    dimension.

    Args:
        X1: ``(B, N, D)``.
        X2: ``(B, M, D)`` or None.
        symbols: ``(B, D, L)`` integer ids.
        symbol_mask: ``(B, D, L)`` bool.
        params: ``(B, D, L, P)`` with ``P >= vocab.max_params``.
        vocab: the vocabulary the ids refer to.
        dim_mask: ``(B, D)`` bool or None.

    Returns:
        ``dim_mask (B, D)`` bool (``symbol_mask.any(-1)`` when not given).

    Raises:
        ValueError: naming the first problem found.
    """
    if not isinstance(X1, Tensor) or X1.ndim != 3:
        _fail(f"X1 must be a (B, N, D) tensor, got shape {tuple(getattr(X1, 'shape', ()))}")
    if not X1.is_floating_point():
        _fail(f"X1 must be floating point, got {X1.dtype}")
    B, _, D = X1.shape
    if X2 is not None:
        if not isinstance(X2, Tensor) or X2.ndim != 3:
            _fail(f"X2 must be a (B, M, D) tensor, got shape {tuple(getattr(X2, 'shape', ()))}")
        if X2.shape[0] != B or X2.shape[2] != D:
            _fail(f"X1 {tuple(X1.shape)} and X2 {tuple(X2.shape)} disagree in batch or dimension")
        if X2.dtype != X1.dtype or X2.device != X1.device:
            _fail(
                f"X1 and X2 differ in dtype/device: {X1.dtype}/{X1.device} vs {X2.dtype}/{X2.device}"
            )
    if not isinstance(symbols, Tensor) or symbols.ndim != 3:
        _fail(
            f"symbols must be a (B, D, L) tensor, got shape {tuple(getattr(symbols, 'shape', ()))}"
        )
    if symbols.dtype.is_floating_point or symbols.dtype == torch.bool:
        _fail(f"symbols must hold integer ids, got {symbols.dtype}")
    if symbols.shape[0] != B:
        _fail(f"symbols has batch size {symbols.shape[0]} but X1 has {B}")
    if symbols.shape[1] > D:
        _fail(
            f"the structures use {symbols.shape[1]} dimensions but the data has only {D} "
            "(a dimension index exceeds the data)"
        )
    if symbols.shape[1] != D:
        _fail(f"symbols has {symbols.shape[1]} dimensions but the data has {D}; pad to match")
    L = symbols.shape[2]
    if not isinstance(symbol_mask, Tensor) or symbol_mask.shape != symbols.shape:
        _fail(
            f"symbol_mask must have the shape of symbols {tuple(symbols.shape)}, "
            f"got {tuple(getattr(symbol_mask, 'shape', ()))}"
        )
    if symbol_mask.dtype != torch.bool:
        _fail(f"symbol_mask must be bool, got {symbol_mask.dtype}")
    P = vocab.max_params
    if not isinstance(params, Tensor) or params.ndim != 4 or tuple(params.shape[:3]) != (B, D, L):
        _fail(
            f"params must have shape (B, D, L, P) = ({B}, {D}, {L}, >= {P}), "
            f"got {tuple(getattr(params, 'shape', ()))}"
        )
    if params.shape[3] < P:
        _fail(f"params has {params.shape[3]} slots but vocabulary {vocab.name!r} needs {P}")
    if params.dtype != X1.dtype or params.device != X1.device:
        _fail(f"params ({params.dtype}, {params.device}) must match X1 ({X1.dtype}, {X1.device})")
    if dim_mask is None:
        dim_mask = symbol_mask.any(-1)
    else:
        if not isinstance(dim_mask, Tensor) or tuple(dim_mask.shape) != (B, D):
            _fail(
                f"dim_mask must have shape ({B}, {D}), got {tuple(getattr(dim_mask, 'shape', ()))}"
            )
        if dim_mask.dtype != torch.bool:
            _fail(f"dim_mask must be bool, got {dim_mask.dtype}")
        stray = symbol_mask & ~dim_mask[..., None]
        if bool(stray.any()):
            b, d, _ = (int(v) for v in stray.nonzero()[0])
            _fail(
                f"batch element {b} places a symbol in dimension {d}, which its data does not "
                "have (dim_mask is False there; a dimension index exceeds the data)"
            )
    empty_dim = dim_mask & ~symbol_mask.any(-1)
    if bool(empty_dim.any()):
        b, d = (int(v) for v in empty_dim.nonzero()[0])
        _fail(
            f"batch element {b}: active dimension {d} has no addend (its kernel factor would be 0)"
        )
    no_dim = ~dim_mask.any(-1)
    if bool(no_dim.any()):
        _fail(f"batch element {int(no_dim.nonzero()[0, 0])} has no active dimension")
    ids = symbols[symbol_mask]
    bad = (ids < 1) | (ids > len(vocab))
    if bool(bad.any()):
        _fail(
            f"unknown symbol id {int(ids[bad][0])} under symbol_mask; vocabulary {vocab.name!r} "
            f"has ids 1..{len(vocab)} (0 is padding)"
        )
    for name, X in (("X1", X1), ("X2", X2)):
        if X is None:
            continue
        cols = X.transpose(1, 2)[dim_mask]  # (active pairs, N)
        if not bool(torch.isfinite(cols).all()):
            _fail(f"{name} contains NaN or infinite values in active dimensions")
    tables = symbol_tables(vocab, symbols.device)
    used = tables.slot_mask[symbols.clamp(0, len(vocab))] & symbol_mask[..., None]  # (B, D, L, P)
    vals = params[..., :P][used]
    if not bool(torch.isfinite(vals).all()):
        _fail("params contains NaN or infinite values in used slots")
    if not bool((vals > 0).all()):
        _fail("params must be positive in every used slot (got a value <= 0)")
    return dim_mask


@cache
def _circulant(N: int, device: torch.device) -> tuple[int, Tensor]:
    """Circulant packing of a symmetric ``(N, N)`` matrix: ``H = N // 2 + 1`` offsets.

    Entry ``(k, i)`` of the packed ``(H, N)`` array holds the pair ``(i, (i + k) mod N)``;
    every unordered pair appears (at least) once.  Returns ``H`` and ``full (N * N,)``,
    the packed position of each matrix entry ``(i, j)`` (symmetric: ``(i, j)`` and
    ``(j, i)`` read the same position).

    The cached index tensor is built outside inference mode: a tensor created under
    ``torch.inference_mode`` cannot be saved for backward, and the cache outlives the
    call that filled it.
    """
    with torch.inference_mode(False):
        i = torch.arange(N, device=device)[:, None]
        j = torch.arange(N, device=device)[None, :]
        k = (j - i) % N
        fwd = k * N + i  # pair stored at offset k from row i
        bwd = ((N - k) % N) * N + j  # same pair stored at offset N - k from row j
        tie = k * N + torch.minimum(i, j)  # k == N - k (even N): both stored; pick one
        full = torch.where(2 * k < N, fwd, torch.where(2 * k > N, bwd, tie))
    return N // 2 + 1, full.reshape(-1)


class _Group(NamedTuple):
    """The tokens of one symbol id: their positions ``idx`` in the token list, their
    pairs ``a``, and ``span = (first, stop)`` when ``a`` is the consecutive run
    ``first..stop - 1`` (the per-pair quantities are then sliced, not gathered)."""

    sid: int
    idx: Tensor
    a: Tensor
    span: tuple[int, int] | None


def _plan(
    symbols: Tensor, symbol_mask: Tensor, dim_mask: Tensor, n_symbols: int
) -> tuple[Tensor, Tensor, Tensor, list[_Group]]:
    """Index plan of a padded batch, built from the small structure tensors on the host.

    Returns:
        ``pairs (A,)`` flat ``b * D + d`` of the active dimensions (b-major),
        ``n_dims (B,)`` active dimensions per batch element,
        ``tokens (T,)`` flat ``(b * D + d) * L + l`` of the active addends, and per
        symbol id present its :class:`_Group` (all on the input's device).
    """
    device = symbols.device
    B, D, L = symbols.shape
    sym_h, smask_h, dmask_h = symbols.cpu(), symbol_mask.cpu(), dim_mask.cpu()
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
            run = bool((a.diff() == 1).all())
            span = (int(a[0]), int(a[-1]) + 1) if run else None
            groups.append(_Group(sid, idx.to(device), a.to(device), span))
            start += counts[sid]
    return pairs.to(device), dmask_h.sum(-1).to(device), tokens.to(device), groups


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
    return t[g.span[0] : g.span[1]] if g.span is not None else t.index_select(0, g.a)


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


def _sum_addends(
    u: Tensor, v: Tensor, par: Tensor, tables: SymbolTables, groups: list[_Group], A: int
) -> Tensor:
    """``(A, *tail)`` sums over the addends of each active pair, one symbol id at a time.

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
        )
        # evaluate_symbol returns a fresh tensor of the full shape: it may become the sum
        whole = g.span == (0, A) and val.shape[1:] == tail
        if total is None and whole:
            total, saved = val, val.requires_grad
        elif total is None:
            total = torch.zeros((A, *tail), dtype=par.dtype, device=par.device)
            total = total.index_add_(0, g.a, val)
        elif saved:
            total, saved = (total + val if whole else total.index_add(0, g.a, val)), False
        else:  # neither add_ nor index_add_ needs ``total``'s values for backward
            total = total.add_(val) if whole else total.index_add_(0, g.a, val)
    assert total is not None
    return total


def _product(
    u: Tensor, v: Tensor, par: Tensor, tables: SymbolTables, groups: list[_Group], n_dims: Tensor
) -> Tensor:
    """``(B, *tail)``: the addend sums of each pair, multiplied over each element's pairs."""
    A = u.shape[0]
    pair_sum = _sum_addends(u, v, par, tables, groups, A)
    if n_dims.shape[0] == A:  # one active dimension per element: nothing to multiply
        return pair_sum
    return torch.segment_reduce(pair_sum, "prod", lengths=n_dims, unsafe=True, initial=1.0)


def _chunked(
    u: Tensor, v: Tensor, par: Tensor, tables: SymbolTables, groups: list[_Group], n_dims: Tensor
) -> Tensor:
    """:func:`_product`, by blocks of the first point axis when no graph is recorded.

    A block's working tensors (``CHUNK_ELEMENTS`` values over all pairs) stay in cache and
    are recycled by the allocator, where whole-matrix temporaries are fresh memory pages.
    """
    tail = _tail(u, v)
    A, B = u.shape[0], n_dims.shape[0]
    rows = max(1, CHUNK_ELEMENTS // (A * math.prod(tail[1:])))
    tracked = torch.is_grad_enabled() and (u.requires_grad or v.requires_grad or par.requires_grad)
    if tracked or rows >= tail[0]:
        return _product(u, v, par, tables, groups, n_dims)
    out = torch.empty((B, *tail), dtype=par.dtype, device=par.device)
    for s in range(0, tail[0], rows):
        ub, vb = (t[:, s : s + rows] if t.shape[1] > 1 else t for t in (u, v))
        out[:, s : s + rows] = _product(ub, vb, par, tables, groups, n_dims)
    return out


def _evaluate(
    X1: Tensor,
    X2: Tensor | None,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    tables: SymbolTables,
    dim_mask: Tensor,
    diag: bool,
) -> Tensor:
    B, N, D = X1.shape
    P = tables.max_params
    pairs, n_dims, tokens, groups = _plan(symbols, symbol_mask, dim_mask, tables.n_symbols)
    # index_select (a row copy) rather than advanced indexing: several times faster on CPU
    par = params.reshape(-1, params.shape[-1]).index_select(0, tokens)[:, :P]  # (T, P)
    cols1 = X1.transpose(1, 2).reshape(B * D, N).index_select(0, pairs)  # (A, N)
    full: Tensor | None = None
    if diag:
        u, v = cols1, cols1
    elif _same_points(X1, X2):
        # symmetric: each unordered pair once, as x_i against x_{(i + k) mod N} for the
        # offsets k = 0..N // 2 (strided views, no gather); unpacked at the end
        H, full = _circulant(N, X1.device)
        u = cols1[:, None, :]  # (A, 1, N)
        v = torch.cat([cols1, cols1], 1).unfold(1, N, 1)[:, :H, :]  # (A, H, N)
    else:
        assert X2 is not None
        M = X2.shape[1]
        u = cols1[:, :, None]
        v = X2.transpose(1, 2).reshape(B * D, M).index_select(0, pairs)[:, None, :]  # (A, 1, M)
    out = _chunked(u, v, par, tables, groups, n_dims)
    if full is None:
        return out
    return out.reshape(B, -1).index_select(1, full).reshape(B, N, N)


def kernel_matrix_dimwise(
    X1: Tensor,
    X2: Tensor,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    vocab: Vocabulary,
    dim_mask: Tensor | None = None,
    *,
    validate: bool = True,
) -> Tensor:
    """Kernel matrices of a padded batch of dimension-wise structures.

    ``K[b] = prod_{d active} sum_{l active} k_{symbols[b,d,l]}(X1[b,:,d], X2[b,:,d]; params[b,d,l])``
    (see the module docstring for the contract and the algorithm).

    Args:
        X1: ``(B, N, D)`` inputs.
        X2: ``(B, M, D)`` inputs (pass ``X1`` again for the training covariance).
        symbols: ``(B, D, L)`` int64 vocabulary ids, ``0`` = padding.
        symbol_mask: ``(B, D, L)`` bool, True for real addends.
        params: ``(B, D, L, P)`` positive parameters in each symbol's slot order.
        vocab: vocabulary the ids refer to.
        dim_mask: ``(B, D)`` bool, True for real dimensions; default
            ``symbol_mask.any(-1)``.
        validate: check the input (shapes, NaN/Inf, positivity, ids, dimensions).
            ``False`` skips every data-dependent check (no host synchronisation for
            the checks) for hot paths whose input is known to be valid.

    Returns:
        ``(B, N, M)`` kernel matrices, dtype of ``X1``; differentiable w.r.t. ``X1``,
        ``X2`` and ``params``.

    Raises:
        ValueError: on invalid input when ``validate`` is True (see :func:`validate_dimwise`).
    """
    if validate:
        dim_mask = validate_dimwise(X1, X2, symbols, symbol_mask, params, vocab, dim_mask)
    elif dim_mask is None:
        dim_mask = symbol_mask.any(-1)
    tables = symbol_tables(vocab, symbols.device)
    return _evaluate(X1, X2, symbols, symbol_mask, params, tables, dim_mask, diag=False)


def kernel_diag_dimwise(
    X: Tensor,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    vocab: Vocabulary,
    dim_mask: Tensor | None = None,
    *,
    validate: bool = True,
) -> Tensor:
    """Diagonals ``k_b(x_n, x_n)`` of the kernel matrices, without forming them.

    Args:
        X: ``(B, N, D)`` inputs.
        symbols, symbol_mask, params, vocab, dim_mask, validate: as in
            :func:`kernel_matrix_dimwise`.

    Returns:
        ``(B, N)`` diagonals, equal to ``kernel_matrix_dimwise(X, X, ...)`` diagonals.

    Raises:
        ValueError: on invalid input when ``validate`` is True.
    """
    if validate:
        dim_mask = validate_dimwise(X, None, symbols, symbol_mask, params, vocab, dim_mask)
    elif dim_mask is None:
        dim_mask = symbol_mask.any(-1)
    tables = symbol_tables(vocab, symbols.device)
    return _evaluate(X, None, symbols, symbol_mask, params, tables, dim_mask, diag=True)
