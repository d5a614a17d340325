"""Many datasets at once: :meth:`Amortizer.infer_datasets
<amorgp.amortizer.inference.Amortizer.infer_datasets>` and :func:`iter_datasets`.

A fleet of small datasets (one series per sensor, product or patient) fitted one
:meth:`~amorgp.amortizer.inference.Amortizer.infer_many` call at a time pays, per dataset,
the Python path of every stage: a network forward of batch one, one calibration call, a
periodogram, a multi-start scoring call and a factorisation.  Here the datasets are
grouped into *buckets* of equal size (same number of points ``n`` and inputs ``d``) and
every stage runs once per bucket on all its (dataset, kernel) pairs:

1. **validate and normalise** each dataset (:func:`amorgp.core.data.as_dataset`,
   :class:`~amorgp.core.data.Normalizer`); a dataset that fails is reported with its
   error and the others go on;
2. **one network forward per bucket**: the dataset encoder reads the ``B`` datasets as one
   batch (no padding: equal sizes), the kernel encoder-decoder and the heads decode the
   ``B K`` pairs;
3. **multi-start** (with calibration and more than one start): the periodogram of all
   datasets in one call (:func:`amorgp.amortizer.periodogram.period_candidates_many`,
   which :func:`~amorgp.amortizer.periodogram.period_candidates` also runs), the starts
   of each pair, the network's included (:mod:`amorgp.amortizer.multistart`), all
   calibrated on the scoring points in one pass, scored by the calibration's exact
   likelihood, the best kept;
4. **calibration** of every pair's winner on all its points in one pass: the kernel
   matrices of all pairs in one evaluator call, one Householder reflection per pair and
   LAPACK's tridiagonalisation per matrix, and the profile likelihood's pivot recurrence
   and grid search on all pairs at once (:mod:`amorgp.amortizer.calibrate`'s functions,
   on rows of different targets);
5. **one batched factorisation** of every pair at its final parameters
   (:func:`amorgp.amortizer.batched.factor`), on the matrices of step 4; each result's
   posterior adopts its factor.

The results are those of :meth:`~amorgp.amortizer.inference.Amortizer.infer_many` on
each dataset.  The float64 stages (3-5) compute the same numbers batched over pairs as
one dataset's call does batched over kernels, equal to rounding (the tests compare
hyperparameters, noise and log marginal likelihood to ``1e-8``; measured about ``1e-11``
relative, and the same winning start).  The network runs in float32, and a batch of
``B`` datasets rounds its float32 matrix products differently from a batch of one (about
``1e-7`` relative in the predicted hyperparameters, which the calibration and the scoring
carry through: a few ``1e-6`` relative in the reported hyperparameters and a few
``1e-5`` nats in the log marginal likelihood, measured; the tests allow ``1e-4`` and
``1e-3``).  ``exact_network=True`` runs the network per dataset (the forward
:meth:`~amorgp.amortizer.inference.Amortizer.infer_many` runs) and keeps the batched
float64 stages, for results equal to ``infer_many``'s to rounding.

The batched path covers float64 on at most :data:`~amorgp.amortizer.calibrate.MAX_POINTS`
points with the primary network, and every option there: a refinement
(:func:`amorgp.amortizer.refine_rows.refine_pairs`, Fisher scoring of all pairs of a structure
at once after step 5, then factored again; the same steps as ``infer_many`` takes for
one dataset), ``fixed`` and ``bounds`` (projected after the starts and after the
calibration, as ``infer_many`` does), ``noise_floor`` (the calibration's) and
``priors``.  Float32 GP algebra, candidate networks and larger datasets run
:meth:`~amorgp.amortizer.inference.Amortizer.infer_many` per dataset, with the same
per-dataset error reporting.  Datasets of different sizes form different
buckets (a padded batch would change the network's float32 rounding and the GP algebra
needs equal ``n`` to batch); the speed-up comes from many datasets of equal size, the
common case of regularly sampled series.

Threads: on the CPU a bucket runs on one intra-op thread (as the calibration does): its
work is many element-wise operations on moderately sized tensors, whose threads
synchronise at every operation.  On this project's shared 2-core CPU, 1,000 series of
100 points took 5.8 s on one thread and 81 s on two.  To use several cores, run several
processes, e.g. Dask workers (:mod:`amorgp.amortizer.dask_groups`).

Memory: a bucket holds at most ``budget`` bytes of kernel matrices (default
:data:`BUDGET`; about ``8 n^2`` bytes per pair and start, twice: matrices and factors),
so a bucket of 100-point series with one periodic kernel and 8 starts holds about 100
datasets per 128 MiB.  Each :class:`~amorgp.amortizer.results.KernelResult` keeps its
Cholesky factor (``8 n^2`` bytes, shared with its bucket's) for its predictions:
:func:`iter_datasets` yields the results bucket by bucket, so a caller that keeps only
numbers (e.g. :func:`amorgp.amortizer.tables.fit_groups`) stays within one bucket's
memory for any number of datasets.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from amorgp.amortizer import batched
from amorgp.amortizer import calibrate as calibration
from amorgp.amortizer.calibrate import check_calibrate
from amorgp.amortizer.constraints import (
    Constraints,
    KernelConstraints,
    Name,
    check_constraints,
    project_all,
)
from amorgp.amortizer.fisher import fisher_applies
from amorgp.amortizer.forward import encode_structures, encoder_subset, warn_outside_training
from amorgp.amortizer.io import MIN_POINTS
from amorgp.amortizer.multistart import (
    SCORE_POINTS,
    resolve_starts,
)
from amorgp.amortizer.network import DatasetEncoding
from amorgp.amortizer.pairs import (
    calibrate_rows,
    multistart_rows,
    pair_matrices,
)
from amorgp.amortizer.refine import check_refine
from amorgp.amortizer.refine_rows import PairRefinement, refine_pairs
from amorgp.amortizer.results import Factor, KernelResult, conditioned_posterior
from amorgp.core.data import Normalizer, as_dataset
from amorgp.core.errors import CheckpointError, OptionError
from amorgp.core.warn import warn
from amorgp.kernel_grammar import DimWiseStructure, parse
from amorgp.lazy_kernels import PaddedBatch

if TYPE_CHECKING:
    from amorgp.amortizer.inference import Amortizer

__all__ = [
    "BUDGET",
    "DatasetFit",
    "ManyProgress",
    "infer_datasets",
    "iter_datasets",
]

BUDGET = 128 * 2**20
"""Default bytes of kernel matrices one bucket may hold (:func:`bucket_size`)."""

ManyProgress = Callable[[str, int, int], None]
"""``progress("datasets", done, total)`` after each bucket (and each dataset fitted alone)."""


@dataclass(frozen=True)
class DatasetFit:
    """The fit of one dataset of :meth:`Amortizer.infer_datasets
    <amorgp.amortizer.inference.Amortizer.infer_datasets>`.

    Attributes:
        index: the dataset's position in the input sequence.
        results: one :class:`~amorgp.amortizer.results.KernelResult` per kernel, in order
            (empty where the dataset failed).
        error: ``None``, or one line naming the error type and why the dataset failed
            (e.g. ``"DataError: y is constant; a GP needs targets that vary"``).
        n_points: the dataset's rows (``0`` where it could not be read).
        batched: whether it ran on the batched path (else alone through ``infer_many``).
    """

    index: int
    results: list[KernelResult] = field(default_factory=list)
    error: str | None = None
    n_points: int = 0
    batched: bool = False

    @property
    def ok(self) -> bool:
        """Whether the dataset was fitted."""
        return self.error is None


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or "no message"
    return f"{type(err).__name__}: {text}"


# -- the batched stages -------------------------------------------------------------------------
def bucket_size(n: int, n_kernels: int, starts: int, budget: float = BUDGET) -> int:
    """Datasets of ``n`` points per bucket: the kernel matrices of every kernel and start
    (``8 n^2`` bytes each, twice for the factors) within ``budget`` bytes (at least 1)."""
    per = 16.0 * n * n * n_kernels * (starts + 1)
    return max(1, int(budget // per))


def _network_rows(
    amz: Amortizer,
    X: Tensor,
    Y: Tensor,
    structures: Sequence[DimWiseStructure],
    sym: Tensor,
    msk: Tensor,
    exact: bool,
) -> tuple[Tensor, Tensor]:
    """The network's ``params (B K, d, L, S)`` and ``noise (B K,)`` (``amz.dtype``) of the
    ``B`` datasets ``X (B, n, d)``, ``Y (B, n)`` and ``K`` structures, pair ``b K + k``:
    one forward for the bucket (``exact``: one per dataset, as ``infer_many``)."""
    B, n, d = X.shape
    K = len(structures)
    if exact:
        outs = [amz._predict(X[b], Y[b], structures) for b in range(B)]
        return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
    net = amz.model
    idx = amz.encoder_subset(n)
    Xe, Ye = (X, Y) if idx is None else (X[:, idx.to(X.device)], Y[:, idx.to(Y.device)])
    m = Xe.shape[1]
    net_dtype = next(net.parameters()).dtype
    with torch.inference_mode():
        batch = PaddedBatch(
            Xe.to(net_dtype),
            Ye.to(net_dtype),
            torch.ones(B, m, dtype=torch.bool, device=X.device),
            torch.ones(B, d, dtype=torch.bool, device=X.device),
            sym[:1].expand(B, -1, -1),
            msk[:1].expand(B, -1, -1),
            net.vocabulary,
        )
        enc = net.encode_dataset(batch)
        pairs = DatasetEncoding(enc.h.repeat_interleave(K, 0), enc.dim_mask.repeat_interleave(K, 0))
        pred = net.decode(pairs, sym.repeat(B, 1, 1), msk.repeat(B, 1, 1))
    params, noise = pred.params.to(amz.dtype).clone(), pred.noise.to(amz.dtype).clone()
    if not bool(torch.isfinite(params).all() and torch.isfinite(noise).all()):
        raise CheckpointError(
            f"the network {amz.name!r} predicted non-finite hyperparameters for normalised "
            "data: its weights are broken (e.g. a diverged training run); use another checkpoint"
        )
    return params, noise


@dataclass
class _Prepared:
    """One validated dataset: its position, normaliser, normalised data and raw input."""

    index: int
    norm: Normalizer
    Xn: Tensor
    yn: Tensor
    raw: tuple[Any, Any]


def _fit_bucket(
    amz: Amortizer,
    items: Sequence[_Prepared],
    structures: Sequence[DimWiseStructure],
    calibrate: bool,
    starts: int,
    exact_network: bool,
    steps: int | Literal["auto"] = 0,
    kcons: Sequence[KernelConstraints] | None = None,
) -> list[DatasetFit]:
    """The batched stages (module docstring) for datasets of equal ``n`` and ``d``;
    ``steps``: the refinement (:func:`amorgp.amortizer.refine_rows.refine_pairs`), with the
    constraints ``kcons`` of each structure (``None``: none)."""
    t0 = time.perf_counter()
    B, K = len(items), len(structures)
    P = B * K
    vocab = amz.vocabulary
    X = torch.stack([it.Xn for it in items])
    Y = torch.stack([it.yn for it in items])
    n, d = X.shape[1], X.shape[2]
    sym, msk = encode_structures(structures, vocab, d, amz.device)
    params, noise = _network_rows(amz, X, Y, structures, sym, msk, exact_network)
    Xp, Yp = X.repeat_interleave(K, 0), Y.repeat_interleave(K, 0)
    symp, mskp = sym.repeat(B, 1, 1), msk.repeat(B, 1, 1)
    start = ["network"] * P
    with torch.no_grad():
        pair_cons = None if kcons is None else [c for _ in range(B) for c in kcons]

        def project(p: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            return (p, v) if pair_cons is None else project_all(pair_cons, p, v)

        params, noise = project(params, noise)  # a fixed value replaces the prediction
        scored, calibrate_all = False, calibrate
        if calibrate and starts > 1:
            # every start, the network's included, calibrated and scored on the scoring
            # points in one pass; the winners calibrated on all points below (as infer_many)
            params, noise, start, _ = multistart_rows(
                X, Y, structures, vocab, sym, msk, params, noise, starts, amz.seed,
                calibrated=False,
            )  # fmt: skip
            scored = True
            calibrate_all = encoder_subset(n, SCORE_POINTS, amz.seed) is not None
            if pair_cons is not None:  # the starts' calibration knows no constraints
                params, noise = project(params, noise)
                calibrate_all = True
        Km = pair_matrices(Xp, symp, mskp, params, vocab)
        scale = torch.ones(P, dtype=Km.dtype, device=Km.device)
        if calibrate_all:
            floor = None if kcons is None else kcons[0].noise_floor
            cal = calibrate_rows(Km, Yp, symp, mskp, params, noise, vocab, floor)
            params, noise, scale = cal.params, cal.noise, cal.scale.to(Km.dtype)
            if pair_cons is not None:  # fixed values and bounds hold after calibration
                calibrated = params
                params, noise = project(params, noise)
                if not torch.equal(params, calibrated):  # else only the noise moved
                    Km = pair_matrices(Xp, symp, mskp, params, vocab)
                    scale = torch.ones_like(scale)
        factors: list[Factor | None] = []
        if steps == 0 or not scored:  # a refinement factors its own end point below
            f = batched.factor(Km, Yp, noise, scale)
            moved: list[int] = []
            if starts > 1 and not scored:  # the starts scored by that factorisation
                params, noise, start, moved = multistart_rows(
                    X, Y, structures, vocab, sym, msk, params, noise, starts, amz.seed, f.lml
                )
            factors = _factors(f)
            if moved:  # the pairs whose winner is another start: factored again at it
                at = torch.tensor(moved, device=X.device)
                g = _factors(
                    batched.factor(
                        pair_matrices(Xp[at], symp[at], mskp[at], params[at], vocab),
                        Yp[at],
                        noise[at],
                    )
                )
                for i, p in enumerate(moved):
                    factors[p] = g[i]
        del Km
        refined: PairRefinement | None = None
        if steps != 0:  # every pair from its winner, batched per structure, then factored
            cons_k = None if kcons is None else list(kcons)
            refined = refine_pairs(X, Y, list(structures), params, noise, steps, cons_k)
            params, noise = refined.params, refined.noise
            factors = _factors(
                batched.factor(pair_matrices(Xp, symp, mskp, params, vocab), Yp, noise)
            )
    elapsed = time.perf_counter() - t0
    noises = noise.tolist()
    n_enc = min(n, amz.encoder_points)
    plan = amz.solver_plan(n, max(sum(len(a) for a in s.dims) for s in structures), graph=False)
    out = []
    for b, it in enumerate(items):  # bookkeeping per dataset: its results
        try:
            results = []
            for k, s in enumerate(structures):
                p = b * K + k
                post = conditioned_posterior(
                    s,
                    params[p],
                    noises[p],
                    it.Xn,
                    it.yn,
                    plan=plan,
                    options=amz.gp_options,
                    factor=factors[p],
                )
                with torch.inference_mode():
                    post.log_marginal_likelihood()
                results.append(
                    KernelResult(
                        kernel=s,
                        params=params[p, : s.n_dims, : s.max_addends]
                        .detach()
                        .to("cpu", torch.float64),
                        noise=noises[p],
                        normalizer=it.norm,
                        n_points=n,
                        time_s=elapsed / P,
                        call_time_s=elapsed / B,
                        encoder_points=n_enc,
                        calibrated=calibrate,
                        network=amz.name,
                        start=start[p],
                        **_refinement_fields(refined, p, kcons[k] if kcons else None),
                        _posterior=post,
                    )
                )
            out.append(DatasetFit(it.index, results, None, n, True))
        except Exception as err:  # one dataset's failure stays its own
            out.append(DatasetFit(it.index, [], _one_line(err), n, True))
    return out


def _factors(f: batched.Factors) -> list[Factor | None]:
    """Each pair's element of a batched factorisation (``None`` where it failed)."""
    failed = f.failed.tolist()
    return [
        None if failed[p] else (f.L[p], f.alpha[p], f.jitter[p], f.lml[p])
        for p in range(len(failed))
    ]


