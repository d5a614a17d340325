"""Refinement of amortized hyperparameters by Type-2 ML (L-BFGS), warm-started at the network.

The objective is the exact log marginal likelihood

``log p(y | theta) = -y^T (K + sigma^2 I)^{-1} y / 2 - log|K + sigma^2 I| / 2 - n log(2 pi) / 2``,
evaluated by :class:`LogMarginalLikelihood` with its gradient in closed form
(``W = (alpha alpha^T - (K + sigma^2 I)^{-1}) / 2``, ``d/d theta_i = <W, dK/d theta_i>``),
the inputs' pairwise differences computed once per refinement and each elementary
kernel's unit factor and its derivatives taken from its registration
(:class:`amorgp.lazy_kernels.TorchElementary`: ``unit_and_grads``, else forward-mode
differentiation of its torch form).  The optimiser is
:func:`amorgp.diff_linalg.optim.lbfgs` (strong Wolfe line search); it moves the log
parameters ``z = log(theta - floor)`` (the transform's floors), so the network's errors,
which are factors, are corrected at the same pace for a lengthscale of 0.1 or of 10.
Fixed parameters, bounds and the noise floor (:mod:`amorgp.amortizer.stages.constraints`) enter
through that map: a fixed parameter is not among ``z``, a bounded one moves as
``theta = exp(log low + (log high - log low) sigmoid(z))``.

``refine=k`` runs at most ``k`` L-BFGS iterations per kernel (fewer when L-BFGS's own
tolerances stop it); each iteration's strong-Wolfe line search may use up to
:data:`~amorgp.amortizer.stages.objective.EVALS_PER_ITERATION` evaluations of the objective, so the iteration count, not an
evaluation budget, bounds the refinement.  ``refine="auto"`` runs rounds of
:data:`AUTO_ROUND` iterations of one L-BFGS run per kernel, each round going on where
the previous one stopped (its direction and curvature pairs kept:
:class:`~amorgp.diff_linalg.optim.LBFGSRun`), until the log marginal
likelihood of a kernel improves by less than :data:`AUTO_ATOL` nats or :data:`AUTO_RTOL`
relatively (``Delta <= max(AUTO_ATOL, AUTO_RTOL * |LML|)``) over a round, L-BFGS
converges, or :data:`AUTO_MAX_ITERS` iterations have run.

With several starts per kernel (:mod:`amorgp.amortizer.stages.multistart`), the pipeline's
``refine="auto"`` first refines the best :data:`~amorgp.amortizer.
multistart.REFINE_STARTS` starts of each kernel by successive halving (rounds of
:data:`STARTS_ROUND` iterations, the better half kept after each; :func:`refine_starts`)
and continues from the last one left: a start that scores lower before refinement (a
harmonic of the period, a different lengthscale) may lead to the higher optimum.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from amorgp.amortizer.stages.objective import LogMarginalLikelihood
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary

if TYPE_CHECKING:
    from amorgp.amortizer.stages.constraints import KernelConstraints

__all__ = [
    "AUTO_ATOL",
    "AUTO_MAX_ITERS",
    "AUTO_ROUND",
    "AUTO_RTOL",
    "STARTS_ROUND",
    "LONG_ROUND",
    "LONG_ROUND_POINTS",
    "HALVING_POINTS",
    "halving_round",
    "Refinement",
    "SKIPPED",
    "check_refine",
    "resolve_refine",
    "default_refines",
    "DEFAULT_POINTS",
    "SUBSET",
    "SUBSET_POINTS",
    "default_subset",
    "typical_iterations",
    "dense_groups",
    "refine",
    "refine_in_groups",
    "refine_starts",
]

AUTO_ROUND = 10
"""L-BFGS iterations per round of ``refine="auto"``."""

AUTO_RTOL = 1e-4
"""Relative improvement of the log marginal likelihood over one round below which
``refine="auto"`` stops."""

STARTS_ROUND = 5
"""L-BFGS iterations of a round of successive halving over the best starts
(:func:`refine_starts`), and Fisher-scoring evaluations of a round of
:func:`~amorgp.amortizer.stages.refine_rows.halve_rows` on datasets of at most
:data:`LONG_ROUND_POINTS` points (:func:`halving_round`)."""

LONG_ROUND = 10
"""Fisher-scoring evaluations of a round of the successive halving
(:func:`~amorgp.amortizer.stages.refine_rows.halve_rows`) on datasets of more than
:data:`LONG_ROUND_POINTS` points (:func:`halving_round`): there the likelihood is
sharper and its starts take longer to converge, so that five evaluations rank their basins
less well.  On the `realdata-a` datasets at 500 points (53 cells) the default ended more
than a nat higher in 12 cells and lower in none, for a third more time; at 300 points
(87 cells) 6 higher and 4 lower; on the 24 paper kernels at 500 points, and for ``SE``
at 600-2,000 points, the same optima (``docs/guide/refine.md``)."""

LONG_ROUND_POINTS = 400
"""Points above which a round of the Fisher-scoring successive halving is
:data:`LONG_ROUND` evaluations long, not :data:`STARTS_ROUND` (:func:`halving_round`)."""

HALVING_POINTS: int | None = None
"""Most points the successive halving of the best starts
(:func:`~amorgp.amortizer.stages.refine_rows.halve_rows`) runs its rounds on (``None``:
all points, the default): on larger datasets (or refinement subsets) the rounds run on a
seeded subset of this many points (:func:`~amorgp.amortizer.networks.forward.encoder_subset`,
the amortizer's seed) and the winner, from the point its rounds reached, is refined on
all points.  Measured at 1,000 (``docs/benchmarks/halving-subset.md``): 1.7-2.9x faster
to the same optima on five synthetic tasks of 1,500-6,000 points, but on eight unseen
tables of 1,500 rows (72 cells) within 1 nat of the better of the two fits in 80.6 %
of the cells against 86.1 % on all points, for 1.39x less time; so it is off."""

AUTO_ATOL = 0.05
"""Improvement of the log marginal likelihood (nats) over one round below which
``refine="auto"`` stops, whatever its size (a twentieth of the 1-nat resolution at which
model comparisons read it)."""

AUTO_MAX_ITERS = 500
"""Most L-BFGS iterations ``refine="auto"`` runs per kernel."""

DEFAULT_POINTS = 5000
"""Most points of a dataset that the default (``refine=None``) refines where Fisher
scoring does not apply (above :data:`~amorgp.amortizer.stages.fisher.MAX_POINTS`): by
L-BFGS, as ``refine="auto"``, in float64 and where every kernel of the call fits the dense
limit (:func:`default_refines`).  An evaluation costs one factorisation and one inverse of
``n x n``; at 3,000 points in 6 inputs a fit of ``SE`` takes about 70 s of one core
(``docs/benchmarks/refine-stop.md``), 0.06x scikit-learn's with 3 restarts,
and it grows as ``n^3``: above this size the default refines on a seeded subset of
:data:`SUBSET_POINTS` points instead (:func:`default_subset`)."""

SUBSET_POINTS = 2000
"""Points of the seeded subset on which the default (``refine=None``) refines datasets
that it does not refine whole (:func:`default_refines`: more than :data:`DEFAULT_POINTS`
points, or a kernel beyond the dense limit) where Fisher scoring applies to this many
points (float64, the memory budget): the successive halving and Fisher scoring of
``refine="auto"`` on the subset (:func:`~amorgp.amortizer.networks.forward.encoder_subset`,
seeded by the amortizer's ``seed``), every later stage on all points.  The result says
:data:`SUBSET`: the optimum of the subset, not of all points.  On 6,000 points it ends
about a nat below the optimum of all points, in 0.03x the time of ``refine="auto"`` there
(L-BFGS on all points), where the amortized answer is 56-71 nats below it
(``docs/benchmarks/subset-refine.md``)."""

SUBSET = "subset"
"""``refine_status`` of a result that the default refined on a seeded subset of
:data:`SUBSET_POINTS` points (:func:`default_subset`): at the subset's optimum, which is
not checked on all points (its predicted gain and gradient norm there are NaN)."""

Refine = int | Literal["auto"]

SKIPPED = "skipped"
"""``refine_status`` of a result whose default refinement (``refine=None``) did not run
(:func:`default_refines`: float32 GP algebra, more than :data:`DEFAULT_POINTS` points, or
a kernel beyond the dense limit of the memory budget, and no subset refinement either:
:func:`default_subset`; :func:`resolve_refine`)."""


def default_refines(fisher: bool, n: int, float64: bool, dense: bool) -> bool:
    """Whether the default (``refine=None``) refines datasets of ``n`` points: wherever
    Fisher scoring applies (``fisher``), and by L-BFGS up to :data:`DEFAULT_POINTS` points
    in float64 (``float64``) where every kernel fits the dense limit (``dense``)."""
    return fisher or (float64 and dense and n <= DEFAULT_POINTS)


def halving_round(n: int) -> int:
    """Fisher-scoring evaluations per round of the successive halving on datasets (or
    the refinement's subset) of ``n`` points: :data:`STARTS_ROUND`, and
    :data:`LONG_ROUND` above :data:`LONG_ROUND_POINTS` points."""
    return LONG_ROUND if n > LONG_ROUND_POINTS else STARTS_ROUND


def default_subset(refines: bool, n: int, fisher_on_subset: bool) -> int:
    """The points of the subset on which the default refines datasets of ``n`` points: 0
    (none) where it refines them whole (``refines``, :func:`default_refines`), where they
    have at most :data:`SUBSET_POINTS` points, or where Fisher scoring does not apply to
    :data:`SUBSET_POINTS` points (``fisher_on_subset``: float32, the memory budget);
    else :data:`SUBSET_POINTS`."""
    if refines or n <= SUBSET_POINTS or not fisher_on_subset:
        return 0
    return SUBSET_POINTS


def resolve_refine(refine: Refine | None, refines: bool) -> tuple[Refine, str]:
    """The refinement that runs for ``refine`` (:func:`check_refine`'s) on rows that the
    default refines (``refines``, :func:`default_refines`) or not, and the status of rows
    it leaves alone (``"none"``, or :data:`SKIPPED` for the default).

    ``None``, the default: ``"auto"`` wherever it refines (the best periodic starts of
    each kernel refined by successive halving, then every row refined until it stops by
    itself: by Fisher scoring until the predicted gain is below
    :data:`~amorgp.amortizer.stages.fisher.GAIN_TOL`, a row already at its optimum taking
    no step; by L-BFGS rounds above :data:`~amorgp.amortizer.stages.fisher.MAX_POINTS`
    points); elsewhere no refinement, said by the status :data:`SKIPPED` (an explicit
    ``refine="auto"`` or ``k`` runs L-BFGS there, within the dense limit).
    """
    if refine is None:
        return ("auto", "none") if refines else (0, SKIPPED)
    return refine, "none"


def typical_iterations(refine: Refine | None) -> int:
    """The L-BFGS iterations a refinement typically runs per kernel, for time estimates:
    ``refine`` itself, or for ``"auto"`` and the default (``None``) two rounds of
    :data:`AUTO_ROUND` (most fits stop after the second; at most :data:`AUTO_MAX_ITERS`)."""
    return 2 * AUTO_ROUND if refine in ("auto", None) else int(refine)


Progress = Callable[[str, int, int], None]


def check_refine(refine: Any) -> int | Literal["auto"] | None:
    """``refine`` as a plain ``int``, ``"auto"`` or ``None`` (the default,
    :func:`resolve_refine`).

    Raises:
        OptionError: anything but a non-negative integral number (``int``, ``numpy.int64``...;
            not ``bool``), ``"auto"`` or ``None``.
    """
    if refine is None:
        return None
    if isinstance(refine, str) and refine == "auto":
        return "auto"
    if isinstance(refine, bool) or not isinstance(refine, numbers.Integral) or int(refine) < 0:
        raise OptionError(f"refine must be a non-negative integer, 'auto' or None, got {refine!r}")
    return int(refine)


@dataclass(frozen=True)
class Refinement:
    """Refined parameters of ``K`` kernels.

    Attributes:
        params: ``(K, D, L, P)`` refined parameters (same layout, dtype, device as given).
        noise: ``(K,)`` refined noise variances.
        iterations: L-BFGS iterations run per kernel.
        status: per kernel ``"converged"``, ``"max_iters"`` or ``"failed"``.
        log_marginal_likelihood: per kernel, the exact log marginal likelihood at the
            refined parameters (``nan`` where no iteration ran).
        grad_norm: per kernel, the norm of the gradient in the log parameters there
            (``nan`` where no iteration ran).
    """

    params: Tensor
    noise: Tensor
    iterations: list[int]
    status: list[str]
    log_marginal_likelihood: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)


def refine(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
    noise: Tensor,
    steps: int | Literal["auto"],
    progress: Progress | None = None,
    constraints: Sequence[KernelConstraints] | None = None,
) -> Refinement:
    """Type-2 ML L-BFGS warm-started at ``params (K, D, L, P)`` and ``noise (K,)``.

    Args:
        Xn, yn: normalised data ``(n, d)``, ``(n,)``.
        structures: the ``K`` kernel structures.
        vocabulary: the symbol vocabulary of the parameter layout.
        params, noise: the network's prediction (normalised units).
        steps: most L-BFGS iterations, or ``"auto"`` (see the module docstring).
        progress: called as ``progress("refine", iterations_done, budget)``.
        constraints: per kernel, its fixed values, bounds and noise floor
            (:mod:`amorgp.amortizer.stages.constraints`; ``None``: none, the transform's floors).

    A kernel whose refinement fails keeps its last finite iterate.
    """
    X64, y64 = (t.detach().to("cpu", torch.float64) for t in (Xn, yn))
    D = max(s.n_dims for s in structures)
    L = max(s.max_addends for s in structures)
    P = params.shape[-1]
    cur = params.detach().to("cpu", torch.float64)[:, :D, :L].clone()
    cur_noise = noise.detach().to("cpu", torch.float64).clone()
    K = len(structures)
    budget = AUTO_MAX_ITERS if steps == "auto" else steps
    per_round = AUTO_ROUND if steps == "auto" else steps
    iterations, status = [0] * K, ["max_iters"] * K
    objectives: list[LogMarginalLikelihood] = []
    for k, s in enumerate(structures):  # one set of packed pairs for all of them
        cons = None if constraints is None else constraints[k]
        share = objectives[0] if objectives else None
        objectives.append(LogMarginalLikelihood(X64, y64, s, cons, share=share))
    z = [f.to_log(cur[k], cur_noise[k]) for k, f in enumerate(objectives)]
    # one L-BFGS run per kernel, continued round after round (its curvature pairs kept)
    runs = [f.lbfgs_run(z[k]) for k, f in enumerate(objectives)]
    active = list(range(K))
    last: list[float | None] = [None] * K
    norms = [math.nan] * K
    done = 0
    while active and done < budget:
        n_iter = min(per_round, budget - done)
        still = []
        for k in active:  # one L-BFGS run per kernel (its own line search)
            z[k], lml, its, st, norms[k] = objectives[k].maximise(z[k], n_iter, runs[k])
            iterations[k] += its
            prev = last[k]
            last[k] = lml
            stalled = prev is not None and lml - prev <= max(AUTO_ATOL, AUTO_RTOL * abs(lml))
            if st != "max_iters" or (steps == "auto" and stalled):
                status[k] = "converged" if st != "failed" else "failed"
            else:
                still.append(k)
        active = still if steps == "auto" else []
        done += n_iter
        if progress is not None:
            progress("refine", min(done, budget), budget)
    for k, f in enumerate(objectives):
        p, nz = f.from_log(z[k])
        cur[k, : p.shape[0], : p.shape[1], : p.shape[2]] = p
        cur_noise[k] = nz
    out = params.detach().clone()
    out[:, :D, :L, :P] = cur[..., :P].to(device=params.device, dtype=params.dtype)
    lmls = [math.nan if v is None else v for v in last]
    return Refinement(
        out, cur_noise.to(device=noise.device, dtype=noise.dtype), iterations, status, lmls, norms
    )


def dense_groups(terms: Sequence[int], fits: Callable[[int], bool]) -> list[list[int]] | None:
    """Consecutive groups of kernels (``terms`` addends each) whose addends ``fits`` says
    the dense backend evaluates at once, or ``None`` if one kernel alone does not fit."""
    groups: list[list[int]] = []
    total = 0
    for i, t in enumerate(terms):
        if not fits(t):
            return None
        if groups and fits(total + t):
            groups[-1].append(i)
            total += t
        else:
            groups.append([i])
            total = t
    return groups


def refine_in_groups(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
    noise: Tensor,
    steps: int | Literal["auto"],
    groups: Sequence[Sequence[int]],
    progress: Progress | None = None,
    constraints: Sequence[KernelConstraints] | None = None,
) -> Refinement:
    """:func:`refine` run on each group of kernels in turn (see :func:`dense_groups`); the
    result is in the order of ``structures``."""
    params, noise = params.detach().clone(), noise.detach().clone()
    K = len(structures)
    iterations, status = [0] * K, ["none"] * K
    lmls, norms = [math.nan] * K, [math.nan] * K
    for group in groups:
        idx = list(group)
        ref = refine(
            Xn,
            yn,
            [structures[i] for i in idx],
            vocabulary,
            params[idx],
            noise[idx],
            steps,
            progress,
            None if constraints is None else [constraints[i] for i in idx],
        )
        params[idx], noise[idx] = ref.params, ref.noise
        for j, i in enumerate(idx):
            iterations[i], status[i] = ref.iterations[j], ref.status[j]
            lmls[i], norms[i] = ref.log_marginal_likelihood[j], ref.grad_norm[j]
    return Refinement(params, noise, iterations, status, lmls, norms)


def refine_starts(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    alternatives: Sequence[Sequence[tuple[str, Tensor, Tensor]]],
    params: Tensor,
    noise: Tensor,
    start: Sequence[str],
    iterations: int = STARTS_ROUND,
) -> tuple[Tensor, Tensor, list[str]]:
    """The successive halving of ``refine="auto"`` by L-BFGS, for one dataset where Fisher
    scoring does not apply (:func:`amorgp.amortizer.stages.refine_rows.halve_rows` is the
    rule by Fisher scoring, which halves a kernel without a period between its best two
    starts): the best few starts of each kernel (``alternatives[k]``,
    best first; :func:`amorgp.amortizer.stages.multistart.multistart_rows`) are refined by
    ``iterations`` L-BFGS iterations each (log space), the better half of each kernel's
    starts (by exact log marginal likelihood) kept and refined again, until two are
    left, of which the better wins; a kernel without a period has one round, whose best
    wins (as :func:`~amorgp.amortizer.stages.refine_rows.halve_rows`).  A kernel with one
    start is left as it is.  Returns
    the kernels' ``params``, ``noise`` and start names.

    ``refine="auto"`` then continues from the winner until the objective stops improving
    (:func:`refine`), so a start that is better only after refinement is found: on a
    planted period of a third of the range (3-D input) the periodogram's start scored
    below the doubled network period after 5 iterations and above it after 10, where it
    ends 23 nats higher.
    """
    from amorgp.amortizer.stages.multistart import has_periodic

    new_params, new_noise, names = params.clone(), noise.clone(), list(start)
    flat = [
        (k, name, p, nz)
        for k, alt in enumerate(alternatives)
        if len(alt) > 1
        for name, p, nz in alt
    ]
    S = params.shape[-1]
    while flat:
        D = max(p.shape[0] for _, _, p, _ in flat)
        L = max(p.shape[1] for _, _, p, _ in flat)
        rows = params.new_ones(len(flat), D, L, S)
        for i, (_, _, p, _) in enumerate(flat):  # a few starts
            rows[i, : p.shape[0], : p.shape[1], : p.shape[2]] = p
        nz = torch.stack([torch.as_tensor(v) for _, _, _, v in flat]).to(noise)
        group = [structures[k] for k, _, _, _ in flat]
        ref = refine(Xn, yn, group, vocabulary, rows, nz, iterations)
        score = [v if math.isfinite(v) else -math.inf for v in ref.log_marginal_likelihood]
        survivors = []
        for k in sorted({e[0] for e in flat}):  # per kernel: keep the better half
            mine = sorted((i for i, e in enumerate(flat) if e[0] == k), key=lambda i: -score[i])
            if has_periodic(structures[k]) and len(mine) > 2 and math.isfinite(score[mine[1]]):
                survivors += [
                    (k, flat[i][1], ref.params[i], ref.noise[i])
                    for i in mine[: (len(mine) + 1) // 2]
                ]
                continue
            i = mine[0]
            if math.isfinite(score[i]):
                p = ref.params[i]
                d, a = min(p.shape[0], new_params.shape[1]), min(p.shape[1], new_params.shape[2])
                new_params[k] = 1.0
                new_params[k, :d, :a] = p[:d, :a]
                new_noise[k] = ref.noise[i]
                names[k] = flat[i][1]
        flat = survivors
    return new_params, new_noise, names
