"""The grouped fit of :func:`amorgp.amortizer.frontends.tables.fit_groups` on a Dask cluster.

:func:`fit_groups_dask` takes a ``dask.dataframe`` (or a pandas one, split into
partitions) of one row per observation, brings every group whole into one partition
(a hash shuffle on the group column; skipped with ``partitioned=True`` where the data
are already partitioned by group), and fits each partition with one
:meth:`Amortizer.infer_datasets <amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>`
call on a worker.  Each worker process loads the network once (:func:`worker_amortizer`,
a per-process cache keyed by the checkpoint and its options) and keeps it for every
partition it fits.  The result has one row per group and kernel with the columns of
:func:`~amorgp.amortizer.frontends.tables.fit_groups` (the same schema in every partition, so it
writes to Parquet as it is).

Without a ``client`` a ``distributed.LocalCluster`` on this machine (loopback, one thread
per worker) runs the work and is closed afterwards; any ``distributed.Client`` (or a
scheduler address) runs it on that cluster instead.  Needs the extra
``amorgp-amortizer[dask]`` (``dask[dataframe]``, ``distributed``, pandas, pyarrow); the
workers need ``amorgp-amortizer`` installed (the bundled network ships in its wheel).
Running on a real cluster: ``docs/guide/many-datasets.md``.
"""

from __future__ import annotations

import numbers
import os
import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from amorgp.core.errors import DataError, MissingExtraError, OptionError
from amorgp.core.memory import MALLOC_BYTES, tune_malloc

if TYPE_CHECKING:
    import pandas as pd

    from amorgp.amortizer.frontends.inference import Amortizer
    from amorgp.amortizer.stages.constraints import Name
    from amorgp.kernel_grammar import DimWiseStructure

__all__ = ["DASK_HINT", "MALLOC_BYTES", "fit_groups_dask", "tune_malloc", "worker_amortizer"]

DASK_HINT = "pip install 'amorgp-amortizer[dask]' (dask[dataframe], distributed, pandas, pyarrow)"

_CACHE: dict[Hashable, Amortizer] = {}
_LOCK = threading.Lock()


def require_dask() -> tuple[Any, Any]:
    """``dask.dataframe`` and ``distributed``, or :class:`~amorgp.core.errors.
    MissingExtraError` (one line) where they are not installed."""
    try:
        import dask.dataframe as dd
        import distributed
    except ImportError as err:
        raise MissingExtraError(
            f"fit_groups_dask needs Dask: {DASK_HINT}", name=getattr(err, "name", None)
        ) from None
    return dd, distributed


def worker_amortizer(
    checkpoint: str | os.PathLike[str] | None = None,
    options: Mapping[str, Any] | None = None,
    torch_threads: int | None = 1,
) -> Amortizer:
    """The :class:`~amorgp.amortizer.frontends.inference.Amortizer` of ``checkpoint`` (``None``: the
    bundled default) with ``options`` (:meth:`Amortizer.from_pretrained
    <amorgp.amortizer.frontends.inference.Amortizer.from_pretrained>`'s keywords), loaded once per
    process and kept (the network of a worker serves all its partitions).  Sets torch's
    intra-op threads to ``torch_threads`` (one per worker thread by default: the workers
    share the machine's cores) and, on its first call in a process, tunes the C library's
    allocator (:func:`tune_malloc`)."""
    import torch

    from amorgp.amortizer.frontends.inference import Amortizer

    if torch_threads is not None and torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    opts = dict(options or {})
    key = (None if checkpoint is None else str(checkpoint), repr(sorted(opts.items())))
    with _LOCK:
        amz = _CACHE.get(key)
        if amz is None:
            if not _CACHE:
                tune_malloc()
            amz = Amortizer.from_pretrained(checkpoint, **opts)
            _CACHE[key] = amz
    return amz


