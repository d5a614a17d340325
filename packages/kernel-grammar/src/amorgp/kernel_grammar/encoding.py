"""Structures as padded integer arrays: :func:`encode` and its inverse :func:`decode`.

``symbols (B, D, L)`` holds vocabulary ids (``1..V``; ``0`` is padding) of addend ``l``
of dimension ``d`` of structure ``b``, ``symbol_mask`` marks the real addends.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from amorgp.kernel_grammar.dimwise import DimWiseStructure
from amorgp.kernel_grammar.registry import Vocabulary

__all__ = ["decode", "encode"]


def _as_int(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def encode(
    structures: Sequence[DimWiseStructure],
    vocab: Vocabulary,
    max_dims: int | None = None,
    max_addends: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Encode structures as padded integer arrays.

    Args:
        structures: ``B`` structures.
        vocab: vocabulary giving the ids (``1..V``; ``0`` is padding).
        max_dims: ``D``; default the largest ``n_dims``.
        max_addends: ``L``; default the largest number of addends in any dimension.

    Returns:
        ``symbols (B, D, L)`` int64 with ``symbols[b, d, l]`` the id of addend ``l``
        of dimension ``d`` (0 where padded), and ``symbol_mask (B, D, L)`` bool.

    Raises:
        ValueError: a structure longer than ``max_dims``/``max_addends``, a symbol not
            in ``vocab``, or an element that is not a :class:`DimWiseStructure`.
    """
    max_dims = _as_int(max_dims, "max_dims")
    max_addends = _as_int(max_addends, "max_addends")
    structures = list(structures)
    for b, s in enumerate(structures):
        if not isinstance(s, DimWiseStructure):
            raise ValueError(
                f"structure {b} is a {type(s).__name__}, not a DimWiseStructure "
                "(use DimWiseStructure.parse(text, n_dims))"
            )
    D = max_dims if max_dims is not None else max((s.n_dims for s in structures), default=0)
    L = (
        max_addends
        if max_addends is not None
        else max((s.max_addends for s in structures), default=0)
    )
    symbols = np.zeros((len(structures), D, L), dtype=np.int64)
    for b, s in enumerate(structures):
        if s.n_dims > D:
            raise ValueError(f"structure {b} ({s}) has {s.n_dims} dimensions > max_dims={D}")
        if s.max_addends > L:
            raise ValueError(
                f"structure {b} ({s}) has {s.max_addends} addends in one dimension "
                f"> max_addends={L}"
            )
        try:
            s.check_vocabulary(vocab)
        except ValueError as err:
            raise ValueError(f"structure {b}: {err}") from None
        for d, addends in enumerate(s.dims):
            symbols[b, d, : len(addends)] = [vocab.id(n) for n in addends]
    return symbols, symbols > 0


def decode(
    symbols: np.ndarray, symbol_mask: np.ndarray, vocab: Vocabulary
) -> list[DimWiseStructure]:
    """Inverse of :func:`encode`.

    Args:
        symbols: ``(B, D, L)`` integer ids.
        symbol_mask: ``(B, D, L)`` bool; ids where it is False are ignored.  A
            dimension without any active addend is padding and must come after every
            real dimension.
        vocab: the vocabulary the ids refer to.

    Returns:
        ``B`` structures.

    Raises:
        ValueError: wrong shapes or dtypes, an active id outside ``1..V``, a structure
            without dimensions, or a padded dimension before a real one.
    """
    symbols = np.asarray(symbols)
    symbol_mask = np.asarray(symbol_mask)
    if symbols.ndim != 3:
        raise ValueError(f"symbols must have shape (B, D, L), got shape {symbols.shape}")
    if symbol_mask.shape != symbols.shape:
        raise ValueError(
            f"symbol_mask shape {symbol_mask.shape} differs from symbols shape {symbols.shape}"
        )
    if not np.issubdtype(symbols.dtype, np.integer):
        raise ValueError(f"symbols must be integers, got dtype {symbols.dtype}")
    if symbol_mask.dtype != np.bool_:
        raise ValueError(f"symbol_mask must be bool, got dtype {symbol_mask.dtype}")
    active = symbols[symbol_mask]
    if active.size and (active.min() < 1 or active.max() > len(vocab)):
        bad = active[(active < 1) | (active > len(vocab))][0]
        raise ValueError(
            f"symbol id {int(bad)} under the mask is outside 1..{len(vocab)} "
            f"(vocabulary {vocab.name!r}; 0 is padding)"
        )
    present: np.ndarray = np.asarray(symbol_mask.any(axis=-1))  # (B, D)
    n_dims = np.where(present.any(-1), symbols.shape[1] - np.argmax(present[:, ::-1], -1), 0)
    names = ("", *vocab.symbols)
    ids = np.where(symbol_mask, symbols, 0).tolist()
    out = []
    for b in range(symbols.shape[0]):
        n = int(n_dims[b])
        if n == 0:
            raise ValueError(f"structure {b} has no active symbol")
        if not present[b, :n].all():
            gap = int((~present[b, :n]).nonzero()[0][0])
            raise ValueError(
                f"structure {b}: dimension {gap} has no active symbol but a later one has; "
                "padded dimensions must come last"
            )
        out.append(DimWiseStructure(tuple(tuple(names[i] for i in row if i) for row in ids[b][:n])))
    return out
