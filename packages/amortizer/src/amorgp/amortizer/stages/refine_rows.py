"""The refinement stage over rows: Fisher scoring (:mod:`amorgp.amortizer.stages.fisher`)
applied to the (dataset, kernel) pairs of a bucket (:func:`refine_pairs`: the pairs of
each structure in one batch; ``infer_many`` is a bucket of one dataset) and to the best
starts of every row (:func:`halve_rows`: the successive halving of ``refine="auto"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from amorgp.amortizer.stages.fisher import GAIN_TOL, fisher_refine
from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
from amorgp.kernel_grammar import DimWiseStructure

if TYPE_CHECKING:
    from amorgp.amortizer.stages.constraints import KernelConstraints

__all__ = ["AUTO_MAX_ITERS", "PairRefinement", "halve_rows", "refine_pairs"]

AUTO_MAX_ITERS = 100
"""Most evaluations ``refine="auto"`` runs per row in :func:`refine_pairs`."""


@dataclass(frozen=True)
class PairRefinement:
    """:func:`refine_pairs`' result: per pair its refined ``params``, ``noise``, and the
    diagnostics of :class:`FisherRefinement` as lists."""

    params: Tensor
    noise: Tensor
    iterations: list[int]
    status: list[str]
    gain: list[float]
    grad_norm: list[float]
    log_marginal_likelihood: list[float]


def refine_pairs(
    X: Tensor,
    Y: Tensor,
    structures: list[DimWiseStructure],
    params: Tensor,
    noise: Tensor,
    steps: int | str,
    constraints: list[KernelConstraints] | None = None,
    tol: float = GAIN_TOL,
    progress: Callable[[str, int, int], None] | None = None,
) -> PairRefinement:
    """Fisher scoring of the ``B K`` pairs of ``B`` datasets ``X (B, n, d)``, ``Y (B, n)``
    and ``K`` structures (pair ``b K + k``) from ``params (B K, D, L, P)`` and
    ``noise (B K,)``: the pairs of each structure in one batch (:func:`fisher_refine`).

    ``steps``: most evaluations per pair, or ``"auto"`` (:data:`AUTO_MAX_ITERS`); each
    pair stops once its predicted gain is below ``tol`` nats.  ``constraints``: per
    structure (``None``: none).
    """
    B, K = X.shape[0], len(structures)
    max_iters = AUTO_MAX_ITERS if steps == "auto" else int(steps)
    out_p = params.detach().clone()
    out_n = noise.detach().clone()
    P = B * K
    iterations, status = [0] * P, ["none"] * P
    gain, grad_norm, lml = [math.nan] * P, [math.nan] * P, [math.nan] * P
    X64, Y64 = X.detach().to("cpu", torch.float64), Y.detach().to("cpu", torch.float64)
    if progress is not None:
        progress("refine", 0, K)
    for k, s in enumerate(structures):  # a few structures; each batched over datasets
        obj = BatchLogMarginalLikelihood(
            X64, Y64, s, None if constraints is None else constraints[k]
        )
        D, L = s.n_dims, s.max_addends
        rows = torch.arange(k, P, K)
        start = params[rows, :D, :L].detach().to("cpu", torch.float64)
        ref = fisher_refine(
            obj, start, noise[rows].detach().to("cpu", torch.float64), max_iters, tol
        )
        S = ref.params.shape[-1]
        out_p[rows, :D, :L, :S] = ref.params.to(out_p)
        out_n[rows] = ref.noise.to(out_n)
        at = rows.tolist()
        for out, got in (
            (iterations, ref.iterations.tolist()),
            (status, ref.status),
            (gain, ref.gain.tolist()),
            (grad_norm, ref.grad_norm.tolist()),
            (lml, ref.log_marginal_likelihood.tolist()),
        ):
            for p, v in zip(at, got, strict=True):
                out[p] = v
        if progress is not None:
            progress("refine", k + 1, K)
    return PairRefinement(out_p, out_n, iterations, status, gain, grad_norm, lml)


def halve_rows(
    X: Tensor,
    Y: Tensor,
    structures: Sequence[DimWiseStructure],
    alternatives: Sequence[Sequence[tuple[str, Tensor, Tensor]]],
    params: Tensor,
    noise: Tensor,
    start: Sequence[str],
    iterations: int,
) -> tuple[Tensor, Tensor, list[str], list[int]]:
    """The successive halving of ``refine="auto"`` over the best few starts of every row
    (dataset ``b``, kernel ``k``: row ``b K + k``) of ``B`` datasets ``X (B, n, d)``,
    ``Y (B, n)`` and ``K`` structures.

    ``alternatives[p]``: row ``p``'s best starts, best first (``(name, params, noise)``;
    :data:`amorgp.amortizer.stages.multistart.Alternatives`,
    :func:`amorgp.amortizer.stages.multistart.multistart_rows`).  Each round refines the live starts
    of all rows of a structure in one batch, ``iterations`` evaluations each
    (:func:`fisher_refine`), and keeps the better half of each row's starts by exact log
    marginal likelihood, until two are left, of which the better wins.  A row with one
    start, or of a kernel without a periodic addend (whose alternatives are the null
    starts, rarely in another basin, at several times the cost), is left as it is.

    A row of a kernel without a periodic addend whose best start is a relevance start
    (:func:`~amorgp.amortizer.stages.start_proposals.relevance_starts`: some inputs'
    lengthscales stretched) is halved between that start and its best other one.

    Returns the rows' ``params``, ``noise`` and start names, and per row the evaluations
    spent on its winner's path (0 where it was left as it is).
    """
    from amorgp.amortizer.stages.multistart import has_periodic
    from amorgp.amortizer.stages.start_proposals import is_relevance

    def relevant(alt: Sequence[tuple[str, Tensor, Tensor]]) -> list[tuple[str, Tensor, Tensor]]:
        """A non-periodic row's starts to halve: its relevance winner and best other."""
        if not alt or not is_relevance(alt[0][0]):
            return []
        other = [a for a in alt[1:] if not is_relevance(a[0])]
        return [alt[0], *other[:1]]

    K = len(structures)
    P = params.shape[0]
    out_p, out_n, names = params.detach().clone(), noise.detach().clone(), list(start)
    spent = [0] * P
    X64, Y64 = X.detach().to("cpu", torch.float64), Y.detach().to("cpu", torch.float64)
    for k, s in enumerate(structures):  # a few structures; each batched over rows
        periodic = has_periodic(s)
        D, L = s.n_dims, s.max_addends
        chosen = {
            p: list(alternatives[p]) if periodic else relevant(alternatives[p])
            for p in range(k, P, K)
        }
        live = {
            p: [(name, prm[:D, :L], nz, 0) for name, prm, nz in alt]
            for p, alt in chosen.items()
            if len(alt) > 1
        }
        while live:
            flat = [(p, c) for p, cands in live.items() for c in cands]
            S = max(c[1].shape[-1] for _, c in flat)
            rows = torch.ones(len(flat), D, L, S, dtype=torch.float64)
            for i, (_, c) in enumerate(flat):  # a few starts per row
                rows[i, : c[1].shape[0], : c[1].shape[1], : c[1].shape[2]] = c[1].to(rows)
            nz = torch.stack([torch.as_tensor(c[2], dtype=torch.float64) for _, c in flat])
            at = torch.tensor([p // K for p, _ in flat])
            obj = BatchLogMarginalLikelihood(X64[at], Y64[at], s)
            # a round's gains are not reported: no closing Fisher evaluation
            ref = fisher_refine(obj, rows, nz, iterations, final_check=False)
            score = torch.nan_to_num(ref.log_marginal_likelihood, nan=-math.inf).tolist()
            its = ref.iterations.tolist()
            survivors: dict[int, list[tuple[str, Tensor, Tensor, int]]] = {}
            first = 0
            for p, cands in live.items():  # bookkeeping per row: the better half kept
                mine = sorted(range(first, first + len(cands)), key=lambda i: -score[i])
                runs = {i: flat[i][1][3] + int(its[i]) for i in mine}
                first += len(cands)
                if len(mine) > 2 and math.isfinite(score[mine[1]]):
                    survivors[p] = [
                        (flat[i][1][0], ref.params[i], ref.noise[i], runs[i])
                        for i in mine[: (len(mine) + 1) // 2]
                    ]
                    continue
                best = mine[0]
                if math.isfinite(score[best]):
                    prm = ref.params[best]
                    out_p[p] = 1.0
                    out_p[p, : prm.shape[0], : prm.shape[1], : prm.shape[2]] = prm.to(out_p)
                    out_n[p] = ref.noise[best].to(out_n)
                    names[p] = flat[best][1][0]
                    spent[p] = runs[best]
            live = survivors
    return out_p, out_n, names, spent
