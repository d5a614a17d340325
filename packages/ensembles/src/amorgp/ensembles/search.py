"""Kernel-structure search over the dimension-wise space, with any inference method.

Greedy (``beam=1``) or beam search with kernel-grammar's moves (add a base kernel
to a dimension or to every dimension, multiply an addend by an elementary kernel,
replace an addend; :func:`amorgp.kernel_grammar.moves`).  Every candidate of a level
is fitted in ONE ``fit_many`` call, so with the amortization network a level of
hundreds of structures costs one batched forward pass: an automatic statistician
that scores thousands of structures in seconds.

Scores (higher is better):

* ``"lml"``: the log marginal likelihood at the inferred hyperparameters;
* ``"bic"``: ``LML - 0.5 k log n`` with ``k`` the number of kernel hyperparameters
  plus the noise (the Bayesian information criterion divided by ``-2``).

Structures with a symbol twice in one dimension (``SE + SE``, a non-identifiable
re-parameterisation of ``SE``, never seen by the network in training) are skipped.
The search starts from every symbol of the vocabulary alone in every dimension,
keeps the ``beam`` best structures of each level (among everything scored so far)
and stops after ``depth`` expansions or when a level finds nothing better.
Optionally the ``refine_top`` best structures are refitted with a second, slower
method (e.g. the amortizer with ``refine=k`` L-BFGS steps, or Type-2 ML) and the
best refitted one is returned.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from amorgp.core.errors import OptionError
from amorgp.ensembles.ensemble import (
    InferenceLike,
    _fit_members,
    _lml,
    check_data,
    check_inputs,
)
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, Vocabulary, neighbours

__all__ = ["Criterion", "ScoredStructure", "SearchResult", "structure_search"]

Criterion = Literal["lml", "bic"]


@dataclass(frozen=True)
class ScoredStructure:
    """A fitted candidate.

    Attributes:
        structure: the dimension-wise structure.
        fit: its fit (the inference method's result object).
        score: the criterion's value (higher is better; ``-inf`` if inference failed).
        log_marginal_likelihood: at the inferred hyperparameters (NaN if failed).
        depth: the search level that produced it (0 = start).
    """

    structure: DimWiseStructure
    fit: Any
    score: float
    log_marginal_likelihood: float
    depth: int


@dataclass
class SearchResult:
    """Outcome of :func:`structure_search`.

    Attributes:
        best: the best candidate (after refinement, if any).
        levels: per level, its candidates sorted by score (best first).
        criterion: ``"lml"`` or ``"bic"``.
        n_scored: structures fitted (refits excluded).
        time_s: wall-clock time of the search (refinement included).
        refined: the refitted candidates, best first (empty without refinement).
    """

    best: ScoredStructure
    levels: list[list[ScoredStructure]]
    criterion: str
    n_scored: int
    time_s: float
    refined: list[ScoredStructure] = field(default_factory=list)

    def ranking(self) -> list[ScoredStructure]:
        """Every scored structure, best first."""
        return sorted((c for lvl in self.levels for c in lvl), key=lambda c: -c.score)


def _score(fit: Any, criterion: str, n: int) -> tuple[float, float]:
    lml = _lml(fit)
    if not math.isfinite(lml):
        return -math.inf, math.nan
    if criterion == "lml":
        return lml, lml
    k = fit.kernel.n_params + 1
    return lml - 0.5 * k * math.log(n), lml


def _distinct(s: DimWiseStructure) -> bool:
    """No symbol twice in one dimension (``SE + SE`` only re-splits one amplitude)."""
    return all(len(set(a)) == len(a) for a in s.dims)


def _start(n_dims: int, vocab: Vocabulary) -> list[DimWiseStructure]:
    return [DimWiseStructure(tuple((s,) for _ in range(n_dims))) for s in vocab.symbols]


def structure_search(
    inference: InferenceLike,
    X: Any,
    y: Any,
    *,
    depth: int = 3,
    beam: int = 1,
    criterion: Criterion = "bic",
    vocabulary: Vocabulary = PAPER_VOCABULARY,
    max_addends: int = 4,
    start: str | DimWiseStructure | Sequence[str | DimWiseStructure] | None = None,
    refine: InferenceLike | None = None,
    refine_top: int = 3,
    progress: Callable[[int, int, float], None] | None = None,
) -> SearchResult:
    """Search the dimension-wise kernel space (see the module docstring).

    Args:
        inference: anything with ``fit_many(X, y, kernels)`` (the inference protocol).
        X: ``(n, d)`` inputs; y: ``(n,)`` targets.
        depth: expansions after the start level (>= 0).
        beam: structures kept per level (1 = greedy).
        criterion: ``"lml"`` or ``"bic"``.
        vocabulary: the symbols moves may use.
        max_addends: addends per dimension at most (the network was trained with <= 6).
        start: starting structures (default: each symbol alone in every dimension; a
            single text or structure is one start).
        refine: a second inference method refitting the ``refine_top`` best structures.
        refine_top: how many to refit.
        progress: called as ``progress(level, n_candidates, best_score)`` after each level.

    Raises:
        OptionError: bad ``depth``/``beam``/``criterion``/``max_addends``, or a start
            kernel outside ``vocabulary``.
        DataError: data no candidate could fit (checked once, up front: see
            :func:`~amorgp.ensembles.ensemble.check_inputs`).
        KernelSyntaxError: a start kernel text that does not parse.
        ValueError: every start candidate failed.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise OptionError(f"depth must be a non-negative integer, got {depth!r}")
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise OptionError(f"beam must be a positive integer, got {beam!r}")
    if criterion not in ("lml", "bic"):
        raise OptionError(f"unknown criterion {criterion!r}; use lml or bic")
    if isinstance(max_addends, bool) or not isinstance(max_addends, int) or max_addends < 1:
        raise OptionError(f"max_addends must be a positive integer, got {max_addends!r}")
    t0 = time.perf_counter()
    if start is not None:
        Xt, _, starts = check_inputs(inference, X, y, start)
    else:  # the data alone: the start level is built from ``vocabulary`` below
        Xt, _ = check_data(X, y)
    n, n_dims = Xt.shape
    frontier = (
        [DimWiseStructure.coerce(s, n_dims, vocabulary) for s in starts]
        if start is not None
        else _start(n_dims, vocabulary)
    )
    seen: set[DimWiseStructure] = set()
    levels: list[list[ScoredStructure]] = []
    kept: list[ScoredStructure] = []
    best_score = -math.inf
    for level in range(depth + 1):
        candidates = [s for s in dict.fromkeys(frontier) if s not in seen]
        if not candidates:
            break
        seen.update(candidates)
        fits = _fit_members(inference, X, y, candidates)
        scored = []
        for s, f in zip(candidates, fits, strict=True):
            score, lml = _score(f, criterion, n)
            scored.append(ScoredStructure(s, f, score, lml, level))
        scored.sort(key=lambda c: -c.score)
        levels.append(scored)
        kept = sorted([*kept, *scored], key=lambda c: -c.score)[:beam]
        if progress is not None:
            progress(level, len(candidates), kept[0].score)
        if not math.isfinite(kept[0].score):
            raise ValueError("inference failed for every candidate structure")
        if level > 0 and not kept[0].score > best_score:
            break
        best_score = kept[0].score
        frontier = [
            nb
            for c in kept
            for nb in neighbours(c.structure, vocabulary, max_addends=max_addends)
            if _distinct(nb)
        ]
    ranking = sorted((c for lvl in levels for c in lvl), key=lambda c: -c.score)
    best = ranking[0]
    refined: list[ScoredStructure] = []
    if refine is not None:
        top = [c for c in ranking[: max(1, refine_top)] if math.isfinite(c.score)]
        fits = _fit_members(refine, X, y, [c.structure for c in top])
        for c, f in zip(top, fits, strict=True):
            score, lml = _score(f, criterion, n)
            refined.append(ScoredStructure(c.structure, f, score, lml, c.depth))
        refined.sort(key=lambda c: -c.score)
        if refined and math.isfinite(refined[0].score):
            best = refined[0]
    return SearchResult(
        best, levels, criterion, sum(len(lvl) for lvl in levels), time.perf_counter() - t0, refined
    )
