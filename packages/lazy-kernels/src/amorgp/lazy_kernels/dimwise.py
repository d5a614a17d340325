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
slots of a simulated batch are padding.  The evaluation itself (and what it does without a
recorded graph: in-place updates, cache-sized blocks of points) is
:mod:`amorgp.lazy_kernels.evaluation`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from amorgp.core.errors import DataError
from amorgp.kernel_grammar import Vocabulary
from amorgp.lazy_kernels.batch import check_finite_inputs, check_params, check_symbol_layout
from amorgp.lazy_kernels.evaluation import (
    _has_host_copy,
    evaluate_padded,
    host_copy,
    remember_host_copy,
)
from amorgp.lazy_kernels.tables import symbol_tables

__all__ = ["kernel_diag_dimwise", "kernel_matrix_dimwise", "validate_dimwise"]


def _fail(msg: str) -> None:
    raise DataError(msg)


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

    The checks of the padded contract are those of :meth:`amorgp.lazy_kernels.PaddedBatch.validate`
    (:func:`~amorgp.lazy_kernels.batch.check_symbol_layout`,
    :func:`~amorgp.lazy_kernels.batch.check_params`), with one error type.

    Raises:
        DataError: naming the first problem found (a ``ValueError``).
    """
    B, D = _check_points(X1, X2)
    L = _check_symbols(symbols, symbol_mask, B, D)
    _check_params_layout(params, vocab, X1, B, D, L)
    dim_mask = _effective_dim_mask(dim_mask, symbol_mask, B, D)
    _check_values(X1, X2, symbols, symbol_mask, params, vocab, dim_mask)
    return dim_mask


def _check_points(X1: Tensor, X2: Tensor | None) -> tuple[int, int]:
    """Shapes, dtypes and devices of ``X1 (B, N, D)`` and ``X2 (B, M, D)``; returns ``(B, D)``."""
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
    return B, D


def _check_symbols(symbols: Tensor, symbol_mask: Tensor, B: int, D: int) -> int:
    """Shapes and dtypes of ``symbols``/``symbol_mask (B, D, L)``; returns ``L``."""
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
    return L


def _check_params_layout(
    params: Tensor, vocab: Vocabulary, X1: Tensor, B: int, D: int, L: int
) -> None:
    """Shape, slots, dtype and device of ``params (B, D, L, P)``."""
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


def _effective_dim_mask(dim_mask: Tensor | None, symbol_mask: Tensor, B: int, D: int) -> Tensor:
    """The given ``dim_mask`` (shape and dtype checked; its values against the addends by
    :func:`~amorgp.lazy_kernels.batch.check_symbol_layout`) or ``symbol_mask.any(-1)``."""
    if dim_mask is None:
        dim_mask = symbol_mask.any(-1)
    else:
        if not isinstance(dim_mask, Tensor) or tuple(dim_mask.shape) != (B, D):
            _fail(
                f"dim_mask must have shape ({B}, {D}), got {tuple(getattr(dim_mask, 'shape', ()))}"
            )
        if dim_mask.dtype != torch.bool:
            _fail(f"dim_mask must be bool, got {dim_mask.dtype}")
    return dim_mask


def _check_values(
    X1: Tensor,
    X2: Tensor | None,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    vocab: Vocabulary,
    dim_mask: Tensor,
) -> None:
    """Ids, addends and dimensions (the batch's checks), finite inputs, valid parameters."""
    check_symbol_layout(symbols, symbol_mask, dim_mask, vocab)
    for name, X in (("X1", X1), ("X2", X2)):
        if X is not None:
            check_finite_inputs(X, name, "in active dimensions", dim_mask=dim_mask)
    check_params(params, symbols, symbol_mask, vocab)


def _default_dim_mask(symbol_mask: Tensor) -> Tensor:
    """``symbol_mask.any(-1)``, with its host copy recorded where ``symbol_mask`` has one
    (:func:`~amorgp.lazy_kernels.evaluation.remember_host_copy`): no read-back."""
    dim_mask = symbol_mask.any(-1)
    if symbol_mask.device.type != "cpu":
        recorded = host_copy(symbol_mask) if _has_host_copy(symbol_mask) else None
        if recorded is not None:
            remember_host_copy(dim_mask, recorded.any(-1))
    return dim_mask


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
        DataError: on invalid input when ``validate`` is True (see :func:`validate_dimwise`).
    """
    if validate:
        dim_mask = validate_dimwise(X1, X2, symbols, symbol_mask, params, vocab, dim_mask)
    elif dim_mask is None:
        dim_mask = _default_dim_mask(symbol_mask)
    tables = symbol_tables(vocab, symbols.device)
    return evaluate_padded(X1, X2, symbols, symbol_mask, params, tables, dim_mask, diag=False)


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
        DataError: on invalid input when ``validate`` is True.
    """
    if validate:
        dim_mask = validate_dimwise(X, None, symbols, symbol_mask, params, vocab, dim_mask)
    elif dim_mask is None:
        dim_mask = _default_dim_mask(symbol_mask)
    tables = symbol_tables(vocab, symbols.device)
    return evaluate_padded(X, None, symbols, symbol_mask, params, tables, dim_mask, diag=True)