def _refinement_fields(
    refined: PairRefinement | None, p: int, cons: KernelConstraints | None
) -> dict[str, Any]:
    """A result's fields of pair ``p``'s refinement and constraints."""
    out: dict[str, Any] = {}
    if refined is not None:
        out.update(
            refine_steps=refined.iterations[p],
            refine_status=refined.status[p],
            refine_gain=refined.gain[p],
            grad_norm=refined.grad_norm[p],
        )
    if cons is not None:
        out.update(
            noise_floor=cons.noise_floor,
            fixed=dict(cons.fixed),
            bounds=dict(cons.bounds),
            priors=cons.priors,
        )
    return out


def _fit_alone(
    amz: Amortizer,
    index: int,
    X: Any,
    y: Any,
    kernels: Sequence[str | DimWiseStructure],
    refine: int | Literal["auto"],
    calibrate: bool,
    starts: int,
    cons: Constraints,
) -> DatasetFit:
    """One dataset through :meth:`Amortizer.infer_many`, its error caught."""
    try:
        results = amz.infer_many(
            X, y, kernels, refine=refine, calibrate=calibrate, starts=starts, evaluate_lml=True,
            noise_floor=cons.noise_floor, fixed=cons.fixed, bounds=cons.bounds,
            priors=cons.priors,
        )  # fmt: skip
    except Exception as err:
        return DatasetFit(index, [], _one_line(err), _rows(X), False)
    return DatasetFit(index, results, None, results[0].n_points, False)


