"""The starts the multi-start proposes beside the network's own
(:mod:`amorgp.amortizer.stages.multistart`, whose docstring lists them): the periodogram,
harmonic and rescaled starts of a kernel with a periodic term (:func:`periodic_starts`)
and the network's lengthscales stretched (:func:`stretched_starts`; the inputs it reads as
least relevant alone: :func:`relevance_starts`), each as a block of parameters of all
datasets at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from amorgp.kernel_grammar import (
    ELEMENTARY,
    FLOORS,
    ParamKind,
    Vocabulary,
    base_symbol,
)
from amorgp.lazy_kernels import slot_table

__all__ = [
    "DECAY_PERIODS",
    "HARMONICS",
    "PERIODIC_LENGTHSCALE",
    "PERIOD_FLOOR",
    "LADDER",
    "RELEVANCE",
    "RELEVANCE_STARTS",
    "RELEVANCE_STRETCH",
    "STRETCHES",
    "TREND_LENGTHSCALE",
    "is_relevance",
    "is_rung",
    "ladder_peaks",
    "ladder_factor",
    "periodic_starts",
    "relevance_starts",
    "slot_tables",
    "stretched_starts",
]

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

STRETCHES: tuple[tuple[float, str], ...] = ((0.5, "x1/2"), (3.0, "x3"), (9.0, "x9"))
"""Factors applied to all of the network's lengthscales in input units, for every kernel
that has one, with their names (the ``"lengthscales x1/2"``, ``"lengthscales x3"`` and
``"lengthscales x9"`` starts).  On real data with several inputs the network's
lengthscales are a median of about a third of Type-2 ML's
(``docs/benchmarks/default-refine.md``); factors 2 and 4 or 2, 4 and 8 did as well for
the amortized answer and worse for the default fit.  The shorter start, for kernels
without a period only, is for the other basin of a plain kernel (short lengthscale, small
noise), which the default's successive halving of such a kernel's best two starts
reaches from it."""

LADDER: tuple[tuple[float, str], ...] = (
    (1 / 16, "x1/16"),
    (1 / 8, "x1/8"),
    (2**-2.5, "x1/5.66"),
    (1 / 4, "x1/4"),
    (2**-1.5, "x1/2.83"),
    (2**-0.5, "x1/1.41"),
    (2**0.5, "x1.41"),
    (2.0, "x2"),
)
"""Further factors on all of the network's lengthscales in input units, for kernels
without a period only (the ``"lengthscales x1/16"`` ... ``"lengthscales x2"`` starts).
With the network's own start (factor 1) and :data:`STRETCHES` they form a **ladder**
from 1/16 to 9: the calibrated likelihood along it is a profile of one common
lengthscale factor.  A plain kernel has several basins (on a near-noiseless series,
two lengthscales a factor 1.6 apart and 10 nats apart), and the calibrated profile's
local maxima lead to them where the best two starts do not.  These rungs
are scored with every other start, but they do not take the places of the successive
halving's best two starts: the best local maximum that is neither joins them as a third
(:func:`ladder_peaks`, :func:`amorgp.amortizer.stages.multistart.multistart_rows`)."""

RELEVANCE_STRETCH = 5.0
"""Factor applied to the lengthscales of the inputs the network reads as least relevant
(:func:`relevance_starts`).  The network orders the inputs' relevance right (an irrelevant
input's lengthscale longer than every relevant one's in every simulated case of
``docs/benchmarks/relevance.md``) but caps an irrelevant one near one and a half input
ranges, where Type-2 ML goes to hundreds; at five times that the input's kernel is nearly
flat over the range.  Measured without the halving's guard, factors 10 and 30 gained the
amortized answer 3-4 nats more on the simulated cases of ``relevance.md`` (median gap 36.6
at 5, 33.8 at 10, 32.1 at 30) and little on ``realdata-a``, where at 30 the default fit
ended within 1 nat of the best in 2.4 % fewer cells than before the relevance starts (at
5, as many)."""

RELEVANCE_STARTS = 8
"""Most relevance starts per kernel: with more input dimensions, the counts ``k`` of
stretched ones are spread evenly over ``1 ... D' - 1``."""

RELEVANCE = "relevance"
"""Name prefix of the relevance starts (``"relevance 1"``, ``"relevance 2"``...: the
number of inputs stretched)."""


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


def _set_many(params: Tensor, slots: Tensor, where: Tensor, value: Tensor | float) -> Tensor:
    """``params (..., D, L, S)`` with
    slot ``slots[d, l]`` of the addends ``where (..., D, L)`` set to ``value`` (broadcast
    to ``where``)."""
    S = params.shape[-1]
    onehot = torch.nn.functional.one_hot(slots.clamp_min(0), S).bool() & where[..., None]
    v = torch.broadcast_to(
        torch.as_tensor(value, dtype=params.dtype, device=params.device), where.shape
    )
    return torch.where(onehot, v[..., None], params)


