"""The batched stages of :mod:`amorgp.amortizer.frontends.many` over ``P`` (dataset, kernel) pairs
that each have their own points and targets: kernel matrices, the calibration and the
scoring (:mod:`amorgp.amortizer.stages.calibrate`'s functions on rows of different targets), the
periodogram of many datasets and the multi-start (:mod:`amorgp.amortizer.stages.multistart`) of
every pair in one batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from amorgp.amortizer.networks.forward import encoder_subset
from amorgp.amortizer.stages import calibrate as calibration
from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.multistart import (
    DECAY_PERIODS,
    HARMONICS,
    PERIOD_FLOOR,
    PERIODIC_LENGTHSCALE,
    SCORE_POINTS,
    TREND_LENGTHSCALE,
    has_periodic,
    slot_tables,
)
from amorgp.amortizer.stages.null_starts import NULL_RULES, NullNetwork
from amorgp.amortizer.stages.periodogram import period_candidates_many
from amorgp.amortizer.stages.spectra import Eigen, Tridiagonal, spectrum, tridiagonal_form
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary

__all__ = [
    "Alternatives",
    "RECURRENCE_BYTES",
    "calibrate_rows",
    "log_likelihood_rows",
    "multistart_rows",
    "pair_matrices",
]

RECURRENCE_BYTES = 8 * 2**20
"""Bytes of the calibration's pivot recurrence per chunk of pairs (kept in cache: at 100
points a chunk of 1,400 pairs streamed hundreds of MB per grid pass, several times
slower)."""

CACHE_BYTES = 2 * 2**20
"""Bytes of kernel matrices evaluated and calibrated at once by
:func:`evaluate_and_calibrate` on the CPU (about a core's share of the last-level cache)."""


def pair_matrices(
    X: Tensor, symbols: Tensor, mask: Tensor, params: Tensor, vocab: Vocabulary
) -> Tensor:
    """``(P, n, n)`` kernel matrices of ``P`` pairs, each on its own points ``X (P, n, d)``."""
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    d, L = X.shape[-1], symbols.shape[-1]
    par = params.detach()[:, :d, :L].to(X.dtype)
    return kernel_matrix_dimwise(X, X, symbols, mask, par, vocab, validate=False)


def calibrate_rows(
    Km: Tensor,
    Y: Tensor,
    symbols: Tensor,
    mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
    noise_floor: float | None = None,
) -> calibration.Calibration:
    """:func:`amorgp.amortizer.stages.calibrate.calibrate` with precomputed matrices for ``P``
    pairs that each have their own targets: ``Km (P, n, n)`` (read, not modified),
    ``Y (P, n)``, ``symbols``/``mask (P, d, L)``, ``params (P, D, L, S)``, ``noise (P,)``;
    ``noise_floor`` as there.
    The CPU's method (tridiagonal) on the CPU, ``eigh`` elsewhere.  Each pair's
    ``log_marginal_likelihood`` is its exact likelihood at its calibrated scale and noise
    (of the scaled matrix ``s K``), read from the same spectrum (``-inf`` where the matrix
    is not finite or the value is not a number)."""
    P, n = Y.shape
    if Km.device.type == "cpu":
        step = max(1, CACHE_BYTES // (8 * n * n))
        with calibration.one_thread(Km.device):  # one thread, BLAS included: see one_thread
            forms = [
                tridiagonal_form(
                    Km[s : s + step].to(torch.float64), Y[s : s + step].to(torch.float64)
                )
                for s in range(0, P, step)
            ]
        return _calibrate_forms(forms, symbols, mask, params, noise, vocabulary, noise_floor)
    per_chunk = max(1, calibration.CHUNK_ELEMENTS // (n * n))

    def spectra() -> Iterator[tuple[slice, Eigen | Tridiagonal, Tensor]]:
        for start in range(0, P, per_chunk):
            sl = slice(start, min(P, start + per_chunk))
            yield (sl, *spectrum(Km[sl].to(torch.float64), Y[sl].to(torch.float64), "eigh"))

    return calibration.calibrate_spectra(
        spectra(), symbols, mask, params, noise, vocabulary,
        noise_min=calibration.min_noise(noise_floor),
    )  # fmt: skip


def evaluate_and_calibrate(
    X: Tensor,
    Y: Tensor,
    symbols: Tensor,
    mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
) -> calibration.Calibration:
    """:func:`calibrate_rows` of the kernel matrices of ``P`` pairs on their own points
    ``X (P, n, d)`` (:func:`pair_matrices`).  On the CPU the matrices are evaluated and
    tridiagonalised by chunks of :data:`CACHE_BYTES` (each chunk's matrices are still in
    cache when their tridiagonal form reads them, and the form is computed in their
    memory), then the grid search runs on the forms of all pairs."""
    P, n = Y.shape
    if X.device.type != "cpu":
        Km = pair_matrices(X, symbols, mask, params, vocabulary)
        return calibrate_rows(Km, Y, symbols, mask, params, noise, vocabulary)
    step = max(1, CACHE_BYTES // (8 * n * n))
    forms = []
    with calibration.one_thread(X.device):  # one thread, BLAS included: see one_thread
        for s in range(0, P, step):
            sl = slice(s, min(P, s + step))
            Km = pair_matrices(X[sl], symbols[sl], mask[sl], params[sl], vocabulary)
            forms.append(tridiagonal_form(Km, Y[sl].to(torch.float64), overwrite=True))
    return _calibrate_forms(forms, symbols, mask, params, noise, vocabulary)


def _calibrate_forms(
    forms: Sequence[tuple[Tensor, Tensor, Tensor]],
    symbols: Tensor,
    mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
    noise_floor: float | None = None,
) -> calibration.Calibration:
    """:func:`~amorgp.amortizer.stages.calibrate.calibrate_spectra` of the tridiagonal forms
    ``(a, b2, yy)`` of consecutive chunks of the pairs
    (:func:`~amorgp.amortizer.stages.spectra.tridiagonal_form`), searched by chunks of
    :data:`RECURRENCE_BYTES` of the pivot recurrence."""
    noise_min = calibration.min_noise(noise_floor)
    if not forms:  # no pairs
        return calibration.calibrate_spectra(
            (), symbols, mask, params, noise, vocabulary, noise_min=noise_min
        )
    a, b2, yy = (torch.cat(t) for t in zip(*forms))
    P, n = a.shape
    # the pivot recurrence streams (n, rows, grid) float64 arrays
    per_chunk = max(1, RECURRENCE_BYTES // (8 * n * 2 * (calibration.COARSE_POINTS + 1)))

    def spectra() -> Iterator[tuple[slice, Eigen | Tridiagonal, Tensor]]:
        for start in range(0, P, per_chunk):
            sl = slice(start, min(P, start + per_chunk))
            spec = Tridiagonal(a[sl], b2[sl], yy[sl])
            yield sl, spec, spec.finite

    return calibration.calibrate_spectra(
        spectra(), symbols, mask, params, noise, vocabulary, noise_min=noise_min
    )


def log_likelihood_rows(Km: Tensor, Y: Tensor, noise: Tensor) -> Tensor:
    """The exact log marginal likelihoods of rows with their own targets ``Y (P, n)``
    (:func:`amorgp.amortizer.stages.batched.exact_solve`; ``-inf`` where the factorisation
    fails); ``Km (P, n, n)`` is consumed (the noise added in place)."""
    Km.diagonal(dim1=-2, dim2=-1).add_(noise[:, None])
    return exact_solve(Km, Y)[2]


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
    net_lml: Tensor | None = None,
    calibrated: bool = True,
    keep: int = 1,
) -> tuple[Tensor, Tensor, list[str], list[int], list[Alternatives]]:
    """:func:`amorgp.amortizer.stages.multistart.multistart` (``refine=0``) of the ``B K`` pairs of
    ``B`` datasets ``X (B, n, d)``, ``Y (B, n)`` (``n <= MAX_POINTS``) and ``K`` structures:
    the starts of every pair calibrated and scored in one batch.  Returns the winners'
    ``params``, ``noise``, the start names and the pairs whose winner is not the network's.

    ``net_lml (B K,)``: the exact log marginal likelihoods of the pairs at ``params`` and
    ``noise`` when known (the factorisation of all points): with at most
    :data:`~amorgp.amortizer.stages.multistart.SCORE_POINTS` points they are the network start's
    score, which is then not evaluated again.

    ``calibrated=False`` (as :func:`~amorgp.amortizer.stages.multistart.multistart`'s): the
    network's starts are calibrated and scored on the scoring points with the others,
    and every pair's winner is returned calibrated there (on all points with at most
    :data:`~amorgp.amortizer.stages.multistart.SCORE_POINTS`); every pair is listed as moved.

    ``keep > 1``: also each pair's best ``keep`` starts, best first (as
    :attr:`~amorgp.amortizer.stages.multistart.MultiStart.alternatives`: what ``refine="auto"``
    halves, :func:`amorgp.amortizer.stages.refine_rows.halve_rows`); else an empty list."""
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
    if net_lml is not None and sub is None:
        scores = net_lml.to(torch.float64)[at_h]
    else:
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
    """:func:`amorgp.amortizer.stages.multistart._set` on a batch: ``params (..., D, L, S)`` with
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
    """:func:`amorgp.amortizer.stages.multistart._starts_of` of one kernel on ``B`` datasets at
    once: ``params (B, D, L, S)`` (the kernel's parameters per dataset), its ``symbols``
    and ``mask (D, L)``, each dataset's periodogram ``candidates``.

    Returns:
        ``block (B, W, D, L, S)``: every possible start of every dataset (the periodogram
        peaks, the harmonics, the rescaled first peak), and per dataset the starts it
        keeps as ``(name, index into W)``, in :func:`_starts_of`'s order.
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
    # the period as _starts_of sets it: a float32 tensor of the Python float
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
    for c in count:  # bookkeeping: _starts_of's priority order per dataset
        pgs = [("periodogram" if i == 0 else f"periodogram {i + 1}", i) for i in range(c)]
        hs = [(f"harmonic {name}", H + i) for i, (_, name) in enumerate(HARMONICS)]
        rs = [("periodogram, lengthscale x0.5", R), ("periodogram, lengthscale x2", R + 1)]
        rs = rs if c else []
        queues = [pgs[:1], pgs[1:2], hs[:1], pgs[2:3], hs[1:2], pgs[3:], rs[:1], hs[2:], rs[1:]]
        lists.append([x for q in queues for x in q][: starts - 1])
    return block, lists
