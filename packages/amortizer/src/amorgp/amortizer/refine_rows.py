"""The refinement stage over rows: Fisher scoring (:mod:`amorgp.amortizer.fisher`)
applied to the (dataset, kernel) pairs of a bucket (:func:`refine_pairs`: the pairs of
each structure in one batch; ``infer_many`` is a bucket of one dataset) and to the best
starts of a kernel (:func:`halve_starts`: the successive halving of ``refine="auto"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from amorgp.amortizer.fisher import GAIN_TOL, BatchLogMarginalLikelihood, fisher_refine
from amorgp.kernel_grammar import DimWiseStructure

if TYPE_CHECKING:
    from amorgp.amortizer.constraints import KernelConstraints
    from amorgp.amortizer.multistart import MultiStart

__all__ = ["AUTO_MAX_ITERS", "PairRefinement", "halve_starts", "refine_pairs"]

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


def halve_starts(
    X: Tensor,
    y: Tensor,
    structures: Sequence[DimWiseStructure],
    starts: MultiStart,
    iterations: int,
) -> tuple[MultiStart, list[int]]:
    """:func:`amorgp.amortizer.refine.refine_starts` by Fisher scoring: the best few starts
    of each kernel (``starts.alternatives``) of one dataset ``X (n, d)``, ``y (n,)`` are
    refined together, ``iterations`` evaluations a round (:func:`fisher_refine`, the
    starts of a kernel as the rows of one batch), the better half by exact log marginal
    likelihood kept after each round, until two are left, of which the better wins.  A
    kernel with one start, or without a periodic addend (whose alternatives are the null
    starts, rarely in another basin, at several times the cost), is left as it is.  Also returns, per kernel, the evaluations
    spent on its winner's path (0 where it had one start)."""
    new_params, new_noise = starts.params.clone(), starts.noise.clone()
    names, lmls = list(starts.start), starts.log_marginal_likelihood.clone()
    X64, y64 = X.detach().to("cpu", torch.float64), y.detach().to("cpu", torch.float64)
    spent = [0] * len(starts.alternatives)
    from amorgp.amortizer.multistart import has_periodic

    for k, alt in enumerate(starts.alternatives):  # a few kernels
        if len(alt) < 2 or not has_periodic(structures[k]):
            continue
        s = structures[k]
        D, L = s.n_dims, s.max_addends
        P = max(p.shape[-1] for _, p, _ in alt)
        cand = [(name, p[:D, :L], nz, 0) for name, p, nz in alt]
        while True:
            S = len(cand)
            params = torch.ones(S, D, L, P, dtype=torch.float64)
            for i, (_, p, _, _) in enumerate(cand):
                params[i, : p.shape[0], : p.shape[1], : p.shape[2]] = p.to(torch.float64)
            noise = torch.stack([torch.as_tensor(c[2], dtype=torch.float64) for c in cand])
            obj = BatchLogMarginalLikelihood(
                X64.expand(S, *X64.shape), y64.expand(S, *y64.shape), s
            )
            ref = fisher_refine(obj, params, noise, iterations)
            score = torch.nan_to_num(ref.log_marginal_likelihood, nan=-math.inf)
            order = torch.argsort(score, descending=True).tolist()
            keep = (S + 1) // 2
            runs = [c[3] + int(ref.iterations[i]) for i, c in enumerate(cand)]
            if S > 2 and math.isfinite(float(score[order[1]])):
                cand = [(cand[i][0], ref.params[i], ref.noise[i], runs[i]) for i in order[:keep]]
                continue
            best = order[0]
            if math.isfinite(float(score[best])):
                p = ref.params[best]
                new_params[k] = 1.0
                new_params[k, : p.shape[0], : p.shape[1], : p.shape[2]] = p.to(new_params)
                new_noise[k] = ref.noise[best].to(new_noise)
                names[k] = cand[best][0]
                lmls[k] = float(score[best])
                spent[k] = runs[best]
            break
    out = replace(
        starts, params=new_params, noise=new_noise, start=names, log_marginal_likelihood=lmls
    )
    return out, spent
