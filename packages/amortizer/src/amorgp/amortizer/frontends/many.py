"""Many datasets at once: :meth:`Amortizer.infer_datasets
<amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>` and :func:`iter_datasets`.

A fleet of small datasets (one series per sensor, product or patient) fitted one
:meth:`~amorgp.amortizer.frontends.inference.Amortizer.infer_many` call at a time pays, per dataset,
the Python path of every stage.  Here each dataset is validated and normalised
(:func:`amorgp.core.data.as_dataset`, :class:`~amorgp.core.data.Normalizer`; a dataset
that fails is reported with its error and the others go on), the datasets are grouped
into *buckets* of equal size (same number of points ``n`` and inputs ``d``), and each
bucket is one candidate batch of the pipeline (:mod:`amorgp.amortizer.stages.pipeline`): the
same stages ``infer_many`` runs on its batch of one dataset, here over all the bucket's
(dataset, kernel) rows at once: one network forward, the periodogram and the
multi-start of every row in one scoring pass, one calibration pass, the refinement of
the rows of each structure in one batch, and one batched factorisation.

Every option batches: ``refine`` (a number or ``"auto"``, whose successive halving over
starts runs over all rows), ``fixed``, ``bounds``, ``priors``, ``noise_floor``.  Where
the stages cannot batch (float32 GP algebra, lazy solvers, more than
:data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS` points) the pipeline's per-dataset route
runs inside the same batch (:attr:`~amorgp.amortizer.stages.candidates.CandidateBatch.dense_rows`).

Results equal ``infer_many``'s on each dataset: the float64 stages compute the same
numbers batched over rows (the tests compare hyperparameters, noise and log marginal
likelihood to ``1e-8``).  The network runs in float32, and a batch of ``B`` datasets
rounds its float32 matrix products differently from a batch of one (about ``1e-7``
relative in the predicted hyperparameters, carried through by the calibration and the
scoring: a few ``1e-6`` relative in the reported hyperparameters and a few ``1e-5`` nats
in the log marginal likelihood; the tests allow ``1e-4`` and ``1e-3``).
``exact_network=True`` runs the network per dataset (the forward ``infer_many`` runs)
for results equal to ``infer_many``'s to rounding.  Datasets of different sizes form
different buckets (a padded batch would change the network's float32 rounding, and the
GP algebra needs equal ``n`` to batch); the speed-up comes from many datasets of equal
size, the common case of regularly sampled series.

Threads: on the CPU a bucket of datasets of at most
:data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS` points runs on one intra-op thread
(as the calibration does; larger ones keep the solvers' threads): its work is many
element-wise operations on moderately sized tensors, whose threads
synchronise at every operation.  To use several cores, run several processes, e.g. Dask
workers (:mod:`amorgp.amortizer.frontends.dask_groups`); ``docs/benchmarks/`` has the timings.

Memory: a bucket holds at most ``budget`` bytes of kernel matrices (default
:data:`BUDGET`; about ``8 n^2`` bytes per pair and start, twice: matrices and factors).
Each :class:`~amorgp.amortizer.stages.results.KernelResult` keeps its Cholesky factor
(``8 n^2`` bytes, shared with its bucket's) for its predictions: :func:`iter_datasets`
yields the results bucket by bucket, so a caller that keeps only numbers (e.g.
:func:`amorgp.amortizer.frontends.tables.fit_groups`) stays within one bucket's memory for any
number of datasets.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from amorgp.amortizer.frontends.io import MIN_POINTS
from amorgp.amortizer.networks.forward import warn_outside_training
from amorgp.amortizer.stages import calibrate as calibration
from amorgp.amortizer.stages import candidates, pipeline
from amorgp.amortizer.stages.calibrate import check_calibrate
from amorgp.amortizer.stages.constraints import (
    Name,
    check_constraints,
)
from amorgp.amortizer.stages.multistart import (
    resolve_starts,
)
from amorgp.amortizer.stages.refine import check_refine
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.data import Normalizer, as_dataset
from amorgp.core.errors import OptionError
from amorgp.core.warn import warn
from amorgp.kernel_grammar import DimWiseStructure, parse

if TYPE_CHECKING:
    from amorgp.amortizer.stages.candidates import Fitter

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
    <amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>`.

    Attributes:
        index: the dataset's position in the input sequence.
        results: one :class:`~amorgp.amortizer.stages.results.KernelResult` per kernel, in order
            (empty where the dataset failed).
        error: ``None``, or one line naming the error type and why the dataset failed
            (e.g. ``"DataError: y is constant; a GP needs targets that vary"``).
        n_points: the dataset's rows (``0`` where it could not be read).
        batched: whether it ran in its bucket (else alone, a batch of one, after an error
            in its bucket pinned the error on its dataset).
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


@dataclass
class _Prepared:
    """One validated dataset: its position, normaliser and normalised data."""

    index: int
    norm: Normalizer
    Xn: Tensor
    yn: Tensor


def _fit_bucket(
    amz: Fitter,
    items: Sequence[_Prepared],
    structures: Sequence[DimWiseStructure],
    opts: candidates.FitOptions,
    batched: bool = True,
) -> list[DatasetFit]:
    """The pipeline (:func:`amorgp.amortizer.stages.pipeline.run`) on datasets of equal ``n`` and
    ``d``, then each dataset's results (an error while conditioning stays its own)."""
    t0 = time.perf_counter()
    X = torch.stack([it.Xn for it in items])
    Y = torch.stack([it.yn for it in items])
    batch = pipeline.run(amz, candidates.new_batch(amz, X, Y, structures), opts)
    per_dataset = (time.perf_counter() - t0) / len(items)
    out = []
    for b, it in enumerate(items):  # bookkeeping per dataset: its results
        try:
            results = pipeline.kernel_results(amz, batch, b, it.norm, opts, per_dataset, True)
            out.append(DatasetFit(it.index, results, None, it.Xn.shape[0], batched))
        except Exception as err:  # one dataset's failure stays its own
            out.append(DatasetFit(it.index, [], _one_line(err), it.Xn.shape[0], batched))
    return out


