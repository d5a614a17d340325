"""The candidate-batch pipeline: the one sequence of stages behind every amortized fit.

:meth:`~amorgp.amortizer.frontends.inference.Amortizer.infer_many` (one dataset),
:meth:`~amorgp.amortizer.frontends.inference.Amortizer.infer_datasets`,
:func:`~amorgp.amortizer.frontends.tables.fit_groups` and the Dask front end (many datasets) build a
:class:`CandidateBatch` and call :func:`run`; one dataset is a batch of one.

A batch holds ``B`` datasets of equal size (``n`` points, ``d`` inputs, normalised) and
``K`` kernel structures.  Its *rows* are the (dataset, kernel) pairs, row ``b K + k``,
each with its hyperparameters, noise, start name, refinement record and (at the end) its
dense factor.  The stages are functions from batch to batch, in this order:

1. :func:`predict`: the network's hyperparameters of every row (one forward for the
   batch, per network where candidate networks compete, each row then keeping the
   prediction of highest likelihood, all rows scored at once,
   :func:`~amorgp.amortizer.stages.pairs.best_prediction`; a forward per dataset where
   ``exact_network`` asks); fixed values replace the prediction, bounds clip it;
2. :func:`propose_starts`: with more than one start, every row's starts (the
   periodogram's periods and the null starts, :mod:`amorgp.amortizer.stages.multistart`)
   calibrated and scored together, the best kept; ``refine="auto"`` refines the best few
   of each row by successive halving (:func:`~amorgp.amortizer.stages.refine_rows.halve_rows`;
   rounds of :func:`~amorgp.amortizer.stages.refine.halving_round` evaluations);
3. :func:`calibrate`: each row's global scale and noise at their exact Type-2 ML values
   (:mod:`amorgp.amortizer.stages.calibrate`); with no refinement to follow, this is left to
   stage 5, which evaluates the same kernel matrices;
4. :func:`refine`: Type-2 ML from each row's point, the rows of a structure in one
   batch (Fisher scoring, :func:`~amorgp.amortizer.stages.refine_rows.refine_pairs`), or L-BFGS
   per dataset where Fisher scoring does not apply
   (:func:`~amorgp.amortizer.stages.fisher.fisher_applies`); the default above
   :data:`~amorgp.amortizer.stages.refine.DEFAULT_POINTS` points runs stages 2 and 4 on
   a seeded subset (:func:`~amorgp.amortizer.stages.refine.default_subset`); with ``refine="auto"`` (and
   the default) and no constraints, a row that ended below a kernel of the call nested
   in its own is restarted from that kernel's point
   (:func:`~amorgp.amortizer.stages.refine_rows.restart_nested`);
5. :func:`factor`: the dense factor of every row in one batched Cholesky
   (:func:`amorgp.amortizer.stages.batched.factor`) by chunks within the memory budget, with the
   calibration left by stage 3.

The front ends then condition each row's posterior on its factor
(:func:`kernel_results`).

**Routes.**  Which implementation a stage runs is decided once per batch, from the solver
plan (:attr:`~amorgp.amortizer.stages.candidates.CandidateBatch.dense_rows`): *dense rows* (float64, a dense solver, at most
:data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS` points, the likelihood wanted) run every
stage batched over all rows; otherwise (float32, lazy solvers, larger ``n``) the
calibration runs per dataset on its point subset, and each posterior factors itself with
the plan's solver.  The starts are scored batched over all rows on both routes, in
float64 on at most :data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS` points of each
dataset.  The refinement's choice (Fisher scoring of all rows, or L-BFGS per dataset) is
its own (:func:`~amorgp.amortizer.stages.fisher.fisher_applies`), the same on both routes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from amorgp.amortizer.networks.forward import encoder_subset
from amorgp.amortizer.stages import batched
from amorgp.amortizer.stages import calibrate as calibration
from amorgp.amortizer.stages.candidates import CandidateBatch, FitOptions, Fitter
from amorgp.amortizer.stages.constraints import KernelConstraints, project_all
from amorgp.amortizer.stages.fisher import fisher_applies
from amorgp.amortizer.stages.multistart import REFINE_STARTS, SCORE_POINTS, multistart_rows
from amorgp.amortizer.stages.pairs import (
    best_prediction,
    calibrate_rows,
    evaluate_and_calibrate,
    pair_matrices,
)
from amorgp.amortizer.stages.refine import (
    HALVING_POINTS,
    SUBSET,
    halving_round,
    refine_in_groups,
    refine_starts,
)
from amorgp.amortizer.stages.refine_rows import (
    NESTED_PASSES,
    halve_rows,
    refine_pairs,
    restart_nested,
)
from amorgp.amortizer.stages.results import Factor, KernelResult, conditioned_posterior

if TYPE_CHECKING:
    from amorgp.core.data import Normalizer

__all__ = [
    "calibrate",
    "factor",
    "kernel_results",
    "predict",
    "propose_starts",
    "refine",
    "run",
]


def run(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> CandidateBatch:
    """Every stage in order (module docstring)."""
    batch = predict(amz, batch, opts)
    if opts.progress is not None:
        opts.progress("network", 1, 1)
    batch = propose_starts(amz, batch, opts)
    batch = calibrate(amz, batch, opts)
    batch = refine(amz, batch, opts)
    return factor(amz, batch, opts)


def _project(batch: CandidateBatch, opts: FitOptions, params: Tensor, noise: Tensor) -> Any:
    if opts.constraints.trivial:
        return params, noise
    return project_all(opts.kernel_constraints * batch.B, params, noise)


def predict(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> CandidateBatch:
    """Stage 1: the network's ``params`` and ``noise`` of every row, fixed values and
    bounds applied: one forward per network for the batch's datasets, or one per dataset
    (a batch of one, ``exact_network``); with candidate networks, per row the prediction
    of highest likelihood on the encoder's points, at its calibrated scale and noise where
    the fit calibrates (:func:`~amorgp.amortizer.stages.pairs.best_prediction`)."""
    B = batch.X.shape[0]
    preds = amz.network_predictions(
        batch.X, batch.Y, batch.symbols, batch.mask, exact=B == 1 or opts.exact_network
    )
    Xe, Ye = amz.encoder_points_of(batch.X, batch.Y)
    params, noise, won = best_prediction(  # one network: its prediction, nothing scored
        Xe, Ye, batch.symbols, batch.mask, preds, batch.vocabulary, opts.calibrate
    )
    names = amz.network_names
    batch.network = [names[i] for i in won.tolist()]
    batch.encoder_points = int(Xe.shape[1])
    batch.params, batch.noise = _project(batch, opts, params, noise)
    P = B * batch.K
    batch.start = ["network"] * P
    batch.iterations, batch.status = [0] * P, [opts.idle] * P
    batch.gain, batch.grad_norm = [math.nan] * P, [math.nan] * P
    batch.pending = opts.calibrate
    return batch


def _fisher(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> bool:
    """Whether the batch's rows are refined by Fisher scoring (else L-BFGS): on all
    points, or on the subset of ``opts.subset`` points."""
    n = opts.subset or batch.X.shape[1]
    return fisher_applies(n, batch.terms, amz.dtype, batch.plan.memory_budget)


def _seeded_points(X: Tensor, Y: Tensor, points: int | None, seed: int) -> tuple[Tensor, Tensor]:
    """``X (B, n, d)`` and ``Y (B, n)`` on the seeded subset of ``points`` points
    (:func:`~amorgp.amortizer.networks.forward.encoder_subset`; the same points for every
    dataset of the batch, which share their size), or whole where they have no more
    points or ``points`` is ``None`` or 0."""
    sub = encoder_subset(X.shape[1], points, seed) if points else None
    if sub is None:
        return X, Y
    sub = sub.to(X.device)
    return X[:, sub], Y[:, sub]


def _refine_data(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> tuple[Tensor, Tensor]:
    """The normalised data the refinement runs on: all points, or the seeded subset of
    ``opts.subset`` points (:func:`~amorgp.amortizer.stages.refine.default_subset`)."""
    return _seeded_points(batch.X, batch.Y, opts.subset, amz.seed)


def propose_starts(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> CandidateBatch:
    """Stage 2: with ``opts.starts > 1``, each row's best start (module docstring): the
    starts of every row scored together (:func:`~amorgp.amortizer.stages.pairs.
    multistart_rows`, in float64, on at most :data:`~amorgp.amortizer.stages.calibrate.
    MAX_POINTS` points of each dataset), then for ``refine="auto"`` the successive
    halving of each row's best few (Fisher scoring of all rows at once, else L-BFGS per
    dataset)."""
    if opts.starts <= 1:
        return batch
    halving = opts.steps == "auto" and _fisher(amz, batch, opts)
    n = batch.X.shape[1]
    sub = encoder_subset(n, calibration.MAX_POINTS, amz.seed)
    X, Y = batch.X.to(torch.float64), batch.Y.to(torch.float64)
    Xs, Ys = _seeded_points(X, Y, calibration.MAX_POINTS, amz.seed)
    keep = REFINE_STARTS if opts.steps == "auto" else 1
    params, noise, start, _, alternatives = multistart_rows(
        Xs, Ys, batch.structures, amz.vocabulary, batch.symbols, batch.mask, batch.params,
        batch.noise,
        opts.starts, amz.seed, calibrated=not opts.calibrate, keep=keep,
    )  # fmt: skip
    if halving and alternatives:  # none where one start is kept (REFINE_STARTS = 1)
        # the rounds on a subset where HALVING_POINTS is set (off by default)
        Xr, Yr = _seeded_points(*_refine_data(amz, batch, opts), HALVING_POINTS, amz.seed)
        params, noise, start, batch.iterations = halve_rows(
            Xr, Yr, batch.structures, alternatives, params, noise, start,
            halving_round(Xr.shape[1]),
        )  # fmt: skip
    elif alternatives:  # above the Fisher scoring's limits: L-BFGS, one dataset at a time
        K = batch.K
        for b in range(batch.B):
            rows = slice(b * K, (b + 1) * K)
            params[rows], noise[rows], start[rows] = refine_starts(
                batch.X[b], batch.Y[b], batch.structures, amz.vocabulary,
                alternatives[rows], params[rows], noise[rows], start[rows],
            )  # fmt: skip
    batch.params, batch.noise = _project(batch, opts, params, noise)
    batch.start = start
    # the winners are calibrated on the scoring points (on all of them where there is no
    # scoring subset); the starts' calibration knows no constraints: with them, again
    on_all = not opts.calibrate or encoder_subset(Xs.shape[1], SCORE_POINTS, amz.seed) is None
    batch.pending = opts.calibrate and (
        not on_all or sub is not None or not opts.constraints.trivial
    )
    return batch


def calibrate(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> CandidateBatch:
    """Stage 3: the pending calibration on all points, unless :func:`factor` runs it on
    its own kernel matrices (dense rows, no refinement in between)."""
    if not batch.pending or (opts.steps == 0 and _factored(batch, opts)):
        return batch
    params, noise = batch.params.clone(), batch.noise.clone()
    if batch.dense_rows:
        rows = batch.rows()
        for sl in batched.chunks(batch.P, batch.X.shape[1], batch.plan.chunk_bytes):
            _calibrate_rows(amz, batch, opts, rows, sl, params, noise, matrices=False)
    else:
        K = batch.K
        for b in range(batch.B):  # on each dataset's calibration subset
            at = slice(b * K, (b + 1) * K)
            cal = calibration.calibrate(
                batch.X[b], batch.Y[b], batch.structures, amz.vocabulary, batch.params[at],
                batch.noise[at], seed=amz.seed, noise_floor=opts.constraints.noise_floor,
            )  # fmt: skip
            params[at], noise[at] = cal.params, cal.noise
        params, noise = _project(batch, opts, params, noise)
    batch.params, batch.noise = params, noise
    batch.pending = False
    return batch


def _calibrate_rows(
    amz: Fitter,
    batch: CandidateBatch,
    opts: FitOptions,
    rows: tuple[Tensor, Tensor, Tensor, Tensor],
    sl: slice,
    params: Tensor,
    noise: Tensor,
    matrices: bool,
) -> tuple[Tensor | None, Tensor | None]:
    """The calibration of the dense rows ``sl`` (``rows``: :meth:`~amorgp.amortizer.stages.candidates.CandidateBatch.rows`),
    written into ``params`` and ``noise``, fixed values and bounds held after it.  With
    ``matrices``: also the rows' kernel matrices for a factorisation at the calibrated
    point and the scale they are to be multiplied by (``None``: none, the matrices are
    evaluated there)."""
    Xp, Yp, symp, mskp = rows
    floor = opts.constraints.noise_floor
    if matrices:
        Km = pair_matrices(Xp[sl], symp[sl], mskp[sl], params[sl], amz.vocabulary)
        cal = calibrate_rows(
            Km, Yp[sl], symp[sl], mskp[sl], params[sl], noise[sl], amz.vocabulary, floor
        )
    else:  # the matrices evaluated and reduced chunk by chunk in cache, then dropped
        cal = evaluate_and_calibrate(
            Xp[sl], Yp[sl], symp[sl], mskp[sl], params[sl], noise[sl], amz.vocabulary, floor
        )
    p, v = cal.params, cal.noise
    if not opts.constraints.trivial:  # fixed values and bounds hold after the calibration
        p, v = project_all(_row_constraints(batch, opts, sl), p, v)
    params[sl], noise[sl] = p, v
    if not matrices:
        return None, None
    if not torch.equal(p, cal.params):  # a projection moved more than the noise
        return pair_matrices(Xp[sl], symp[sl], mskp[sl], p, amz.vocabulary), None
    return Km, cal.scale.to(Km.dtype)


def refine(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> CandidateBatch:
    """Stage 4: Type-2 ML from each row's point: Fisher scoring of the rows of each
    structure in one batch where it applies (on the seeded subset of ``opts.subset``
    points where the default refines on one: status ``"subset"``, or ``"failed"``), else
    L-BFGS per dataset by the dense limit's groups of kernels."""
    if opts.steps == 0:
        return batch
    cons = None if opts.constraints.trivial else list(opts.kernel_constraints)
    halving = batch.iterations
    if _fisher(amz, batch, opts):
        X, Y = _refine_data(amz, batch, opts)
        fr = refine_pairs(
            X, Y, list(batch.structures), batch.params, batch.noise, opts.steps, cons,
            progress=opts.progress,
        )  # fmt: skip
        batch.params, batch.noise = fr.params, fr.noise
        batch.iterations = [i + h for i, h in zip(fr.iterations, halving, strict=True)]
        batch.status, batch.gain, batch.grad_norm = fr.status, fr.gain, fr.grad_norm
        if opts.steps == "auto" and cons is None and batch.K > 1:
            _restart_nested(batch, fr.log_marginal_likelihood, X, Y)
        if opts.subset:  # the subset's optimum: its gain and gradient are not all points'
            batch.status = [s if s == "failed" else SUBSET for s in batch.status]
            batch.gain = [math.nan] * batch.P
            batch.grad_norm = [math.nan] * batch.P
        return batch
    K = batch.K
    params, noise = batch.params.clone(), batch.noise.clone()
    for b in range(batch.B):  # L-BFGS: one dataset at a time
        rows = slice(b * K, (b + 1) * K)
        ref = refine_in_groups(
            batch.X[b], batch.Y[b], batch.structures, amz.vocabulary, batch.params[rows],
            batch.noise[rows], opts.steps, opts.groups, opts.progress, cons,
        )  # fmt: skip
        params[rows], noise[rows] = ref.params, ref.noise
        batch.iterations[rows] = ref.iterations
        batch.status[rows] = ref.status
        batch.grad_norm[rows] = ref.grad_norm
    batch.params, batch.noise = params, noise
    return batch