def _fit_partition(
    part: pd.DataFrame,
    keys: list[str],
    kernels: list[Any],
    inputs: list[str],
    target: str,
    predict_at: Any,
    columns: list[str],
    checkpoint: Any,
    options: dict[str, Any],
    infer: dict[str, Any],
) -> pd.DataFrame:
    """One partition: its groups through one batched call (worker side)."""
    from amorgp.amortizer.frontends.tables import fit_groups, rows_frame

    if len(part) == 0:
        return rows_frame([], keys, columns)
    amz = worker_amortizer(checkpoint, options)
    out = fit_groups(
        part,
        keys,
        kernels,
        inputs=inputs,
        target=target,
        predict_at=predict_at,
        amortizer=amz,
        **infer,
    )
    return out.reindex(columns=columns)


def fit_groups_dask(
    ddf: Any,
    by: str | Sequence[str],
    kernel: str | DimWiseStructure | Sequence[str | DimWiseStructure],
    *,
    inputs: Sequence[str] | None = None,
    target: str | None = None,
    predict_at: Any = None,
    client: Any = None,
    n_workers: int = 2,
    npartitions: int | None = None,
    partitioned: bool = False,
    checkpoint: str | os.PathLike[str] | None = None,
    amortizer_options: Mapping[str, Any] | None = None,
    refine: int | Literal["auto"] | None = None,
    calibrate: bool | None = None,
    starts: int | None = None,
    budget: float | None = None,
    exact_network: bool = False,
    compute: bool = True,
    noise_floor: float | None = None,
    fixed: Mapping[Name, float] | None = None,
    bounds: Mapping[Name, tuple[float, float]] | None = None,
    priors: bool = False,
) -> Any:
    """:func:`~amorgp.amortizer.frontends.tables.fit_groups` partition by partition on a Dask cluster.

    Args:
        ddf: a ``dask.dataframe.DataFrame`` (or a pandas one: split into ``npartitions``).
        by, kernel, inputs, target, predict_at: as :func:`~amorgp.amortizer.frontends.tables.fit_groups`.
        client: a ``distributed.Client``, or a scheduler address (``"tcp://host:8786"``);
            ``None``: a ``distributed.LocalCluster`` of ``n_workers`` processes (one thread
            each, loopback), closed when done (spawned processes: a script needs the
            ``if __name__ == "__main__":`` guard).
        n_workers: workers of the default local cluster (a positive integer).
        npartitions: partitions after the shuffle (default: as many as the input has, and
            for a pandas table ``4 n_workers``).
        partitioned: the groups are already whole in their partitions (no shuffle); a
            group found in several partitions is an error once computed (with
            ``compute=False`` the caller computes and checks).
        checkpoint, amortizer_options: the network each worker loads once
            (:func:`worker_amortizer`; default the bundled one).
        refine, calibrate, starts, budget, exact_network, noise_floor, fixed, bounds, priors:
            as :meth:`Amortizer.infer_datasets
            <amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>` (checked here, before
            any work is sent).
        compute: return the pandas result (default), or the lazy Dask DataFrame (then a
            ``client`` must be given and stay open while it is computed).

    Returns:
        One row per group and kernel (a pandas DataFrame, groups in no particular order).

    Raises:
        MissingExtraError: Dask is not installed.
        OptionError: before any work: a column that does not exist, a kernel that does
            not parse or fit the input columns, a group column named like a result column,
            or bad options (``n_workers`` not a positive integer...).
        DataError: with ``partitioned=True``, a group spread over several partitions.
    """
    from amorgp.amortizer.frontends.tables import (
        check_kernels,
        data_columns,
        group_keys,
        output_columns,
        prediction_points,
        require_pandas,
        rows_frame,
    )

    pd = require_pandas("fit_groups_dask")
    dd, distributed = require_dask()
    kernels = [kernel] if isinstance(kernel, str) or not isinstance(kernel, Sequence) else kernel
    kernels = list(kernels)
    if not kernels:
        raise OptionError("kernel names no kernel")
    if not compute and client is None:
        raise OptionError("compute=False needs a client that stays open")
    if isinstance(n_workers, bool) or not isinstance(n_workers, numbers.Integral) or n_workers < 1:
        raise OptionError(f"n_workers must be a positive integer, got {n_workers!r}")
    n_workers = int(n_workers)
    if npartitions is not None and (
        isinstance(npartitions, bool)
        or not isinstance(npartitions, numbers.Integral)
        or npartitions < 1
    ):
        raise OptionError(f"npartitions must be a positive integer or None, got {npartitions!r}")
    from amorgp.amortizer.stages.constraints import check_constraints
    from amorgp.amortizer.stages.refine import check_refine

    check_constraints(fixed, bounds, noise_floor, priors).check_refine(check_refine(refine))
    if isinstance(ddf, pd.DataFrame):
        ddf = dd.from_pandas(ddf, npartitions=npartitions or 4 * n_workers)
    if not isinstance(ddf, dd.DataFrame):
        raise OptionError(f"ddf must be a dask or pandas DataFrame, got {type(ddf).__name__}")
    keys = group_keys(by)
    inputs_used, target_used = data_columns(ddf._meta, keys, inputs, target)
    points = prediction_points(predict_at, len(inputs_used))
    d = len(inputs_used)
    constraints = {"fixed": fixed, "bounds": bounds, "noise_floor": noise_floor, "priors": priors}
    check_kernels(kernels, d, keys, points, None, constraints)
    columns = output_columns(keys, kernels, d, points)
    meta = rows_frame([], keys, columns)
    for k in keys:
        meta[k] = meta[k].astype(ddf._meta[k].dtype)
    if not partitioned:
        ddf = ddf.shuffle(on=keys, npartitions=npartitions)
    infer = {
        "refine": refine,
        "calibrate": calibrate,
        "starts": starts,
        "budget": budget,
        "exact_network": exact_network,
        "noise_floor": noise_floor,
        "fixed": dict(fixed or {}),
        "bounds": dict(bounds or {}),
        "priors": priors,
    }
    out = ddf.map_partitions(
        _fit_partition,
        keys,
        kernels,
        inputs_used,
        target_used,
        None if points is None else points.tolist(),
        columns,
        None if checkpoint is None else str(checkpoint),
        dict(amortizer_options or {}),
        infer,
        meta=meta,
        align_dataframes=False,
    )
    if not compute:
        return out
    if client is not None:
        own = isinstance(client, str)
        c = distributed.Client(client) if own else client
        try:
            return _tidy(c.compute(out).result(), keys, len(kernels), partitioned)
        finally:
            if own:
                c.close()
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        return _tidy(c.compute(out).result(), keys, len(kernels), partitioned)