def _rows(X: Any) -> int:
    try:
        return len(X)
    except TypeError:
        return 0


def _check_datasets(datasets: Any) -> None:
    if isinstance(datasets, str | bytes) or not isinstance(datasets, Sequence):
        raise OptionError(
            "datasets must be a sequence (list or tuple) of (X, y) pairs, got "
            f"{type(datasets).__name__}"
            + (" (pass list(...))" if hasattr(datasets, "__next__") else "")
        )


def _check_kernel(amz: Amortizer, kernel: Any) -> None:
    """``kernel`` parsed and checked against the network where no data are needed (a
    dimension-free kernel as for one input, an indexed one for the inputs it names)."""
    if isinstance(kernel, DimWiseStructure):
        n_dims = kernel.n_dims
    elif isinstance(kernel, str):
        expr = parse(kernel, None, amz.vocabulary)
        n_dims = max(d for d in expr.dims if d is not None) + 1 if expr.is_indexed else 1
    else:
        raise OptionError(
            f"a kernel is an expression (text) or a DimWiseStructure, got {type(kernel).__name__}"
        )
    try:
        amz.structure(kernel, n_dims)
    except OptionError:
        raise
    except ValueError as err:
        raise OptionError(f"kernel {str(kernel)!r}: {err}") from None


def iter_datasets(
    amz: Amortizer,
    datasets: Sequence[tuple[Any, Any]],
    kernels: Sequence[str | DimWiseStructure],
    *,
    refine: int | Literal["auto"] = 0,
    calibrate: bool | None = None,
    starts: int | None = None,
    budget: float = BUDGET,
    exact_network: bool = False,
    progress: ManyProgress | None = None,
    noise_floor: float | None = None,
    fixed: Mapping[Name, float] | None = None,
    bounds: Mapping[Name, tuple[float, float]] | None = None,
    priors: bool = False,
) -> Iterator[list[DatasetFit]]:
    """:meth:`Amortizer.infer_datasets
    <amorgp.amortizer.inference.Amortizer.infer_datasets>` bucket by bucket: yields the
    :class:`DatasetFit` of each bucket (the datasets that failed validation first), in
    no particular order of datasets (each fit carries its ``index``).

    Args:
        amz: the amortizer (its network, device, seed, calibration and starts defaults).
        datasets: ``[(X, y), ...]``: inputs ``(n, d)`` (or ``(n,)``) and targets ``(n,)``
            per dataset, sizes and input counts free.
        kernels: the kernels fitted to every dataset (expressions or structures).
        refine, calibrate, starts, noise_floor, fixed, bounds, priors: as
            :meth:`~amorgp.amortizer.inference.Amortizer.infer_many`, batched.
        budget: bytes of kernel matrices a bucket may hold (:func:`bucket_size`).
        exact_network: run the network per dataset, for results equal to ``infer_many``'s
            to rounding (default: one forward per bucket, equal to float32 rounding).
        progress: called as ``progress("datasets", done, total)`` after each bucket.

    Raises:
        OptionError: ``kernels`` not a non-empty list, or an invalid option (bad data is
            reported per dataset, never raised).
    """
    _check_datasets(datasets)
    if isinstance(kernels, str | DimWiseStructure) or not isinstance(kernels, Sequence):
        raise OptionError("kernels must be a list of kernels, e.g. ['SE + PER']")
    if len(kernels) == 0:
        raise OptionError("kernels is empty")
    for k in kernels:  # what needs no data, checked once (the input count: per dataset)
        _check_kernel(amz, k)
    steps = check_refine(refine)
    cal = amz.calibrate if calibrate is None else check_calibrate(calibrate)
    n_starts = resolve_starts(starts, amz.starts, cal)
    cons = check_constraints(fixed, bounds, noise_floor, priors)
    cons.check_refine(steps)
    if not isinstance(exact_network, bool):
        raise OptionError(f"exact_network must be True or False, got {exact_network!r}")
    if isinstance(budget, bool) or not (
        isinstance(budget, int | float) and math.isfinite(budget) and budget > 0
    ):
        raise OptionError(f"budget must be a positive finite number of bytes, got {budget!r}")
    total = len(datasets)
    done = 0

    def tick(k: int) -> None:
        nonlocal done
        done += k
        if progress is not None:
            progress("datasets", done, total)

    groups: dict[tuple[int, int], list[_Prepared]] = {}
    structs: dict[int, list[DimWiseStructure]] = {}
    failed: list[DatasetFit] = []
    binary: list[int] = []
    for i, item in enumerate(datasets):  # validation per dataset; a failure stays its own
        try:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise OptionError(f"dataset {i} is not a pair (X, y)")
            Xa, ya = as_dataset(item[0], item[1], min_points=MIN_POINTS, training=True)
            n, d = Xa.shape
            if d not in structs:
                structs[d] = [amz.structure(k, d) for k in kernels]
                warn_outside_training(d, structs[d], amz.max_dims, amz.max_addends)
            others = ya[ya != ya[0]]
            if others.numel() and bool((others == others[0]).all()):
                binary.append(i)
            norm = Normalizer.fit(Xa, ya)
            Xn = norm.transform_x(Xa).to(amz.device, amz.dtype)
            yn = norm.transform_y(ya).to(amz.device, amz.dtype)
        except Exception as err:
            rows = _rows(item[0]) if isinstance(item, tuple | list) and len(item) == 2 else 0
            failed.append(DatasetFit(i, [], _one_line(err), rows, False))
            continue
        groups.setdefault((n, d), []).append(_Prepared(i, norm, Xn, yn, (item[0], item[1])))
    if binary:  # one warning for the call, not one per dataset
        warn(
            f"{len(binary)} dataset(s) (the first: dataset {binary[0]}) have targets with "
            "only 2 distinct values (binary?): GP regression treats them as continuous and "
            "predicts real values, not classes or probabilities",
            UserWarning,
        )
    if failed:
        yield failed
        tick(len(failed))
    for (n, d), items in groups.items():
        structures = structs[d]
        try:
            kcons = None if cons.trivial else cons.resolve(structures)
        except OptionError as err:  # a name of no kernel on these inputs: their error
            yield [DatasetFit(it.index, [], _one_line(err), n, False) for it in items]
            tick(len(items))
            continue
        terms = max(sum(len(a) for a in s.dims) for s in structures)
        plan = amz.solver_plan(n, terms, graph=False)
        # constraints batch with the calibration (fixed values and bounds are projected
        # after it, the noise floor is the calibration's, as infer_many does)
        fast = (
            amz.dtype == torch.float64
            and (cons.trivial or cal)
            and (steps == 0 or fisher_applies(n, [terms], amz.dtype, plan.memory_budget))
            and not amz.candidates
            and n <= calibration.MAX_POINTS
            and 8 * n * n <= plan.chunk_bytes
            and plan.dense
        )
        if not fast:
            for it in items:
                yield [_fit_alone(amz, it.index, *it.raw, kernels, refine, cal, n_starts, cons)]
                tick(1)
            continue
        size = bucket_size(n, len(structures), n_starts, budget)
        for s0 in range(0, len(items), size):
            chunk = items[s0 : s0 + size]
            try:
                with warnings.catch_warnings(), calibration._one_thread(amz.device):
                    warnings.simplefilter("ignore", UserWarning)  # warned once per d above
                    fits = _fit_bucket(
                        amz, chunk, structures, cal, n_starts, exact_network, steps, kcons
                    )
            except Exception:  # pin the error on its dataset: each one alone
                fits = [
                    _fit_alone(amz, it.index, *it.raw, kernels, refine, cal, n_starts, cons)
                    for it in chunk
                ]
            yield fits
            tick(len(chunk))


def infer_datasets(
    amz: Amortizer,
    datasets: Sequence[tuple[Any, Any]],
    kernels: Sequence[str | DimWiseStructure],
    **options: Any,
) -> list[DatasetFit]:
    """Hyperparameters of ``kernels`` on each of many datasets (module docstring), the
    logic of :meth:`Amortizer.infer_datasets
    <amorgp.amortizer.inference.Amortizer.infer_datasets>`: :func:`iter_datasets`'
    buckets collected in input order (arguments and options as there).

    Returns:
        One :class:`DatasetFit` per dataset, in input order: its results, or its error.

    Raises:
        OptionError: ``kernels`` not a non-empty list, or an invalid option (bad data is
            reported per dataset, never raised).
    """
    _check_datasets(datasets)
    out: list[DatasetFit | None] = [None] * len(datasets)
    for fits in iter_datasets(amz, datasets, kernels, **options):
        for f in fits:
            out[f.index] = f
    return [f for f in out if f is not None]