def _get_many(params: Tensor, slots: Tensor) -> Tensor:
    """``(..., D, L)``: slot ``slots[d, l]`` of each addend of ``params (..., D, L, S)``."""
    idx = slots.clamp_min(0).expand(params.shape[:-1])[..., None]
    return params.gather(-1, idx)[..., 0]


def periodic_starts(
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


def is_relevance(name: str) -> bool:
    """Whether a start's ``name`` is one of :func:`relevance_starts`'."""
    return name.startswith(RELEVANCE)


def _input_lengthscales(
    params: Tensor, symbols: Tensor, mask: Tensor, vocabulary: Vocabulary
) -> Tensor:
    """``(D, L, S)`` mask of the slots of ``params (B, D, L, S)`` that hold a lengthscale
    in input units, for a kernel's ``symbols`` and ``mask (D, L)``."""
    table = slot_table(vocabulary, params.device).input_lengthscale
    where = table[torch.where(mask, symbols, 0).long()] & mask[..., None]
    return where[: params.shape[1]]


def stretched_starts(
    params: Tensor,
    symbols: Tensor,
    mask: Tensor,
    vocabulary: Vocabulary,
    shorter: bool = True,
    ladder: bool = False,
) -> list[tuple[str, Tensor]]:
    """The network's starts of one kernel on ``B`` datasets, ``params (B, D, L, S)``, with
    every lengthscale in input units times each factor of :data:`STRETCHES` (``shorter=
    False``: only those above 1) and, with ``ladder``, of :data:`LADDER`, as ``(name,
    block (B, D, L, S))``; none for a kernel (``symbols``, ``mask (D, L)``) without such a
    lengthscale."""
    where = _input_lengthscales(params, symbols, mask, vocabulary)
    if not bool(where.any()):
        return []
    factors = [(f, label) for f, label in STRETCHES if shorter or f > 1.0]
    if ladder:
        factors += list(LADDER)
    return [
        (f"lengthscales {label}", torch.where(where, params * f, params))
        for f, label in sorted(factors)
    ]


_FACTORS = {f"lengthscales {label}": f for f, label in (*STRETCHES, *LADDER)}
_RUNGS = frozenset(f"lengthscales {label}" for _, label in LADDER)


def ladder_factor(name: str) -> float | None:
    """The factor on the network's lengthscales of the start ``name``: 1 for the
    network's own, the stretch of a ``"lengthscales x..."`` start, ``None`` for every
    other start (not on the ladder)."""
    return 1.0 if name == "network" else _FACTORS.get(name)


def is_rung(name: str) -> bool:
    """Whether ``name`` is one of the :data:`LADDER` starts."""
    return name in _RUNGS


def ladder_peaks(factors: Sequence[float], scores: Sequence[float]) -> list[int]:
    """The local maxima of a ladder: the indices of the starts (``factors``, ``scores``:
    one row's, finite scores) whose score is at least that of each neighbour in factor
    order."""
    order = sorted(range(len(factors)), key=lambda i: factors[i])
    s = [scores[i] for i in order]
    return [
        order[j]
        for j in range(len(order))
        if (j == 0 or s[j] >= s[j - 1]) and (j == len(order) - 1 or s[j] >= s[j + 1])
    ]


def relevance_starts(
    params: Tensor, symbols: Tensor, mask: Tensor, vocabulary: Vocabulary
) -> list[tuple[str, Tensor]]:
    """The network's starts of one kernel on ``B`` datasets, ``params (B, D, L, S)``, with
    the lengthscales in input units of the ``k`` input dimensions it reads as least
    relevant times :data:`RELEVANCE_STRETCH`, for ``k = 1 ... D' - 1`` (``D'`` the
    dimensions with such a lengthscale; at most :data:`RELEVANCE_STARTS` values of ``k``,
    spread evenly), as ``(name, block (B, D, L, S))``: ``"relevance k"``.  A dimension's
    relevance is the mean log of its input lengthscales (longest: least relevant), per
    dataset.  None for a kernel (``symbols``, ``mask (D, L)``) with fewer than two such
    dimensions."""
    where = _input_lengthscales(params, symbols, mask, vocabulary)  # (D, L, S)
    dims = where.flatten(1).any(1)  # (D,)
    count = int(dims.sum())
    if count < 2:
        return []
    logs = torch.where(where, params.clamp_min(1e-300).log(), torch.zeros_like(params))
    mean = logs.flatten(2).sum(-1) / where.flatten(1).sum(1).clamp_min(1)  # (B, D)
    mean = torch.where(dims, mean, torch.full_like(mean, -torch.inf))
    order = torch.argsort(mean, dim=1, descending=True, stable=True)  # least relevant first
    counts = list(range(1, count))
    if len(counts) > RELEVANCE_STARTS:
        spread = torch.linspace(1, count - 1, RELEVANCE_STARTS).round().long().tolist()
        counts = sorted(set(spread))
    out = []
    for k in counts:
        chosen = torch.zeros_like(mean, dtype=torch.bool).scatter_(1, order[:, :k], True)
        stretch = where & chosen[:, :, None, None]
        out.append((f"{RELEVANCE} {k}", torch.where(stretch, params * RELEVANCE_STRETCH, params)))
    return out