def _tidy(frame: pd.DataFrame, keys: list[str], n_kernels: int, partitioned: bool) -> pd.DataFrame:
    """The computed result with a fresh index and ``None`` (not NaN) in empty text cells,
    as :func:`~amorgp.amortizer.frontends.tables.fit_groups` writes them.

    Raises:
        DataError: a group with more than ``n_kernels`` rows: with ``partitioned=True``,
            a group spread over several partitions (fitted as several groups).
    """
    import numpy as np

    frame = frame.reset_index(drop=True)
    sizes = frame.groupby(keys, sort=False, dropna=False, observed=True).size()
    split = sizes[sizes > n_kernels]
    if len(split):
        first = split.index[0]
        values = first if isinstance(first, tuple) else (first,)
        plain = [v.item() if isinstance(v, np.generic) else v for v in values]
        key = ", ".join(f"{k}={v!r}" for k, v in zip(keys, plain, strict=True))
        where = (
            "partitioned=True, but the data are not partitioned by the group column(s)"
            if partitioned
            else "the shuffle did not keep the group in one partition"
        )
        raise DataError(
            f"the group {key} spans {int(split.iloc[0]) // n_kernels} partitions ({len(split)} "
            f"group(s) split): {where}; pass partitioned=False to shuffle by group"
        )
    for c in ("kernel", "start", "error"):
        col = frame[c].astype("object")
        frame[c] = col.where(col.notna(), None)
    return frame