def _factored(batch: CandidateBatch, opts: FitOptions) -> bool:
    """Whether :func:`factor` computes the rows' dense factors."""
    return batch.dense_rows and opts.evaluate_lml is not False


def _restart_nested(batch: CandidateBatch, lml: list[float], X: Tensor, Y: Tensor) -> None:
    """Rows that ended below a kernel nested in theirs, restarted from its point on the
    refinement's data ``X``, ``Y``
    (:func:`~amorgp.amortizer.stages.refine_rows.restart_nested`), in up to
    :data:`~amorgp.amortizer.stages.refine_rows.NESTED_PASSES` passes (a row a pass
    improved may start the restarts of the next); those that end higher take the
    restart's point, its start name and diagnostics, and the evaluations of every
    refinement they had."""
    lml = list(lml)
    sources: set[int] | None = None
    for _ in range(NESTED_PASSES):
        got = restart_nested(
            X, Y, list(batch.structures), batch.params, batch.noise, lml, "auto",
            sources=sources,
        )  # fmt: skip
        if got is None:
            return
        at = torch.tensor(got.rows)
        batch.params = batch.params.clone()
        batch.noise = batch.noise.clone()
        batch.params[at] = got.params.to(batch.params)
        batch.noise[at] = got.noise.to(batch.noise)
        for i, p in enumerate(got.rows):
            batch.start[p] = got.start[i]
            batch.iterations[p] += got.iterations[i]
            batch.status[p] = got.status[i]
            batch.gain[p] = got.gain[i]
            batch.grad_norm[p] = got.grad_norm[i]
            lml[p] = got.log_marginal_likelihood[i]
        sources = set(got.rows)


