"""Refinement of amortized hyperparameters by Type-2 ML (L-BFGS), warm-started at the network.

The objective, transform and optimiser are the baselines' ``GP-ML (L-BFGS)`` fit
(:func:`amorgp.baselines.fit_type2ml_batch`), imported here on first use only: plain
amortized inference never imports :mod:`amorgp.baselines`.

The optimiser moves the log parameters ``log(theta - floor)`` (``space="log"`` of
:class:`amorgp.baselines.Type2MLSettings`; the objective is the same): the network's
errors are factors, which a log step corrects at the same pace for a lengthscale of 0.1
or of 10.  On the paper protocol (24 kernels x 5 datasets x 3 splits, from the
calibrated start) 20 iterations reached a higher log marginal likelihood than in the
transform's softplus space on 220 of the 360 cells (lower on 129), 5 iterations on 203
(lower on 156), at 0.9x the time; on split 0 the median test RMSE ratio to 5-start
Type-2 ML went from 1.031 to 1.014 (20 iterations) and from 1.082 to 1.069 (5).

Profiling the global scale out of the objective (its closed-form optimum
``s = y^T (K + r I)^{-1} y / n`` at every evaluation, the optimiser moving the other
parameters and the noise-to-scale ratio ``r``) was measured and not adopted: on split 0
(120 cells, side by side) 5 such iterations took the median RMSE ratio to L-BFGS Type-2 ML
from 1.069 to 1.052, but at 1.4x the time (longer line searches), where 7 plain iterations
in the same time reach 1.061 with a lower test NLL (per cell 63 lower, 57 higher); after
20 iterations it is level per cell (58 lower, 62 higher) at 1.3x the time.

``refine=k`` runs at most ``k`` L-BFGS iterations per kernel (fewer when L-BFGS's own
tolerances stop it); each iteration's strong-Wolfe line search may use up to
:data:`EVALS_PER_ITERATION` evaluations of the objective, so the iteration count, not an
evaluation budget, bounds the refinement.  ``refine="auto"`` runs rounds of
:data:`AUTO_ROUND` iterations, warm-started at the previous round, until the log marginal
likelihood of a kernel improves by less than :data:`AUTO_RTOL` relatively
(``Delta <= AUTO_RTOL * max(1, |LML|)``) over a round, L-BFGS converges, or
:data:`AUTO_MAX_ITERS` iterations have run.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from amorgp.kernel_grammar import DimWiseStructure, OptionError, Vocabulary

if TYPE_CHECKING:
    from amorgp.amortizer.multistart import MultiStart

__all__ = [
    "AUTO_MAX_ITERS",
    "AUTO_ROUND",
    "AUTO_RTOL",
    "EVALS_PER_ITERATION",
    "Refinement",
    "check_refine",
    "dense_groups",
    "refine",
    "refine_in_groups",
    "refine_starts",
]

EVALS_PER_ITERATION = 25
"""Objective evaluations allowed per L-BFGS iteration (the strong-Wolfe line search's own
limit); ``torch.optim.LBFGS``'s default budget of ``1.25 x`` the iterations would end a
short refinement after two or three iterations whose line searches needed several."""

AUTO_ROUND = 10
"""L-BFGS iterations per round of ``refine="auto"``."""

AUTO_RTOL = 1e-4
"""Relative improvement of the log marginal likelihood over one round below which
``refine="auto"`` stops."""

AUTO_MAX_ITERS = 500
"""Most L-BFGS iterations ``refine="auto"`` runs per kernel."""

Refine = int | Literal["auto"]
Progress = Callable[[str, int, int], None]


def check_refine(refine: Any) -> int | Literal["auto"]:
    """``refine`` as a plain ``int`` or ``"auto"``.

    Raises:
        OptionError: anything but a non-negative integral number (``int``, ``numpy.int64``...;
            not ``bool``) or ``"auto"``.
    """
    if isinstance(refine, str) and refine == "auto":
        return "auto"
    if isinstance(refine, bool) or not isinstance(refine, numbers.Integral) or int(refine) < 0:
        raise OptionError(f"refine must be a non-negative integer or 'auto', got {refine!r}")
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
    """

    params: Tensor
    noise: Tensor
    iterations: list[int]
    status: list[str]
    log_marginal_likelihood: list[float] = field(default_factory=list)