def _fit_alone(
    amz: Fitter,
    item: _Prepared,
    structures: Sequence[DimWiseStructure],
    opts: candidates.FitOptions,
) -> DatasetFit:
    """One dataset through the pipeline (a batch of one), its error caught."""
    try:
        return _fit_bucket(amz, [item], structures, opts, batched=False)[0]
    except Exception as err:
        return DatasetFit(item.index, [], _one_line(err), item.Xn.shape[0], False)


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


def _check_kernel(amz: Fitter, kernel: Any) -> None:
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
    amz: Fitter,
    datasets: Sequence[tuple[Any, Any]],
    kernels: Sequence[str | DimWiseStructure],
    *,
    refine: int | Literal["auto"] | None = None,
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
    <amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>` bucket by bucket: yields the
    :class:`DatasetFit` of each bucket (the datasets that failed validation first), in
    no particular order of datasets (each fit carries its ``index``).

    Args:
        amz: the amortizer (its network, device, seed, calibration and starts defaults).
        datasets: ``[(X, y), ...]``: inputs ``(n, d)`` (or ``(n,)``) and targets ``(n,)``
            per dataset, sizes and input counts free.
        kernels: the kernels fitted to every dataset (expressions or structures).
        refine, calibrate, starts, noise_floor, fixed, bounds, priors: as
            :meth:`~amorgp.amortizer.frontends.inference.Amortizer.infer_many`, batched.
        budget: bytes of kernel matrices a bucket may hold (:func:`bucket_size`; at most
            the amortizer's ``memory_budget``, which every stage respects).
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
                warn_outside_training(d, structs[d], amz.max_dims, amz.max_addends, steps)
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
        groups.setdefault((n, d), []).append(_Prepared(i, norm, Xn, yn))
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
            kcons = cons.resolve(structures)
            terms = candidates.addends(structures)
            run, idle, groups_, subset = candidates.refine_plan(amz, n, terms, steps, cons)
        except OptionError as err:  # a name of no kernel on these inputs, or refused: theirs
            yield [DatasetFit(it.index, [], _one_line(err), n, False) for it in items]
            tick(len(items))
            continue
        opts = candidates.FitOptions(
            steps=run,
            calibrate=cal,
            starts=n_starts,
            constraints=cons,
            kernel_constraints=kcons,
            groups=groups_,
            evaluate_lml=True,
            exact_network=exact_network,
            idle=idle,
            subset=subset,
        )
        size = bucket_size(n, len(structures), n_starts, min(budget, amz.memory_budget))
        for s0 in range(0, len(items), size):
            chunk = items[s0 : s0 + size]
            try:
                # one thread for the many small operations of small datasets (module
                # docstring); larger ones keep the solvers' threads
                small = n <= calibration.MAX_POINTS
                threads = calibration.one_thread(amz.device) if small else nullcontext()
                with warnings.catch_warnings(), threads:
                    warnings.simplefilter("ignore", UserWarning)  # warned once per d above
                    fits = _fit_bucket(amz, chunk, structures, opts)
            except Exception:  # pin the error on its dataset: each one alone
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    fits = [_fit_alone(amz, it, structures, opts) for it in chunk]
            yield fits
            tick(len(chunk))


def infer_datasets(
    amz: Fitter,
    datasets: Sequence[tuple[Any, Any]],
    kernels: Sequence[str | DimWiseStructure],
    **options: Any,
) -> list[DatasetFit]:
    """Hyperparameters of ``kernels`` on each of many datasets (module docstring), the
    logic of :meth:`Amortizer.infer_datasets
    <amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>`: :func:`iter_datasets`'
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