def factor(amz: Fitter, batch: CandidateBatch, opts: FitOptions) -> CandidateBatch:
    """Stage 5: on dense rows, every row's factor in batched Cholesky factorisations, by
    chunks of :data:`~amorgp.amortizer.stages.batched.CHUNK_BYTES` of kernel matrices, each chunk's
    matrices evaluated once and shared by the pending calibration (the calibrated matrix
    is the scale times the evaluated one: only variances change).  Elsewhere each
    posterior factors itself."""
    if not _factored(batch, opts):
        return batch
    rows = batch.rows()
    Xp, Yp, symp, mskp = rows
    params, noise = batch.params.clone(), batch.noise.clone()
    factors: list[Factor | None] = []
    with torch.no_grad():
        for sl in batched.chunks(batch.P, batch.X.shape[1], batch.plan.chunk_bytes):
            if batch.pending:
                Km, scale = _calibrate_rows(amz, batch, opts, rows, sl, params, noise, True)
            else:
                Km = pair_matrices(Xp[sl], symp[sl], mskp[sl], params[sl], amz.vocabulary)
                scale = None
            assert Km is not None
            factors.extend(_split(batched.factor(Km, Yp[sl], noise[sl], scale)))
            del Km
    batch.params, batch.noise, batch.factors = params, noise, factors
    batch.pending = False
    return batch