def refine(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    params: Tensor,
    noise: Tensor,
    steps: int | Literal["auto"],
    progress: Progress | None = None,
) -> Refinement:
    """Type-2 ML L-BFGS warm-started at ``params (K, D, L, P)`` and ``noise (K,)``.

    Args:
        Xn, yn: normalised data ``(n, d)``, ``(n,)``.
        structures: the ``K`` kernel structures.
        vocabulary: the symbol vocabulary of the parameter layout.
        params, noise: the network's prediction (normalised units).
        steps: most L-BFGS iterations, or ``"auto"`` (see the module docstring).
        progress: called as ``progress("refine", iterations_done, budget)``.

    A kernel whose refinement fails keeps its last finite iterate.
    """
    from amorgp.baselines import Type2MLSettings, fit_type2ml_batch
    from amorgp.lazy_kernels import PaddedBatch

    X64, y64 = (t.detach().to("cpu", torch.float64) for t in (Xn, yn))
    batch = PaddedBatch.from_datasets([(X64, y64)] * len(structures), list(structures), vocabulary)
    D, L, P = batch.param_shape[1:]
    cur = params.detach().to("cpu", torch.float64)[:, :D, :L, :P].clone()
    cur_noise = noise.detach().to("cpu", torch.float64).clone()
    K = len(structures)
    budget = AUTO_MAX_ITERS if steps == "auto" else steps
    per_round = AUTO_ROUND if steps == "auto" else steps
    iterations, status = [0] * K, ["max_iters"] * K
    active = list(range(K))
    last: list[float | None] = [None] * K
    done = 0
    while active and done < budget:
        n_iter = min(per_round, budget - done)
        sub = batch
        if len(active) < K:  # the kernels still improving, re-padded
            sub = PaddedBatch.from_datasets(
                [(X64, y64)] * len(active), [structures[k] for k in active], vocabulary
            )
        sd, sl, sp = sub.param_shape[1:]
        fit = fit_type2ml_batch(
            sub,
            Type2MLSettings(
                optimizer="lbfgs",
                max_iters=n_iter,
                max_evals=n_iter * EVALS_PER_ITERATION,
                space="log",
            ),
            init=(cur[active][:, :sd, :sl, :sp], cur_noise[active]),
        )
        still = []
        for j, k in enumerate(active):  # per-kernel bookkeeping, K small
            cur[k, :sd, :sl, :sp], cur_noise[k] = fit.params[j], fit.noise[j]
            iterations[k] += int(fit.iterations[j])
            st = fit.status(j)
            lml = float(fit.log_marginal_likelihood[j])
            prev = last[k]
            last[k] = lml
            stalled = prev is not None and lml - prev <= AUTO_RTOL * max(1.0, abs(lml))
            if st != "max_iters" or (steps == "auto" and stalled):
                status[k] = "converged" if st != "failed" else "failed"
            else:
                still.append(k)
        active = still if steps == "auto" else []
        done += n_iter
        if progress is not None:
            progress("refine", min(done, budget), budget)
    out = params.detach().clone()
    out[:, :D, :L, :P] = cur.to(device=params.device, dtype=params.dtype)
    lmls = [math.nan if v is None else v for v in last]
    return Refinement(
        out, cur_noise.to(device=noise.device, dtype=noise.dtype), iterations, status, lmls
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
) -> Refinement:
    """:func:`refine` run on each group of kernels in turn (see :func:`dense_groups`); the
    result is in the order of ``structures``."""
    params, noise = params.detach().clone(), noise.detach().clone()
    K = len(structures)
    iterations, status = [0] * K, ["none"] * K
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
        )
        params[idx], noise[idx] = ref.params, ref.noise
        for j, i in enumerate(idx):
            iterations[i], status[i] = ref.iterations[j], ref.status[j]
    return Refinement(params, noise, iterations, status)


def refine_starts(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    starts: MultiStart,
    iterations: int = AUTO_ROUND,
) -> MultiStart:
    """The best few starts of each kernel (``starts.alternatives``) refined by ``iterations``
    L-BFGS iterations each, in log space, in one call of :func:`refine`; per kernel the
    refined start with the highest exact log marginal likelihood wins (a kernel with one
    start is left to the refinement that follows).

    ``refine="auto"`` then continues from the winner until the objective stops improving
    (:func:`refine`), so a start that is better only after refinement (a sharper period
    whose calibrated start scored lower) is found at the cost of ``iterations`` per start.
    """
    owner = [k for k, alt in enumerate(starts.alternatives) if len(alt) > 1 for _ in alt]
    if not owner:
        return starts
    flat = [a for alt in starts.alternatives if len(alt) > 1 for a in alt]
    P = starts.params.shape[-1]
    D = max(a[1].shape[0] for a in flat)
    L = max(a[1].shape[1] for a in flat)
    params = starts.params.new_ones(len(flat), D, L, P)
    for i, (_, p, _) in enumerate(flat):  # a few starts
        params[i, : p.shape[0], : p.shape[1], : p.shape[2]] = p
    noise = torch.stack([a[2] for a in flat]).to(starts.noise)
    ref = refine(Xn, yn, [structures[k] for k in owner], vocabulary, params, noise, iterations)
    new_params, new_noise = starts.params.clone(), starts.noise.clone()
    names, lmls = list(starts.start), starts.log_marginal_likelihood.clone()
    best: dict[int, int] = {}
    for i, k in enumerate(owner):  # per start: pick the best of its kernel
        v = ref.log_marginal_likelihood[i]
        if math.isfinite(v) and (k not in best or v > ref.log_marginal_likelihood[best[k]]):
            best[k] = i
    for k, i in best.items():
        p = ref.params[i]
        new_params[k] = 1.0
        new_params[k, : p.shape[0], : p.shape[1]] = p[: new_params.shape[1], : new_params.shape[2]]
        new_noise[k] = ref.noise[i]
        names[k] = flat[i][0]
        lmls[k] = ref.log_marginal_likelihood[i]
    return replace(
        starts, params=new_params, noise=new_noise, start=names, log_marginal_likelihood=lmls
    )
