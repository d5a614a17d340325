"""The refinement stage over rows: Fisher scoring (:mod:`amorgp.amortizer.stages.fisher`)
applied to the (dataset, kernel) pairs of a bucket (:func:`refine_pairs`: the pairs of
each structure in one batch; ``infer_many`` is a bucket of one dataset) and to the best
starts of every row (:func:`halve_rows`: the successive halving of ``refine="auto"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from amorgp.amortizer.stages.fisher import GAIN_TOL, fisher_refine
from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
from amorgp.kernel_grammar import ELEMENTARY, DimWiseStructure, base_symbol

if TYPE_CHECKING:
    from amorgp.amortizer.stages.constraints import KernelConstraints

__all__ = [
    "AUTO_MAX_ITERS",
    "NESTED_MARGIN",
    "NESTED_PASSES",
    "NESTED_SCALES",
    "NestedRestart",
    "PairRefinement",
    "halve_rows",
    "nested_kernels",
    "refine_pairs",
    "restart_nested",
]

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


def _put(params: Tensor, p: int, prm: Tensor) -> None:
    """Row ``p`` of the padded ``params (P, D, L, S)`` set to one structure's ``prm``
    (its slots; unused slots 1)."""
    params[p] = 1.0
    params[p, : prm.shape[0], : prm.shape[1], : prm.shape[2]] = prm.to(params)


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
    marginal likelihood, until two are left, of which the better wins (a kernel without a
    period: one round, below).  A row with one
    start is left as it is.

    The starts are halved as listed: :func:`~amorgp.amortizer.stages.multistart.
    multistart_rows` lists a kernel without a periodic addend's best two starts (the
    network's, the stretched, relevance and null starts: a plain ``SE`` has basins of
    short lengthscale and small noise and of long lengthscale and large noise, and the
    start that scores higher is not always in the higher one; where the best is a
    relevance start, :func:`~amorgp.amortizer.stages.start_proposals.relevance_starts`,
    with its best other one), the best other basin of its lengthscale ladder
    (:data:`~amorgp.amortizer.stages.start_proposals.LADDER`) and the network's own start
    where it is none of these, and a periodic kernel's best few.  A kernel without a
    period has one round: the best of its two to four starts after it wins (two rounds,
    3 -> 2 -> 1, cost 10 more evaluations per row and changed one of 233 real cells by
    more than a nat: ``docs/guide/refine.md``).

    Returns the rows' ``params``, ``noise`` and start names, and per row the evaluations
    spent on its winner's path (0 where it was left as it is).
    """
    from amorgp.amortizer.stages.multistart import has_periodic

    K = len(structures)
    P = params.shape[0]
    out_p, out_n, names = params.detach().clone(), noise.detach().clone(), list(start)
    spent = [0] * P
    X64, Y64 = X.detach().to("cpu", torch.float64), Y.detach().to("cpu", torch.float64)
    for k, s in enumerate(structures):  # a few structures; each batched over rows
        periodic = has_periodic(s)
        D, L = s.n_dims, s.max_addends
        live = {
            p: [(name, prm[:D, :L], nz, 0) for name, prm, nz in alternatives[p]]
            for p in range(k, P, K)
            if len(alternatives[p]) > 1
        }
        while live:
            flat = [(p, c) for p, cands in live.items() for c in cands]
            S = max(c[1].shape[-1] for _, c in flat)
            rows = torch.ones(len(flat), D, L, S, dtype=torch.float64)
            for i, (_, c) in enumerate(flat):  # a few starts per row
                rows[i, : c[1].shape[0], : c[1].shape[1], : c[1].shape[2]] = c[1].to(rows)
            nz = torch.stack([torch.as_tensor(c[2]).to("cpu", torch.float64) for _, c in flat])
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
                if periodic and len(mine) > 2 and math.isfinite(score[mine[1]]):
                    survivors[p] = [
                        (flat[i][1][0], ref.params[i], ref.noise[i], runs[i])
                        for i in mine[: (len(mine) + 1) // 2]
                    ]
                    continue
                best = mine[0]
                if math.isfinite(score[best]):
                    _put(out_p, p, ref.params[best])
                    out_n[p] = ref.noise[best].to(out_n)
                    names[p] = flat[best][1][0]
                    spent[p] = runs[best]
            live = survivors
    return out_p, out_n, names, spent


NESTED_MARGIN = 0.1
"""Nats by which a kernel nested in another (:func:`nested_kernels`) must end above it
for :func:`restart_nested` to restart the other from it."""

NESTED_PASSES = 3
"""Passes of the nested restart (:func:`restart_nested`): a kernel improved by one pass may
start the restart of a larger kernel in the next."""

NESTED_SCALES = (1e-2, 1e-4, 1e-6, 1e-8)
"""Variances tried for the addends that the nested kernel lacks, at the restart (relative
to the largest variance of the dimension's other addends; :func:`restart_nested` keeps
the one whose start has the highest likelihood).  A vanishing addend is not always a
vanishing change: where the nested kernel's factor in one dimension is tiny (a periodic
factor of short lengthscale half a period away), an added term dominates that entry, so
one relative size does not fit every kernel."""

Embedding = list[list[tuple[int, int]]]
"""Per dimension, the pairs ``(addend of the nested kernel, addend of the larger one)``."""


def _embed(sub: DimWiseStructure, sup: DimWiseStructure) -> Embedding | None:
    """How ``sub`` sits in ``sup`` where every dimension's addends of ``sub`` are among
    ``sup``'s (by name) and ``sup`` has more somewhere; else ``None``."""
    if sub.n_dims != sup.n_dims:
        return None
    pairs: Embedding = []
    more = False
    for small, large in zip(sub.dims, sup.dims, strict=True):
        used: set[int] = set()
        dim: list[tuple[int, int]] = []
        for a_sub, name in enumerate(small):
            a = next((i for i, other in enumerate(large) if other == name and i not in used), None)
            if a is None:
                return None
            used.add(a)
            dim.append((a_sub, a))
        more |= len(large) > len(small)
        pairs.append(dim)
    return pairs if more else None


def nested_kernels(structures: Sequence[DimWiseStructure]) -> list[list[tuple[int, Embedding]]]:
    """Per kernel ``k`` of ``structures``, the others nested in it: ``(k', embedding)``
    for every ``k'`` whose addends in every dimension are among ``k``'s (``SE`` in
    ``SE + PER``, ``SE*PER`` in ``SE + SE*PER``).  The larger kernel contains the nested
    one as the limit where its other addends' variances vanish, so its optimum is at least
    as high."""
    return [
        [(k2, e) for k2, sub in enumerate(structures) if (e := _embed(sub, sup)) is not None]
        for sup in structures
    ]


def kernel_text(structure: DimWiseStructure) -> str:
    """``structure`` as a user writes it: one dimension's sum where all are the same."""
    if all(dim == structure.dims[0] for dim in structure.dims):
        return structure.dim_text(0)
    return str(structure)


@dataclass(frozen=True)
class NestedRestart:
    """:func:`restart_nested`'s result for the rows it improved (lists in the order of
    ``rows``): their ``params``, ``noise``, start names ``"nested: <kernel>"`` and the
    diagnostics of :class:`~amorgp.amortizer.stages.fisher.FisherRefinement`."""

    rows: list[int]
    params: Tensor
    noise: Tensor
    start: list[str]
    iterations: list[int]
    status: list[str]
    gain: list[float]
    grad_norm: list[float]
    log_marginal_likelihood: list[float]


def _nested_start(
    sup: DimWiseStructure, pairs: Embedding, own: Tensor, sub_params: Tensor, size: float
) -> Tensor:
    """The start of a row of ``sup`` from the refined ``sub_params (D, L, S)`` of the
    kernel nested in it: the shared addends at the nested kernel's values, the others at
    their ``own (D, L, S)`` values but with their largest value (on inputs in ``[0, 1]``)
    at ``size`` times the dimension's largest variance: a ``LIN`` factor's offset at
    ``size`` and the variance divided by its ``1 + size``; a lone ``LIN``'s variance and
    offset (added to it) at that size."""
    start = own.clone()
    for j, dim in enumerate(pairs):
        names = sup.dims[j]
        shared = {a for _, a in dim}
        scale = 0.0
        for a_sub, a in dim:
            b = base_symbol(names[a])
            width = len(b.params)
            start[j, a, :width] = sub_params[j, a_sub, :width]
            scale = max(scale, float(sub_params[j, a_sub, list(b.param_names).index("variance")]))
        for a, name in enumerate(names):
            if a in shared:
                continue
            b = base_symbol(name)
            order = list(b.param_names)
            target = size * (scale or 1.0)
            lone = len(b.factors) == 1 and not ELEMENTARY[b.factors[0]].variance_scales_all
            # its largest value on inputs in [0, 1] at the target: a LIN factor's offset c
            # (x x' + c, at most 1 + c) at ``size`` (a lone LIN's, added, at the target);
            # the variance floor would keep a large c's term from vanishing
            bound = 1.0
            for f in b.factors:
                if ELEMENTARY[f].variance_scales_all:
                    continue
                at = order.index(b.factor_param_names(f)[ELEMENTARY[f].params[0].name])
                start[j, a, at] = target if lone else size
                bound *= 1.0 if lone else 1.0 + size
            start[j, a, order.index("variance")] = target / bound
    return start


def restart_nested(
    X: Tensor,
    Y: Tensor,
    structures: Sequence[DimWiseStructure],
    params: Tensor,
    noise: Tensor,
    lml: Sequence[float],
    steps: int | str,
    tol: float = GAIN_TOL,
    sources: Collection[int] | None = None,
) -> NestedRestart | None:
    """Restart every row (dataset ``b``, kernel ``k``: row ``b K + k`` of ``B`` datasets
    ``X (B, n, d)``, ``Y (B, n)``) whose refined log marginal likelihood ``lml`` is more
    than :data:`NESTED_MARGIN` below that of a kernel nested in it on the same dataset
    (:func:`nested_kernels`; the best such one) from that kernel's refined point
    (:func:`_nested_start`), and refine it as :func:`refine_pairs` does (``steps``).

    A larger kernel ending below a kernel it contains has stopped in a worse basin or
    short of its optimum: the restart starts it at least as high (up to the vanishing
    variances).  ``sources``: the rows whose points may start a restart (default: all;
    a later pass passes the rows the previous one improved, :data:`NESTED_PASSES`).
    Returns the rows whose restart ended higher than their first refinement, or ``None``
    where none did.
    """
    K = len(structures)
    nest = nested_kernels(structures)
    if not any(nest):
        return None
    P = params.shape[0]
    score = [v if math.isfinite(v) else -math.inf for v in lml]
    picks: dict[int, tuple[int, Embedding]] = {}
    for p in range(P):
        b, k = divmod(p, K)
        best = max(
            (
                (score[b * K + k2], k2, e)
                for k2, e in nest[k]
                if sources is None or b * K + k2 in sources
            ),
            key=lambda c: c[0],
            default=None,
        )
        if best is not None and best[0] > score[p] + NESTED_MARGIN:
            picks[p] = (best[1], best[2])
    if not picks:
        return None
    max_iters = AUTO_MAX_ITERS if steps == "auto" else int(steps)
    X64, Y64 = X.detach().to("cpu", torch.float64), Y.detach().to("cpu", torch.float64)
    P64 = params.detach().to("cpu", torch.float64)
    out: dict[int, tuple[Tensor, Tensor, str, int, str, float, float, float]] = {}
    for k, s in enumerate(structures):  # a few structures; each batched over its rows
        rows = [p for p in picks if p % K == k]
        if not rows:
            continue
        D, L = s.n_dims, s.max_addends
        G = len(NESTED_SCALES)
        tried = torch.stack(
            [
                _nested_start(
                    s, picks[p][1], P64[p, :D, :L], P64[p - k + picks[p][0], :D, :L], size
                )
                for p in rows
                for size in NESTED_SCALES
            ]
        )
        nz = torch.stack(
            [noise[p - k + picks[p][0]].detach().to("cpu", torch.float64) for p in rows]
        )
        at = torch.tensor([p // K for p in rows])
        obj = BatchLogMarginalLikelihood(X64[at], Y64[at], s)
        # every size's start scored exactly on its row's data (without the Fisher
        # information: a third of the cost), the best kept per row
        each = torch.arange(len(rows)).repeat_interleave(G)
        z = obj.to_log_rows(tried, nz[each])
        first = obj.evaluate(z, each, with_fisher=False)[0].reshape(len(rows), G)
        pick = torch.nan_to_num(first, nan=-math.inf).argmax(1)
        starts = tried.reshape(len(rows), G, *tried.shape[1:])[torch.arange(len(rows)), pick]
        ref = fisher_refine(obj, starts, nz, max_iters, tol)
        for i, p in enumerate(rows):
            got = float(ref.log_marginal_likelihood[i])
            if math.isfinite(got) and got > score[p]:
                out[p] = (
                    ref.params[i], ref.noise[i],
                    "nested: " + kernel_text(structures[picks[p][0]]),
                    int(ref.iterations[i]), ref.status[i], float(ref.gain[i]),
                    float(ref.grad_norm[i]), got,
                )  # fmt: skip
    if not out:
        return None
    rows = sorted(out)
    full = params.detach().clone()
    for p in rows:
        _put(full, p, out[p][0])
    return NestedRestart(
        rows=rows,
        params=full[rows],
        noise=torch.stack([out[p][1] for p in rows]).to(noise),
        start=[out[p][2] for p in rows],
        iterations=[out[p][3] for p in rows],
        status=[out[p][4] for p in rows],
        gain=[out[p][5] for p in rows],
        grad_norm=[out[p][6] for p in rows],
        log_marginal_likelihood=[out[p][7] for p in rows],
    )