def _row_constraints(batch: CandidateBatch, opts: FitOptions, sl: slice) -> list[KernelConstraints]:
    K = batch.K
    return [opts.kernel_constraints[p % K] for p in range(sl.start, sl.stop)]


def _split(f: batched.Factors) -> list[Factor | None]:
    """Each row's element of a batched factorisation (``None`` where it failed)."""
    failed = f.failed.tolist()
    return [
        None if failed[p] else (f.L[p], f.alpha[p], f.jitter[p], f.lml[p])
        for p in range(len(failed))
    ]


def kernel_results(
    amz: Fitter,
    batch: CandidateBatch,
    b: int,
    norm: Normalizer,
    opts: FitOptions,
    call_time_s: float,
    evaluate: bool,
) -> list[KernelResult]:
    """Dataset ``b``'s :class:`KernelResult` per structure: each row's posterior solved by
    the batch's plan (adopting its dense factor where stage 5 made one), its likelihood
    evaluated when ``evaluate``."""
    K = batch.K
    n = batch.X.shape[1]
    noises = batch.noise[b * K : (b + 1) * K].tolist()
    out = []
    for k, s in enumerate(batch.structures):
        p = b * K + k
        post = conditioned_posterior(
            s,
            batch.params[p],
            noises[k],
            batch.X[b],
            batch.Y[b],
            plan=batch.plan,
            options=amz.gp_options,
            factor=None if batch.factors is None else batch.factors[p],
        )
        if evaluate:
            with torch.inference_mode():
                post.log_marginal_likelihood()
            if opts.progress is not None and batch.B == 1:
                opts.progress("likelihood", k + 1, K)
        cons = opts.kernel_constraints[k]
        out.append(
            KernelResult(
                kernel=s,
                params=batch.params[p, : s.n_dims, : s.max_addends]
                .detach()
                .to("cpu", torch.float64),
                noise=noises[k],
                normalizer=norm,
                n_points=n,
                time_s=call_time_s / K,
                call_time_s=call_time_s,
                encoder_points=batch.encoder_points,
                refine_steps=batch.iterations[p],
                refine_status=batch.status[p],
                refine_gain=batch.gain[p],
                grad_norm=batch.grad_norm[p],
                calibrated=opts.calibrate,
                network=batch.network[p],
                start=batch.start[p],
                noise_floor=cons.noise_floor,
                fixed=dict(cons.fixed),
                bounds=dict(cons.bounds),
                priors=cons.priors,
                _posterior=post,
            )
        )
    return out
