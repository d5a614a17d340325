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
  one): the network's start with all of those lengthscales times the factor
  (:data:`STRETCHES`).  The network's lengthscales are short where the data have several
  inputs; these starts come on top of ``starts``;
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
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import (
    ELEMENTARY,
    FLOORS,
    DimWiseStructure,
    ParamKind,
    Vocabulary,
    base_symbol,
)
from amorgp.lazy_kernels import slot_table

__all__ = [
    "DECAY_PERIODS",
    "DEFAULT_STARTS",
    "HARMONICS",
    "MAX_FREQUENCIES",
    "PEAKS",
    "PERIODIC_LENGTHSCALE",
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

HARMONICS = ((0.5, "x1/2"), (2.0, "x2"), (1.0 / 3.0, "x1/3"))
"""Factors applied to the network's periods, with their names."""

PERIODIC_LENGTHSCALE = 1.0
"""Lengthscale of the periodic factor in the periodogram starts (the kernel
``exp(-sin^2(pi r / p) / (2 l^2))`` is then close to one cosine of period ``p``)."""

DECAY_PERIODS = 2.0
"""Least decay lengthscale of an ``SE*PER`` addend in a periodogram start, in periods (and
at least :data:`TREND_LENGTHSCALE`: from a short decay, L-BFGS stays in the mode where the
periodic term also absorbs the noise; on airline it ended 10 nats below the optimum)."""

TREND_LENGTHSCALE = 0.5
"""Least lengthscale of the addends without a period (``SE``, ``SE*LIN``...) in a
periodogram start (normalised units: half the input range): the periodic term explains
the oscillation the network may have given a short lengthscale, and in a product over
dimensions a short lengthscale elsewhere would decorrelate the periodic one."""

PERIOD_FLOOR = 2.0 * FLOORS[ParamKind.PERIOD]

STRETCHES: tuple[tuple[float, str], ...] = ((3.0, "x3"), (9.0, "x9"))
"""Factors applied to all of the network's lengthscales in input units, for every kernel
that has one, with their names (the ``"lengthscales x3"`` and ``"lengthscales x9"``
starts).  On real data with several inputs the network's lengthscales are a median of
about a third of Type-2 ML's (``docs/benchmarks/default-refine.md``); factors 2 and 4
or 2, 4 and 8 did as well for the amortized answer and worse for the default fit."""


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


def slot_tables(vocabulary: Vocabulary) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per vocabulary id (0 = padding): the slot of the period, of the periodic lengthscale,
    of the decay (SE) lengthscale of a periodic product, and of the lengthscale of an
    addend without a period (a trend), ``-1`` where absent."""
    period, per_ls, decay, trend = [-1], [-1], [-1], [-1]
    for sym in vocabulary.symbols:
        spec = base_symbol(sym)
        names = list(spec.param_names)
        kinds = list(spec.param_kinds)
        has = ParamKind.PERIOD in kinds
        period.append(kinds.index(ParamKind.PERIOD) if has else -1)
        if not has:
            per_ls.append(-1)
            decay.append(-1)
            ls = ParamKind.LENGTHSCALE
            trend.append(kinds.index(ls) if ls in kinds else -1)
            continue
        trend.append(-1)
        # by role, not by name: the lengthscale of the factor with the period is the
        # periodic one; a lengthscale of another factor (SE, MAT52, RQ...) is the decay
        p_ls = d_ls = -1
        for f in spec.factors:
            full = spec.factor_param_names(f)
            params = ELEMENTARY[f].params
            periodic = any(q.kind == ParamKind.PERIOD for q in params)
            for q in params:
                if q.kind == ParamKind.LENGTHSCALE:
                    if periodic:
                        p_ls = names.index(full[q.name])
                    else:
                        d_ls = names.index(full[q.name])
        per_ls.append(p_ls)
        decay.append(d_ls)
    return tuple(torch.tensor(t) for t in (period, per_ls, decay, trend))  # type: ignore[return-value]


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
    if starts <= 1:
        return params, noise, names_out, [], []
    tables = tuple(t.to(dev) for t in slot_tables(vocabulary))
    cands = period_candidates_many(X, Y)
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
        block, lists = _starts_many(p64[k::K], sym[k], msk[k], tables, cands, starts)
        width = block.shape[1]
        for b, chosen in enumerate(lists):  # bookkeeping: the names and rows per dataset
            for name, j in chosen:
                owner.append(b * K + k)
                names.append(name)
                rows.append(offset + b * width + j)
        blocks.append(block.reshape(-1, *block.shape[2:]))
        offset += block.shape[0] * width
    # the network's lengthscales stretched, for every kernel with one in input units
    input_ls = slot_table(vocabulary, dev).input_lengthscale
    for k in range(K):
        where = input_ls[torch.where(msk[k], sym[k], 0).long()] & msk[k][..., None]
        if not bool(where.any()):
            continue
        for f, label in STRETCHES:
            for b in range(B):  # bookkeeping: one stretched start per dataset
                owner.append(b * K + k)
                names.append(f"lengthscales {label}")
                rows.append(offset + b)
            blocks.append(torch.where(where[:d], p64[k::K] * f, p64[k::K]))
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
            _ranked(P, owner, names, lml_alt, cal.params, cal.noise, keep),
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
) -> list[Alternatives]:
    """Each of ``P`` pairs' best ``keep`` starts with a finite score, best first (ties in
    listed order; at least the first listed), from the starts ``i`` of pair ``owner[i]``;
    an empty list for ``keep <= 1``."""
    if keep <= 1:
        return []
    mine: list[list[int]] = [[] for _ in range(P)]
    for i, p in enumerate(owner):  # bookkeeping: the starts of each pair
        mine[p].append(i)
    out: list[Alternatives] = []
    for rows in mine:
        ranked = sorted(rows, key=lambda i: -score[i] if math.isfinite(score[i]) else math.inf)
        kept = [i for i in ranked if math.isfinite(score[i])][:keep] or rows[:1]
        out.append([(names[i], params[i], noise[i]) for i in kept])
    return out


def _set_many(params: Tensor, slots: Tensor, where: Tensor, value: Tensor | float) -> Tensor:
    """``params (..., D, L, S)`` with
    slot ``slots[d, l]`` of the addends ``where (..., D, L)`` set to ``value`` (broadcast
    to ``where``)."""
    S = params.shape[-1]
    onehot = torch.nn.functional.one_hot(slots.clamp_min(0), S).bool() & where[..., None]
    v = torch.broadcast_to(torch.as_tensor(value, dtype=params.dtype), where.shape)
    return torch.where(onehot, v[..., None], params)


def _get_many(params: Tensor, slots: Tensor) -> Tensor:
    """``(..., D, L)``: slot ``slots[d, l]`` of each addend of ``params (..., D, L, S)``."""
    idx = slots.clamp_min(0).expand(params.shape[:-1])[..., None]
    return params.gather(-1, idx)[..., 0]


def _starts_many(
    params: Tensor,
    symbols: Tensor,
    mask: Tensor,
    tables: tuple[Tensor, ...],
    candidates: Sequence[Sequence[tuple[int, float, float]]],
    starts: int,
) -> tuple[Tensor, list[list[tuple[str, int]]]]:
    """The starts (module docstring) of one kernel on ``B`` datasets at once: ``params (B, D, L, S)`` (the kernel's parameters per dataset), its ``symbols``
    and ``mask (D, L)``, each dataset's periodogram ``candidates``.

    Returns:
        ``block (B, W, D, L, S)``: every possible start of every dataset (the periodogram
        peaks, the harmonics, the rescaled first peak), and per dataset the starts it
        keeps as ``(name, index into W)``, in priority order (periodogram peaks and harmonics
        interleaved, then the rescalings), at most ``starts - 1``.
    """
    period_t, per_ls_t, decay_t, trend_t = tables
    p_slot, l_slot, s_slot = period_t[symbols], per_ls_t[symbols], decay_t[symbols]
    t_slot = trend_t[symbols]
    periodic = (p_slot >= 0) & mask  # (D, L)
    B, D = params.shape[0], params.shape[1]
    dev = params.device
    C = max(1, max((len(c) for c in candidates), default=1))
    J = torch.zeros(B, C, dtype=torch.long)
    PER = torch.ones(B, C, dtype=torch.float64)
    count = []
    has = periodic.any(-1).tolist()  # (D,) a periodic addend in the dimension
    for b, cands in enumerate(candidates):  # bookkeeping: the usable peaks of each dataset
        ok = [(j, per) for j, per, _ in cands if j < D and has[j]]
        for c, (j, per) in enumerate(ok):
            J[b, c], PER[b, c] = j, per
        count.append(len(ok))
    J, PER = J.to(dev), PER.to(dev)
    in_dim = periodic & (torch.arange(D, device=dev) == J[..., None])[..., None]  # (B, C, D, L)
    # the period as a float32 tensor of the peak's period (the starts' historical rounding)
    per32 = PER.clamp_min(PERIOD_FLOOR).to(torch.float32).to(params.dtype)[..., None, None]
    pg = _set_many(params[:, None].expand(B, C, *params.shape[1:]), p_slot, in_dim, per32)
    pg = _set_many(pg, l_slot, in_dim, PERIODIC_LENGTHSCALE)
    least = (DECAY_PERIODS * PER).clamp_min(TREND_LENGTHSCALE)[..., None, None]
    decay = in_dim & (s_slot >= 0)
    pg = _set_many(pg, s_slot, decay, torch.maximum(_get_many(pg, s_slot), least))
    trend = ((t_slot >= 0) & mask).expand(in_dim.shape)
    pg = _set_many(pg, t_slot, trend, _get_many(pg, t_slot).clamp_min(TREND_LENGTHSCALE))
    net_period = _get_many(params, p_slot)  # (B, D, L)
    harm = torch.stack(
        [
            _set_many(
                params, p_slot, periodic.expand(B, D, -1), (net_period * f).clamp_min(PERIOD_FLOOR)
            )
            for f, _ in HARMONICS
        ],
        1,
    )
    first = pg[:, 0]
    ls = _get_many(first, l_slot)
    resc = torch.stack([_set_many(first, l_slot, in_dim[:, 0], ls * f) for f in (0.5, 2.0)], 1)
    block = torch.cat([pg, harm, resc], 1)  # (B, C + 3 + 2, D, L, S)
    H, R = C, C + len(HARMONICS)
    lists = []
    for c in count:  # bookkeeping: the priority order per dataset
        pgs = [("periodogram" if i == 0 else f"periodogram {i + 1}", i) for i in range(c)]
        hs = [(f"harmonic {name}", H + i) for i, (_, name) in enumerate(HARMONICS)]
        rs = [("periodogram, lengthscale x0.5", R), ("periodogram, lengthscale x2", R + 1)]
        rs = rs if c else []
        queues = [pgs[:1], pgs[1:2], hs[:1], pgs[2:3], hs[1:2], pgs[3:], rs[:1], hs[2:], rs[1:]]
        lists.append([x for q in queues for x in q][: starts - 1])
    return block, lists
