"""Amortized multi-start: several starts per periodic kernel, scored by the exact likelihood.

The log marginal likelihood of a kernel with a periodic term has one mode per plausible
period (the true one, its harmonics, and a smooth long-period explanation), separated by
barriers that gradient steps do not cross.  The network gives one guess of each period;
where it is wrong, calibration and L-BFGS stay in the wrong mode.  :func:`multistart`
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
kernel without a periodic term has the two null starts only.

:func:`multistart` also returns the best few starts of each kernel (:attr:`MultiStart.
alternatives`): ``refine="auto"`` refines them and keeps the best
(:func:`amorgp.amortizer.stages.refine.refine_starts`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.networks.structures import encoded, pick
from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.null_starts import NULL_RULES, null_parameters
from amorgp.amortizer.stages.periodogram import (
    MAX_FREQUENCIES,
    PEAKS,
    lomb_scargle,
    period_candidates,
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
    "MultiStart",
    "check_starts",
    "has_periodic",
    "lomb_scargle",
    "multistart",
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


@dataclass(frozen=True)
class MultiStart:
    """The best start of each of ``K`` kernels.

    Attributes:
        params: ``(K, D, L, P)`` parameters of the winning starts (layout, dtype and device
            as given).
        noise: ``(K,)`` their noise variances.
        start: per kernel, the name of the winning start (``"network"`` where the
            prediction was kept or the kernel has no periodic term).
        log_marginal_likelihood: ``(K,)`` the winners' exact log marginal likelihood on the
            scoring points (at most :data:`SCORE_POINTS`; normalised units).
        alternatives: per kernel, the best few starts ``(name, params (D, L, P), noise)``
            in decreasing likelihood, the winner first.
        calibrated_on_all: whether the winners' scale and noise are calibrated on all the
            points (else on the scoring points only: see ``calibrated`` of
            :func:`multistart`).
    """

    params: Tensor
    noise: Tensor
    start: list[str]
    log_marginal_likelihood: Tensor
    alternatives: list[list[tuple[str, Tensor, Tensor]]]
    calibrated_on_all: bool = True


# -- starts ----------------------------------------------------------------------------------
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


def _set(params: Tensor, slots: Tensor, where: Tensor, value: Tensor) -> Tensor:
    """``params (D, L, P)`` with slot ``slots[d, l]`` of the addends ``where (D, L)`` set to
    ``value`` (broadcast to ``(D, L)``)."""
    P = params.shape[-1]
    onehot = torch.nn.functional.one_hot(slots.clamp_min(0), P).bool() & where[..., None]
    return torch.where(onehot, value.expand(where.shape)[..., None].to(params), params)


def _get(params: Tensor, slots: Tensor) -> Tensor:
    """``(D, L)``: slot ``slots[d, l]`` of each addend (garbage where ``slots < 0``)."""
    return params.gather(-1, slots.clamp_min(0)[..., None])[..., 0]


def _starts_of(
    params: Tensor,
    symbols: Tensor,
    mask: Tensor,
    tables: tuple[Tensor, Tensor, Tensor, Tensor],
    candidates: Sequence[tuple[int, float, float]],
    starts: int,
) -> list[tuple[str, Tensor]]:
    """Up to ``starts - 1`` alternative starts ``(name, params (D, L, P))`` of one kernel
    (module docstring); ``[]`` without a periodic addend."""
    period_t, per_ls_t, decay_t, trend_t = tables
    p_slot, l_slot, s_slot = period_t[symbols], per_ls_t[symbols], decay_t[symbols]  # (D, L)
    t_slot = trend_t[symbols]
    periodic = (p_slot >= 0) & mask
    if not bool(periodic.any()) or starts <= 1:
        return []
    D = params.shape[0]
    net_period = _get(params, p_slot)
    pg: list[tuple[str, Tensor]] = []
    first_dim = periodic
    for j, period, _ in candidates:  # a handful
        if j >= D or not bool(periodic[j].any()):
            continue
        in_dim = periodic & (torch.arange(D, device=params.device) == j)[:, None]
        p = _set(params, p_slot, in_dim, torch.tensor(max(period, PERIOD_FLOOR)))
        p = _set(p, l_slot, in_dim, torch.tensor(PERIODIC_LENGTHSCALE))
        decay = in_dim & (s_slot >= 0)
        least = max(DECAY_PERIODS * period, TREND_LENGTHSCALE)
        p = _set(p, s_slot, decay, _get(p, s_slot).clamp_min(least))
        trend = (t_slot >= 0) & mask
        p = _set(p, t_slot, trend, _get(p, t_slot).clamp_min(TREND_LENGTHSCALE))
        if not pg:
            first_dim = in_dim
        pg.append(("periodogram" if not pg else f"periodogram {len(pg) + 1}", p))
    harmonics = [
        (
            f"harmonic {name}",
            _set(params, p_slot, periodic, (net_period * f).clamp_min(PERIOD_FLOOR)),
        )
        for f, name in HARMONICS
    ]
    rescaled: list[tuple[str, Tensor]] = []
    if pg:
        name, best = pg[0]
        for f, tag in ((0.5, "x0.5"), (2.0, "x2")):
            ls = _get(best, l_slot) * f
            rescaled.append((f"{name}, lengthscale {tag}", _set(best, l_slot, first_dim, ls)))
    # priority: periodogram peaks and harmonics interleaved, then the rescalings
    order: list[tuple[str, Tensor]] = []
    queues = [pg[:1], pg[1:2], harmonics[:1], pg[2:3], harmonics[1:2], pg[3:], rescaled[:1]]
    queues += [harmonics[2:], rescaled[1:]]
    for q in queues:
        order.extend(q)
    return order[: starts - 1]


def _matrices(
    X: Tensor, symbols: Tensor, mask: Tensor, params: Tensor, vocab: Vocabulary
) -> Tensor:
    """``(B, n, n)`` kernel matrices of ``B`` parameter sets on the points ``X (n, d)``."""
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    B, (n, d) = params.shape[0], X.shape
    return kernel_matrix_dimwise(
        X.expand(B, n, d), X.expand(B, n, d), symbols, mask, params, vocab, validate=False
    )


def _log_likelihood(Km: Tensor, y: Tensor, noise: Tensor) -> Tensor:
    """``(B,)`` exact log marginal likelihood of ``y`` under the kernel matrices
    ``Km (B, n, n)`` plus ``noise (B,)`` (:func:`amorgp.amortizer.stages.batched.exact_solve`;
    ``-inf`` where the factorisation fails)."""
    n = Km.shape[-1]
    A = Km + noise[:, None, None] * torch.eye(n, dtype=Km.dtype, device=Km.device)
    return exact_solve(A, y)[2]


def multistart(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
    noise: Tensor,
    starts: int = DEFAULT_STARTS,
    seed: int = 0,
    *,
    keep: int = REFINE_STARTS,
    calibrated: bool = True,
) -> MultiStart:
    """The best of several starts per kernel with a periodic term (module docstring).

    Args:
        Xn, yn: normalised data ``(n, d)``, ``(n,)``.
        structures: the ``K`` kernel structures.
        vocabulary: the symbol vocabulary of the parameter layout.
        params: ``(K, d, L, P)`` the network's (calibrated) parameters, normalised units.
        noise: ``(K,)`` their noise variances.
        starts: starts per periodic kernel, the network's included (``1``: the prediction
            is returned as it is).
        seed: seed of the point subsets (above :data:`SCORE_POINTS` and the calibration's
            ``MAX_POINTS``).
        keep: starts per kernel listed in :attr:`MultiStart.alternatives` (what
            ``refine="auto"`` refines: :func:`amorgp.amortizer.stages.refine.refine_starts`).
        calibrated: ``params`` and ``noise`` are calibrated on all the points already;
            the winners that are other starts are calibrated on all the points in the
            end.  ``False``: the network's starts are calibrated on the scoring points
            with the others, in the same batched pass, and the winners are left
            calibrated on the scoring points (:attr:`MultiStart.calibrated_on_all` says
            whether those are all the points) for the caller to calibrate on all of them
            together with its own factorisation.

    Returns:
        A :class:`MultiStart`.
    """
    from amorgp.amortizer.networks.forward import encoder_subset
    from amorgp.amortizer.stages.calibrate import MAX_POINTS, calibrate

    starts = check_starts(starts)
    K = len(structures)
    dev = params.device
    X64 = Xn.detach().to(dev, torch.float64)
    y64 = yn.detach().to(dev, torch.float64)
    idx = encoder_subset(X64.shape[0], MAX_POINTS, seed)
    Xs, ys = (X64, y64) if idx is None else (X64[idx.to(dev)], y64[idx.to(dev)])
    sub = encoder_subset(X64.shape[0], SCORE_POINTS, seed)
    Xc, yc = (X64, y64) if sub is None else (X64[sub.to(dev)], y64[sub.to(dev)])
    d = X64.shape[1]
    sym, msk = encoded(structures, vocabulary, dev)
    L = sym.shape[2]
    p64 = params.detach().to(torch.float64)[:, :d, :L]
    n64 = noise.detach().to(torch.float64)
    tables = tuple(t.to(dev) for t in slot_tables(vocabulary))
    periodic = [has_periodic(s) for s in structures]
    cands = period_candidates(Xs, ys) if starts > 1 and any(periodic) else []
    owner, names, alt = [], [], []
    nulls = []
    if starts > 1:  # the null starts of every kernel (null_starts.py); the periodogram's
        # peaks are only read by periods, which only periodic kernels have: cands serves
        nulls = [
            (rule, null_parameters(rule, Xs, ys, structures, vocabulary, cands)[0])
            for rule in NULL_RULES
        ]
    for k in range(K):  # per kernel: a few starts each
        extra = _starts_of(p64[k], sym[k], msk[k], tables, cands, starts)  # type: ignore[arg-type]
        for name, p in [*extra, *((rule, params_[k]) for rule, params_ in nulls)]:
            owner.append(k)
            names.append(name)
            alt.append(p)
    own = torch.tensor(owner, dtype=torch.long, device=dev)
    all_params, all_noise = p64, n64
    lml = torch.full((K,), math.nan, dtype=torch.float64, device=dev)
    if alt:
        # every start's kernel matrix on the scoring points is evaluated once and
        # calibrated on; the calibration's exact likelihood (of s times the matrix, the
        # calibrated kernel's) is the start's score
        first = K if calibrated else 0
        every = torch.cat([torch.arange(K, device=dev), own])[first:]
        cand = torch.cat([p64, torch.stack(alt)])[first:]
        cand_noise = torch.cat([n64, n64[own]])[first:]
        cand_structures = pick(structures, every.tolist())
        Km = _matrices(Xc, sym[every], msk[every], cand, vocabulary)
        cal = calibrate(
            Xc, yc, cand_structures, vocabulary, cand, cand_noise, seed=seed, matrices=Km,
            overwrite_matrices=True,
        )  # fmt: skip
        score = cal.log_marginal_likelihood
        del Km
        if calibrated:  # the network's own starts, calibrated on all points: scored here
            all_params = torch.cat([p64, cal.params])
            all_noise = torch.cat([n64, cal.noise])
            Kr = _matrices(Xc, sym, msk, p64, vocabulary)
            score = torch.cat([_log_likelihood(Kr, yc, n64), score])
        else:
            all_params, all_noise = cal.params, cal.noise
        lml = score
    all_owner = torch.cat([torch.arange(K, device=dev), own])
    all_names = ["network"] * K + names
    best = list(range(K))
    alternatives: list[list[tuple[str, Tensor, Tensor]]] = []
    for k in range(K):  # bookkeeping per kernel
        mine = (all_owner == k).nonzero()[:, 0]
        order = [k]
        if len(mine) > 1:
            ranked = mine[torch.argsort(lml[mine], descending=True, stable=True)].tolist()
            if bool(lml[ranked[0]] > lml[k]):  # ties keep the network's start
                best[k] = int(ranked[0])
            order = [best[k]] + [int(i) for i in ranked if int(i) != best[k]]
            order = [i for i in order if math.isfinite(float(lml[i]))][:keep] or [k]
        alternatives.append([(all_names[i], all_params[i], all_noise[i]) for i in order])
    moved = [k for k in range(K) if best[k] != k]
    if calibrated and moved and sub is not None:  # the winners' scale and noise on all points
        won = torch.tensor([best[k] for k in moved], device=dev)
        cal = calibrate(
            X64,
            y64,
            pick(structures, moved),
            vocabulary,
            all_params[won],
            all_noise[won],
            seed=seed,
        )
        all_params[won], all_noise[won] = cal.params, cal.noise
    winner = torch.tensor(best, device=dev)
    out = params.detach().clone()
    out[:, :d, :L] = all_params[winner].to(out.dtype)
    result = MultiStart(
        params=out,
        noise=all_noise[winner].to(noise.dtype),
        start=[all_names[i] for i in best],
        log_marginal_likelihood=lml[winner],
        alternatives=alternatives,
        calibrated_on_all=calibrated or (bool(alt) and sub is None),
    )
    return result


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
