"""Kernel-structure search moves restricted to the dimension-wise space.

The grammar of Duvenaud et al. (2013, "Structure discovery in nonparametric
regression through compositional kernel search") expands a structure ``S`` by

* ``S -> S + B``: add a base kernel,
* ``S -> S x B``: multiply a sub-expression by a base kernel,
* ``B -> B'``: replace a base kernel by another one.

Restricted to :class:`DimWiseStructure` (a product over dimensions of sums of
base symbols from a vocabulary) the moves are:

==============  ============================================================================
``add``         add symbol ``B`` as a new addend of dimension ``d``, or of every dimension
                (``dim=None``) at once
``multiply``    multiply an elementary addend ``A`` of dimension ``d`` by an elementary kernel
                ``E``; allowed when ``A*E`` is a 2-gram symbol of the vocabulary
                (``A != E``); a 2-gram addend cannot be multiplied (3 factors)
``replace``     replace addend ``l`` of dimension ``d`` by another symbol ``B'``
==============  ============================================================================

Neighbours are deduplicated by canonical form (two moves that give the same
structure, e.g. ``SE -> SE + PER`` and ``PER`` added to the only dimension, count
once) and never include the structure itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from amorgp.kernel_grammar.dimwise import DimWiseStructure
from amorgp.kernel_grammar.registry import PAPER_VOCABULARY, Vocabulary, canonical_symbol_name

__all__ = ["Move", "moves", "neighbours"]


@dataclass(frozen=True)
class Move:
    """One grammar move.

    Attributes:
        kind: ``"add"``, ``"multiply"`` or ``"replace"``.
        dim: input dimension, or ``None`` for "every dimension" (``add`` only).
        addend: index of the addend changed (``multiply``/``replace``), else ``None``.
        symbol: the symbol added, the elementary factor multiplied in, or the new symbol.
    """

    kind: str
    dim: int | None
    addend: int | None
    symbol: str

    def __str__(self) -> str:
        where = "every dimension" if self.dim is None else f"dimension {self.dim}"
        if self.kind == "add":
            return f"add {self.symbol} to {where}"
        if self.kind == "multiply":
            return f"multiply addend {self.addend} of {where} by {self.symbol}"
        return f"replace addend {self.addend} of {where} by {self.symbol}"


def _with_dim(s: DimWiseStructure, d: int, addends: tuple[str, ...]) -> DimWiseStructure:
    return DimWiseStructure((*s.dims[:d], addends, *s.dims[d + 1 :]))


def moves(
    structure: DimWiseStructure,
    vocab: Vocabulary = PAPER_VOCABULARY,
    *,
    max_addends: int | None = None,
) -> list[tuple[Move, DimWiseStructure]]:
    """Every move from ``structure`` and its result, deduplicated by the result.

    Args:
        structure: the current structure (its symbols must be in ``vocab``).
        vocab: the symbols moves may use.
        max_addends: if given, ``add`` moves that would exceed this many addends in a
            dimension are skipped (e.g. the ``L`` of an encoder).

    Returns:
        ``(move, result)`` pairs in a deterministic order (adds, multiplies, replaces;
        the first move reaching a result is kept); results are unique and differ from
        ``structure``.

    Raises:
        ValueError: ``structure`` is not a :class:`DimWiseStructure`, uses a symbol not
            in ``vocab``, or ``max_addends < 1``.
    """
    if not isinstance(structure, DimWiseStructure):
        raise ValueError(f"expected a DimWiseStructure, got {type(structure).__name__}")
    structure.check_vocabulary(vocab)
    if max_addends is not None and max_addends < 1:
        raise ValueError(f"max_addends must be a positive integer, got {max_addends!r}")
    limit = max_addends if max_addends is not None else float("inf")
    seen = {structure}
    out: list[tuple[Move, DimWiseStructure]] = []

    def emit(move: Move, result: DimWiseStructure) -> None:
        if result not in seen:
            seen.add(result)
            out.append((move, result))

    dims = structure.dims
    # S -> S + B
    for b in vocab.symbols:
        for d, addends in enumerate(dims):
            if len(addends) < limit:
                emit(Move("add", d, None, b), _with_dim(structure, d, (*addends, b)))
        if structure.n_dims > 1 and all(len(a) < limit for a in dims):
            emit(Move("add", None, None, b), DimWiseStructure(tuple((*a, b) for a in dims)))
    # S -> S x B  (elementary addend times an elementary kernel, staying a 2-gram symbol)
    for d, addends in enumerate(dims):
        for i, a in enumerate(addends):
            if "*" in a:
                continue
            for e in vocab.elementary:
                if e == a:
                    continue
                prod = canonical_symbol_name((a, e))
                if prod in vocab.symbols:
                    new = (*addends[:i], prod, *addends[i + 1 :])
                    emit(Move("multiply", d, i, e), _with_dim(structure, d, new))
    # B -> B'
    for d, addends in enumerate(dims):
        for i, a in enumerate(addends):
            for b in vocab.symbols:
                if b != a:
                    new = (*addends[:i], b, *addends[i + 1 :])
                    emit(Move("replace", d, i, b), _with_dim(structure, d, new))
    return out


def neighbours(
    structure: DimWiseStructure,
    vocab: Vocabulary = PAPER_VOCABULARY,
    *,
    max_addends: int | None = None,
) -> list[DimWiseStructure]:
    """The distinct structures one grammar move away (see :func:`moves`).

    Example:
        >>> from amorgp.kernel_grammar import DimWiseStructure
        >>> [str(s) for s in neighbours(DimWiseStructure((("SE",),)))][:3]
        ['(SE + SE)@0', '(SE + LIN)@0', '(SE + PER)@0']
    """
    return [result for _, result in moves(structure, vocab, max_addends=max_addends)]
