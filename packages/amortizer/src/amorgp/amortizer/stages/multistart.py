"""Amortized multi-start: several starts per periodic kernel, scored by the exact likelihood.

The log marginal likelihood of a kernel with a periodic term has one mode per plausible
period (the true one, its harmonics, and a smooth long-period explanation), separated by
barriers that gradient steps do not cross.  The network gives one guess of each period;
where it is wrong, calibration and L-BFGS stay in the wrong mode.  :func:`multistart_rows`
proposes, from the one encoder pass already made, a few more starts per kernel with a
periodic term (``PER``, ``SE*PER``, ``LIN*PER``) and keeps the one with the highest
exact log marginal likelihood:

* ``"network"``: the (calibrated) prediction itself;
* ``"periodogram"``, ``"periodogram 2"``...: the peaks of the Lomb-Scargle periodogram
  (:func:`lomb_scargle`) of the targets, of the residual of a linear fit in all inputs and
  of the residual of a cubic fit in each input, per input dimension
  (:func:`period_candidates`; normalised units: the input range is 1).  The start sets
  the period of every periodic addend of that dimension to the peak's period and its
  lengthscale to :data:`PERIODIC_LENGTHSCALE` (a smooth, nearly sinusoidal shape; the
  network's shape belongs to its own period); an ``SE*PER`` addend's decay lengthscale
  is raised to at least :data:`DECAY_PERIODS` periods and :data:`TREND_LENGTHSCALE`, and
  the lengthscales of the
  addends without a period (in every dimension) to at least :data:`TREND_LENGTHSCALE`;
* ``"harmonic x1/2"``, ``"harmonic x2"``, ``"harmonic x1/3"``: the network's periods
  times a factor, in every dimension;
* ``"periodogram, lengthscale x0.5"``, ``"... x2"``: the best periodogram start with its
  periodic lengthscale rescaled;
* ``"lengthscales x3"``, ``"lengthscales x9"``, for every kernel with a lengthscale in
  input units (``SE``, ``MAT52``, the decay of ``SE*PER``; not ``PER``'s own, unit-free
  one), and ``"lengthscales x1/2"`` for such a kernel without a period: the network's
  start with all of those lengthscales times the factor (:data:`STRETCHES`).  The
  network's lengthscales are short where the data have several inputs; a plain kernel
  also has a basin of shorter lengthscale and smaller noise; these starts come on top of
  ``starts``;
* ``"lengthscales x1/16"`` ... ``"lengthscales x2"``, for such a kernel without a period:
  the rungs of :data:`~amorgp.amortizer.stages.start_proposals.LADDER`, which with the
  network's start and the stretched ones form a ladder of common factors from 1/16 to 9
  on its lengthscales.  They are scored like every start (the best wins the amortized
  answer), but with ``keep > 1`` they do not take the places of the best two other
  starts: the ladder's best local maximum that is neither is listed third (:func:`_ranked`);
* ``"relevance 1"`` ... ``"relevance D-1"``, for every kernel with lengthscales in input
  units in two dimensions or more: the network's start with the lengthscales of the ``k``
  dimensions it reads as least relevant (the longest) times :data:`RELEVANCE_STRETCH`
  (:func:`~amorgp.amortizer.stages.start_proposals.relevance_starts`).  The network
  orders the inputs' relevance right but keeps an irrelevant input's lengthscale short;
  on top of ``starts`` too.  With ``refine="auto"`` (and the default), a kernel whose
  best start is one of these is refined by the successive halving against its best other
  start (from a start that flattens a relevant input the refinement can stop far below
  the optimum: the gradient vanishes along that lengthscale);
* ``"prior-mean"`` and ``"heuristic"``, for **every** kernel, periodic or not: the null
  starts of :mod:`amorgp.amortizer.stages.null_starts` (every hyperparameter at its prior mean;
  the median-distance lengthscales and periodogram periods), so the winner is never worse
  by exact likelihood than a start that needs no network.  They come on top of
  ``starts``.

Every start has its global scale and noise set to their exact Type-2 ML values
(:func:`amorgp.amortizer.stages.calibrate.calibrate`, batched over all starts of all kernels),
and the calibration's exact log marginal likelihood at those values is the start's score:
the calibrated kernel is the scale times the evaluated one (:class:`~amorgp.amortizer.
calibrate.Scaling`), so no other factorisation is needed.  The best start of each kernel
is kept.  Calibration and scoring use at most :data:`SCORE_POINTS` points (a seeded subset
above); the winners are then calibrated on the calibration's own points (all up to
:data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS`) in one pass, which
:meth:`~amorgp.amortizer.frontends.inference.Amortizer.infer_many` shares with the final
factorisation (``calibrated=False``), so their scale and noise are those the plain
calibration would give: one calibration of every start on the scoring points and one
of the winners on all points, cheaper than calibrating every start on all points, with
the same winners (``docs/benchmarks/start-screening.md``).  The network's start always competes, so the likelihood never decreases; a
kernel without a periodic term has the stretched and the two null starts only.

:func:`multistart_rows` also returns the best few starts of each row
(:data:`Alternatives`): ``refine="auto"`` refines them and keeps the best
(:func:`amorgp.amortizer.stages.refine_rows.halve_rows`,
:func:`amorgp.amortizer.stages.refine.refine_starts`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.networks.forward import encoder_subset
from amorgp.amortizer.stages.null_starts import NULL_RULES, NullNetwork
from amorgp.amortizer.stages.pairs import (
    calibrate_rows,
    evaluate_and_calibrate,
    log_likelihood_rows,
    pair_matrices,
)
from amorgp.amortizer.stages.periodogram import (
    MAX_FREQUENCIES,
    PEAKS,
    lomb_scargle,
    period_candidates,
    period_candidates_many,
)
from amorgp.amortizer.stages.start_proposals import (
    DECAY_PERIODS,
    HARMONICS,
    PERIODIC_LENGTHSCALE,
    RELEVANCE,
    RELEVANCE_STRETCH,
    STRETCHES,
    TREND_LENGTHSCALE,
    is_relevance,
    is_rung,
    ladder_factor,
    ladder_peaks,
    periodic_starts,
    relevance_starts,
    slot_tables,
    stretched_starts,
)
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import (
    DimWiseStructure,
    ParamKind,
    Vocabulary,
    base_symbol,
)

__all__ = [
    "DECAY_PERIODS",
    "DEFAULT_STARTS",
    "HARMONICS",
    "MAX_FREQUENCIES",
    "PEAKS",
    "PERIODIC_LENGTHSCALE",
    "RELEVANCE",
    "RELEVANCE_STRETCH",
    "TREND_LENGTHSCALE",
    "REFINE_STARTS",
    "SCORE_POINTS",
    "STRETCHES",
    "Alternatives",
    "check_starts",
    "has_periodic",
    "lomb_scargle",
    "multistart_rows",
    "period_candidates",
    "resolve_starts",
]

DEFAULT_STARTS = 8
"""Starts per kernel with a periodic term (the network's included)."""

SCORE_POINTS = 256
"""Most points on which the starts are calibrated and scored (a seeded subset above): at
``n = 500`` the 24 paper kernels' starts cost 8x the calibrated fit on all points, where
the period's mode is already clear on a few hundred."""

REFINE_STARTS = 3
"""Best starts per kernel that ``refine="auto"`` refines."""


def check_starts(starts: Any) -> int:
    """``starts`` as a plain ``int``.

    Raises:
        OptionError: anything but a positive integral number (not ``bool``).
    """
    if isinstance(starts, bool) or not isinstance(starts, numbers.Integral) or int(starts) < 1:
        raise OptionError(f"starts must be a positive integer, got {starts!r}")
    return int(starts)


def has_periodic(structure: DimWiseStructure) -> bool:
    """Whether an addend of ``structure`` has a period parameter."""
    return any(
        ParamKind.PERIOD in base_symbol(sym).param_kinds for dim in structure.dims for sym in dim
    )


def resolve_starts(starts: Any, default: int | None, calibrate: bool) -> int:
    """The number of starts :meth:`Amortizer.infer_many
    <amorgp.amortizer.frontends.inference.Amortizer.infer_many>` uses: ``starts`` if given, else the
    amortizer's ``default``, else :data:`DEFAULT_STARTS` with calibration and ``1`` without
    (the network's prediction alone).

    Raises:
        OptionError: a ``starts`` that is not a positive integer.
    """
    if starts is not None:
        return check_starts(starts)
    if default is not None:
        return default
    return DEFAULT_STARTS if calibrate else 1


def multistart_rows(
    X: Tensor,
    Y: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    sym: Tensor,
    msk: Tensor,
    params: Tensor,
    noise: Tensor,
    starts: int,
    seed: int,
    calibrated: bool = True,
    keep: int = 1,
) -> tuple[Tensor, Tensor, list[str], list[int], list[Alternatives]]:
    """The multi-start (module docstring) of the ``B K`` rows of
    ``B`` datasets ``X (B, n, d)``, ``Y (B, n)`` (``n <= MAX_POINTS``) and ``K`` structures:
    the starts of every pair calibrated and scored in one batch.  Returns the winners'
    ``params``, ``noise``, the start names and the pairs whose winner is not the network's.

    ``calibrated=True``: ``params`` and ``noise`` are calibrated already; the network's
    start is scored as it is and a winner that is another start is calibrated on all
    points.  ``calibrated=False``: the network's starts are calibrated and scored on the
    scoring points with the others, and every pair's winner is returned calibrated there
    (on all points with at most :data:`SCORE_POINTS`); every pair is listed as moved.

    ``keep > 1``: also each pair's best ``keep`` starts, best first (:data:`Alternatives`:
    what ``refine="auto"`` halves, :func:`amorgp.amortizer.stages.refine_rows.halve_rows`);
    else an empty list."""
    B, n, d = X.shape
    K = len(structures)
    P = B * K
    L = sym.shape[2]
    dev = params.device
    p64 = params.detach().to(torch.float64)[:, :d, :L]
    n64 = noise.detach().to(torch.float64)
    names_out = ["network"] * P
    periodic = [has_periodic(s) for s in structures]
    row_periodic = [periodic[p % K] for p in range(P)]
    if starts <= 1:
        return params, noise, names_out, [], []
    tables = tuple(t.to(dev) for t in slot_tables(vocabulary))
    # the periodogram serves periodic kernels only (their starts, the heuristic's periods)
    cands = period_candidates_many(X, Y) if any(periodic) else [[] for _ in range(B)]
    sub = encoder_subset(n, SCORE_POINTS, seed)
    Xc, Yc = (X, Y) if sub is None else (X[:, sub.to(dev)], Y[:, sub.to(dev)])
    owner: list[int] = []
    names: list[str] = []
    blocks: list[Tensor] = []
    rows: list[int] = []
    offset = 0
    if not calibrated:  # the network's starts first: ties keep them
        owner, names, rows = list(range(P)), ["network"] * P, list(range(P))
        blocks.append(p64)
        offset = P
    for k in range(K):  # per kernel: the starts of all its pairs at once
        if not periodic[k]:
            continue
        block, lists = periodic_starts(p64[k::K], sym[k], msk[k], tables, cands, starts)
        width = block.shape[1]
        for b, chosen in enumerate(lists):  # bookkeeping: the names and rows per dataset
            for name, j in chosen:
                owner.append(b * K + k)
                names.append(name)
                rows.append(offset + b * width + j)
        blocks.append(block.reshape(-1, *block.shape[2:]))
        offset += block.shape[0] * width
    # the network's lengthscales stretched, for every kernel with one in input units: all
    # of them, and those of the inputs it reads as least relevant
    for k in range(K):
        proposals = [
            *stretched_starts(
                p64[k::K], sym[k], msk[k], vocabulary, not periodic[k], not periodic[k]
            ),
            *relevance_starts(p64[k::K], sym[k], msk[k], vocabulary),
        ]
        for name, stretched in proposals:
            owner.extend(range(k, P, K))  # one stretched start per dataset
            names.extend([name] * B)
            rows.extend(range(offset, offset + B))
            blocks.append(stretched)
            offset += B
    # the null starts of every kernel (null_starts.py), after the periodic ones as there
    ones = torch.ones(B, n, dtype=torch.bool, device=dev)
    dims = torch.ones(B, d, dtype=torch.bool, device=dev)
    for rule in NULL_RULES:
        net = NullNetwork(vocabulary, rule)
        enc = net.encoding(X, ones, dims, cands)
        for k in range(K):
            pred = net.decode(enc, sym[k].expand(B, -1, -1), msk[k].expand(B, -1, -1))
            for b in range(B):  # bookkeeping: one null start per dataset
                owner.append(b * K + k)
                names.append(rule)
                rows.append(offset + b)
            blocks.append(pred.params.to(torch.float64)[:, :d, :L])
            offset += B
    if not owner:
        return params, noise, names_out, [], []
    own = torch.tensor(owner, dtype=torch.long, device=dev)
    ds, ks = own // K, own % K
    alt_params = torch.cat(blocks)[torch.tensor(rows, dtype=torch.long, device=dev)]
    Xa, Ya, sa, ma = Xc[ds], Yc[ds], sym[ks], msk[ks]
    # each start's score, its exact likelihood once calibrated, comes with the calibration
    # (the calibrated matrix is the scale times the evaluated one)
    cal = evaluate_and_calibrate(Xa, Ya, sa, ma, alt_params, n64[own], vocabulary)
    lml_alt = cal.log_marginal_likelihood.tolist()
    if not calibrated:
        best_of: dict[int, int] = {}
        for i, p in enumerate(owner):  # bookkeeping: the first best start of each pair
            if p not in best_of or lml_alt[i] > lml_alt[best_of[p]]:
                best_of[p] = i
        won = torch.tensor([best_of[p] for p in range(P)], dtype=torch.long, device=dev)
        out = params.detach().clone()
        out[:, :d, :L] = cal.params[won].to(out.dtype)
        return (
            out,
            cal.noise[won].to(noise.dtype),
            [names[best_of[p]] for p in range(P)],
            list(range(P)),
            _ranked(P, owner, names, lml_alt, cal.params, cal.noise, keep, row_periodic),
        )
    heads = sorted(set(owner))
    at_h = torch.tensor(heads, dtype=torch.long, device=dev)
    Kn = pair_matrices(Xc[at_h // K], sym[at_h % K], msk[at_h % K], p64[at_h], vocabulary)
    scores = log_likelihood_rows(Kn, Yc[at_h // K], n64[at_h])
    lml_net = dict(zip(heads, scores.tolist(), strict=True))
    best: dict[int, int] = {}  # pair -> index of its winning start in alt
    for i, p in enumerate(owner):  # bookkeeping: the first best start of each pair
        cur = best.get(p)
        if cur is None or lml_alt[i] > lml_alt[cur]:
            best[p] = i
    moved = sorted(p for p, i in best.items() if lml_alt[i] > lml_net[p])
    alternatives: list[Alternatives] = []
    if keep > 1:  # the network's start first (ties keep it), then the others
        alternatives = _ranked(
            P,
            list(range(P)) + owner,
            ["network"] * P + names,
            [lml_net.get(p, math.nan) for p in range(P)] + lml_alt,
            torch.cat([p64, cal.params]),
            torch.cat([n64, cal.noise]),
            keep,
            row_periodic,
        )
    if not moved:
        return params, noise, names_out, [], alternatives
    won = torch.tensor([best[p] for p in moved], dtype=torch.long, device=dev)
    at_m = torch.tensor(moved, dtype=torch.long, device=dev)
    new_p, new_n = cal.params[won], cal.noise[won]
    if sub is not None:  # the winners' scale and noise on all the points (as multistart)
        Kw = pair_matrices(X[at_m // K], sym[at_m % K], msk[at_m % K], new_p, vocabulary)
        again = calibrate_rows(
            Kw, Y[at_m // K], sym[at_m % K], msk[at_m % K], new_p, new_n, vocabulary
        )
        new_p, new_n = again.params, again.noise
    out = params.detach().clone()
    out_noise = noise.detach().clone()
    out[at_m, :d, :L] = new_p.to(out.dtype)
    out_noise[at_m] = new_n.to(out_noise.dtype)
    for p in moved:
        names_out[p] = names[best[p]]
    return out, out_noise, names_out, moved, alternatives


Alternatives = list[tuple[str, Tensor, Tensor]]
"""A pair's best starts, best first: ``(name, params (d, L, S), noise)`` each."""


def _ranked(
    P: int,
    owner: Sequence[int],
    names: Sequence[str],
    score: Sequence[float],
    params: Tensor,
    noise: Tensor,
    keep: int,
    periodic: Sequence[bool] | None = None,
) -> list[Alternatives]:
    """Each of ``P`` pairs' starts for the successive halving, best first (ties in listed
    order; at least the first listed), from the starts ``i`` of pair ``owner[i]``; an
    empty list for ``keep <= 1``.

    A pair with a periodic kernel (``periodic[p]``; all pairs where ``periodic`` is
    ``None``) keeps its best ``keep`` starts with a finite score.  A pair without one keeps
    its best two starts that are not :data:`~amorgp.amortizer.stages.start_proposals.
    LADDER` rungs and, where the ladder of its lengthscale factors (the network's start,
    the stretched starts and the rungs) has a local maximum that is neither
    (:func:`~amorgp.amortizer.stages.start_proposals.ladder_peaks`), the best such
    maximum as a third, and the network's own start where it is none of these (so the
    network's answer is always refined; ``docs/guide/refine.md``).  Where every one kept
    is a relevance start
    (:func:`relevance_starts`), the last is the best other start instead (a pair without
    a period: the second): the successive halving then refines a start that stretches no
    input alone beside them (:func:`~amorgp.amortizer.stages.refine_rows.halve_rows`)."""
    if keep <= 1:
        return []
    mine: list[list[int]] = [[] for _ in range(P)]
    for i, p in enumerate(owner):  # bookkeeping: the starts of each pair
        mine[p].append(i)
    out: list[Alternatives] = []
    for p, rows in enumerate(mine):
        ranked = sorted(rows, key=lambda i: -score[i] if math.isfinite(score[i]) else math.inf)
        finite = [i for i in ranked if math.isfinite(score[i])]
        plain = periodic is not None and not periodic[p]
        pool = [i for i in finite if not is_rung(names[i])] if plain else finite
        kept = pool[: 2 if plain else keep] or rows[:1]
        other = [i for i in pool if not is_relevance(names[i])]
        if len(kept) > 1 and other and all(is_relevance(names[i]) for i in kept):
            kept[-1] = other[0]
        if plain:
            kept += _ladder_peak(finite, names, score, kept)
            kept += [i for i in finite if names[i] == "network" and i not in kept][:1]
        out.append([(names[i], params[i], noise[i]) for i in kept])
    return out


def _ladder_peak(
    finite: Sequence[int], names: Sequence[str], score: Sequence[float], kept: Sequence[int]
) -> list[int]:
    """The best local maximum of the ladder among the starts ``finite`` that is not one of
    ``kept`` (as a one-element list), or none."""
    lad = [(f, i) for i in finite if (f := ladder_factor(names[i])) is not None]
    peaks = ladder_peaks([f for f, _ in lad], [score[i] for _, i in lad])
    best = sorted((lad[j][1] for j in peaks), key=lambda i: -score[i])
    return [i for i in best if i not in kept][:1]
