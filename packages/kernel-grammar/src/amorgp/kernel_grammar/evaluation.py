"""The paper's evaluation set of kernel structures (Bitzer et al. 2023, Appendix A).

24 structures: 6 single symbols, 6 sums of 2, 6 sums of 3 and 6 sums of 4
distinct base symbols, each drawn without replacement from the vocabulary (the
paper: SE, LIN, PER, SE*LIN, SE*PER, LIN*PER), the same sum in every input
dimension.  A structure is returned as a :class:`StructureTemplate` (the sum of
one dimension) and becomes a :class:`DimWiseStructure` for data with ``D``
inputs via ``template.broadcast(D)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

from amorgp.kernel_grammar.dimwise import DimWiseStructure, symbol_sort_key
from amorgp.kernel_grammar.registry import PAPER_VOCABULARY, Vocabulary, base_symbol

__all__ = ["StructureTemplate", "paper_evaluation_set"]


@dataclass(frozen=True)
class StructureTemplate:
    """The sum of base symbols used in every input dimension.

    Args:
        symbols: base-symbol names (stored canonical and sorted like a dimension of
            :class:`DimWiseStructure`).
    """

    symbols: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.symbols, str) or len(self.symbols) == 0:
            raise ValueError(
                f"a template needs a non-empty sequence of symbol names, got {self.symbols!r}"
            )
        names = sorted((base_symbol(s).name for s in self.symbols), key=symbol_sort_key)
        object.__setattr__(self, "symbols", tuple(names))

    def broadcast(self, n_dims: int) -> DimWiseStructure:
        """The structure with this sum in each of ``n_dims`` input dimensions."""
        if isinstance(n_dims, bool) or not isinstance(n_dims, int) or n_dims < 1:
            raise ValueError(f"n_dims must be a positive integer, got {n_dims!r}")
        return DimWiseStructure(tuple(self.symbols for _ in range(n_dims)))

    def __len__(self) -> int:
        return len(self.symbols)

    def __str__(self) -> str:
        return " + ".join(self.symbols)


def paper_evaluation_set(
    seed: int | np.random.Generator = 0,
    vocabulary: Vocabulary = PAPER_VOCABULARY,
    per_size: int = 6,
    sizes: tuple[int, ...] = (1, 2, 3, 4),
) -> list[StructureTemplate]:
    """The 24 evaluation structures of the paper, reproducible from ``seed``.

    For each number of addends ``k`` in ``sizes``, ``per_size`` distinct sets of
    ``k`` distinct symbols are drawn, each without replacement from ``vocabulary``
    (``numpy.random.default_rng(seed)``; a set already drawn is redrawn).  With the
    paper vocabulary and ``k = 1`` these are the six symbols themselves.

    Args:
        seed: integer seed or a ``numpy.random.Generator``.
        vocabulary: the symbols to draw from.
        per_size: structures per size (paper: 6).
        sizes: numbers of addends (paper: 1, 2, 3, 4).

    Returns:
        ``len(sizes) * per_size`` templates, ordered by size, without duplicates.

    Raises:
        ValueError: if the vocabulary has fewer than ``per_size`` distinct sets of some size.

    Example:
        >>> templates = paper_evaluation_set(seed=0)
        >>> len(templates), sorted({len(t) for t in templates})
        (24, [1, 2, 3, 4])
        >>> str(templates[-1].broadcast(2)) == f"({templates[-1]})@0 * ({templates[-1]})@1"
        True
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    V = len(vocabulary)
    out: list[StructureTemplate] = []
    for k in sizes:
        if not 1 <= k <= V or comb(V, k) < per_size:
            raise ValueError(
                f"vocabulary {vocabulary.name!r} has {V} symbols: cannot draw {per_size} "
                f"distinct sets of {k}"
            )
        drawn: list[StructureTemplate] = []
        while len(drawn) < per_size:
            idx = rng.choice(V, size=k, replace=False)
            t = StructureTemplate(tuple(vocabulary.symbols[int(i)] for i in idx))
            if t not in drawn:
                drawn.append(t)
        out.extend(drawn)
    return out
