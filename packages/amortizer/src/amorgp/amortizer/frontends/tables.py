"""Grouped tables in, one row per group and kernel out: :func:`fit_groups` (pandas).

A long table with one row per observation and a group column (sensor, store, patient)
is split into one dataset per group, fitted by :meth:`Amortizer.infer_datasets
<amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>` (groups of equal size share batched
work) and summarised as a table with one row per group and kernel (:func:`result_rows`):

=============================  ==========================================================
column                         meaning
=============================  ==========================================================
the ``by`` column(s)           the group's key
``kernel``                     the kernel, as text
``n_points``                   the group's rows
``log_marginal_likelihood``    of the group's targets in original units
``noise``                      the noise variance in original units
``start``                      the start that won (:mod:`amorgp.amortizer.stages.multistart`)
``error``                      empty, or why the group failed (one line; its numbers empty)
``refine_steps``               refinement iterations run (0: none)
``refine_status``              why the refinement stopped (``none``, ``converged``,
                               ``max_iters``, ``stalled``, ``failed``)
``at_optimum``                 whether the fit is at an optimum of the log marginal
                               likelihood (``True``/``False``; empty where unknown: above
                               1000 points); ``KernelResult.at_optimum``
``refine_gain``                the log marginal likelihood (nats) one more Fisher-scoring
                               step is predicted to gain (below 0.01: at an optimum); the
                               refinement's, else evaluated at the result
``untouched``                  the hyperparameters still at a start's constant, not fitted
                               (their column names joined by ``;``; empty when none):
                               ``KernelResult.untouched``; ``refine="auto"`` fits them
``<symbol>@<dim>[<addend>].<name>``  each hyperparameter in original units (e.g.
                               ``SE*PER@0[1].per_period``); empty where the kernel has no
                               such parameter or where no exact original-unit value exists
                               (``LIN`` terms)
``mean@<x>``, ``sd@<x>``       with ``predict_at``: the predictive mean and standard
                               deviation (noise included) at each requested point
                               (``<x>``: its coordinates' shortest round-trip texts,
                               joined by ``;``: ``mean@1000001``, ``sd@0.5;2``)
=============================  ==========================================================

A group column named like a result column (``kernel``, ``noise``, a hyperparameter's
column...) is refused, as are repeated ``predict_at`` points; kernels, ``fixed`` and
``bounds`` names are checked against the input columns before any group is fitted.

A group that fails (too few rows, a constant target, non-numeric values...) keeps its
rows with its ``error``; nothing is dropped.  pandas is optional for the package:
:func:`fit_groups` says what to install where it is missing.  The Dask version is
:func:`amorgp.amortizer.frontends.dask_groups.fit_groups_dask`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from amorgp.amortizer.frontends.io import PANDAS_HINT, require_pandas
from amorgp.core.errors import DataError, OptionError

if TYPE_CHECKING:
    import pandas as pd

    from amorgp.amortizer.frontends.inference import Amortizer
    from amorgp.amortizer.frontends.many import DatasetFit, ManyProgress
    from amorgp.amortizer.stages.constraints import Name
    from amorgp.kernel_grammar import DimWiseStructure

__all__ = [
    "DIAGNOSTIC_COLUMNS",
    "FIXED_COLUMNS",
    "PANDAS_HINT",
    "check_frame",
    "check_kernels",
    "fit_groups",
    "group_datasets",
    "kernel_label",
    "output_columns",
    "require_pandas",
    "result_rows",
]

FIXED_COLUMNS = ("kernel", "n_points", "log_marginal_likelihood", "noise", "start", "error")
"""The columns after the group key(s), before :data:`DIAGNOSTIC_COLUMNS`."""

DIAGNOSTIC_COLUMNS = ("refine_steps", "refine_status", "at_optimum", "refine_gain", "untouched")
"""How each fit ended (after :data:`FIXED_COLUMNS`, before the hyperparameters): the
refinement, whether it is at an optimum, and the hyperparameters not fitted."""


def group_keys(by: str | Sequence[str]) -> list[str]:
    """The group column names of ``by`` (a name or a list of names)."""
    if isinstance(by, str):
        keys = [by]
    elif isinstance(by, Sequence) and all(isinstance(k, str) for k in by):
        keys = list(by)
    else:
        raise OptionError(
            f"by must be a column name or a list of column names, got {_short(by)} "
            f"({type(by).__name__})"
        )
    if not keys:
        raise OptionError("by names no column")
    if len(set(keys)) != len(keys):
        raise OptionError(f"by names a column twice: {keys}")
    return keys


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_frame(df: Any, what: str = "df") -> None:
    """Raise :class:`OptionError` (one line) where ``df`` is not a pandas DataFrame."""
    pd = require_pandas()
    if not isinstance(df, pd.DataFrame):
        raise OptionError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")


def check_kernels(
    kernels: Sequence[str | DimWiseStructure],
    d: int,
    key_names: Sequence[str],
    points: np.ndarray | None = None,
    amortizer: Amortizer | None = None,
    constraints: Mapping[str, Any] | None = None,
) -> list[DimWiseStructure]:
    """Every kernel parsed for ``d`` inputs (against ``amortizer``'s network where given),
    ``constraints`` (``fixed``, ``bounds``, ``noise_floor``, ``priors``) checked against
    them, and no group column named like a result column: the checks of
    :func:`fit_groups` before any work.

    Raises:
        OptionError: (or its :class:`~amorgp.kernel_grammar.KernelSyntaxError`) one line
            naming the kernel, the constraint or the group column.
    """
    from amorgp.amortizer.stages.constraints import check_constraints
    from amorgp.kernel_grammar import DimWiseStructure

    structures = []
    for k in kernels:
        if not isinstance(k, str | DimWiseStructure):
            raise OptionError(
                f"a kernel is an expression (text) or a DimWiseStructure, got {type(k).__name__}"
            )
        try:
            s = DimWiseStructure.coerce(k, d) if amortizer is None else amortizer.structure(k, d)
        except OptionError:
            raise
        except ValueError as err:
            raise OptionError(f"kernel {str(k)!r}: {err}") from None
        structures.append(s)
    check_constraints(**dict(constraints or {})).resolve(structures)
    taken = set(output_columns([], structures, d, points))
    clash = [k for k in key_names if k in taken]
    if clash:
        raise OptionError(
            f"the group column {clash[0]!r} has the name of a result column; rename it "
            f"(the result columns: {', '.join(FIXED_COLUMNS + DIAGNOSTIC_COLUMNS)}, the "
            "hyperparameters, "
            "mean@<x> and sd@<x>)"
        )
    return structures


def data_columns(
    df: pd.DataFrame, keys: list[str], inputs: Sequence[str] | None, target: str | None
) -> tuple[list[str], str]:
    """The input columns and the target column (default: the last column that is not a
    key; inputs: every other column)."""
    names = [str(c) for c in df.columns]
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise DataError(f"the table has duplicate column names: {_short(twice)}")
    missing = [k for k in keys if k not in names]
    if missing:
        raise OptionError(f"no group column {missing[0]!r}; the table has {names}")
    rest = [c for c in names if c not in keys]
    if target is None:
        if not rest:
            raise OptionError("the table has no column besides the group column(s)")
        target = rest[-1]
    elif target not in names:
        raise OptionError(f"no target column {target!r}; the table has {names}")
    if inputs is None:
        inputs = [c for c in rest if c != target]
    else:
        inputs = list(inputs)
        bad = [c for c in inputs if c not in names]
        if bad:
            raise OptionError(f"no input column {bad[0]!r}; the table has {names}")
    if not inputs:
        raise OptionError("no input column: the table needs a column besides the group and target")
    if target in inputs or any(k in inputs for k in keys) or target in keys:
        raise OptionError("the group, input and target columns must differ")
    return list(inputs), target


def group_datasets(
    df: pd.DataFrame,
    by: str | Sequence[str],
    inputs: Sequence[str] | None = None,
    target: str | None = None,
) -> tuple[list[tuple[Hashable, ...]], list[tuple[np.ndarray, np.ndarray]], list[str], str]:
    """Split ``df`` into one dataset per group (groups in order of first appearance).

    Returns:
        The group keys (tuples, one value per ``by`` column), the datasets ``(X, y)`` (the
        rows in table order; values as stored: a non-numeric one fails that group's
        validation), the input column names and the target column name.

    Raises:
        OptionError: a column that does not exist, or no input column.
    """
    pd = require_pandas()
    keys = group_keys(by)
    inputs, target = data_columns(df, keys, inputs, target)
    if len(df) == 0:
        return [], [], inputs, target
    codes = df.groupby(keys, sort=False, dropna=False, observed=True).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    ends = np.cumsum(counts)
    first = order[ends - counts]
    key_values = df[keys].iloc[first]
    key_rows = list(key_values.itertuples(index=False, name=None))
    Xall = df[inputs].to_numpy()[order]
    yall = df[target].to_numpy()[order]
    if Xall.dtype.kind in "biuf":
        Xall = Xall.astype(np.float64)
    if yall.dtype.kind in "biuf":
        yall = yall.astype(np.float64)
    starts = ends - counts
    data = [(Xall[s:e], yall[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    del pd
    return key_rows, data, inputs, target


def kernel_label(kernel: str | DimWiseStructure, d: int) -> str:
    """The kernel's text as results write it (``KernelResult.kernel_text``) for data with
    ``d`` inputs, or the text as given where it does not fit ``d``."""
    from amorgp.kernel_grammar import DimWiseStructure

    try:
        s = DimWiseStructure.coerce(kernel, d)
    except ValueError:
        return str(kernel)
    return " + ".join(s.dims[0]) if s.is_uniform else str(s)


def output_columns(
    key_names: Sequence[str],
    kernels: Sequence[str | DimWiseStructure],
    d: int,
    predict_at: np.ndarray | None = None,
) -> list[str]:
    """Every column of :func:`fit_groups`' result for ``kernels`` on ``d`` inputs, in
    order: the keys, :data:`FIXED_COLUMNS`, :data:`DIAGNOSTIC_COLUMNS`, each kernel's
    hyperparameters, predictions."""
    from amorgp.kernel_grammar import DimWiseStructure

    cols = [*key_names, *FIXED_COLUMNS, *DIAGNOSTIC_COLUMNS]
    for k in kernels:
        try:
            names = DimWiseStructure.coerce(k, d).param_names()
        except ValueError:
            continue
        for pn in names:
            c = f"{pn.symbol}@{pn.dim}[{pn.addend}].{pn.param}"
            if c not in cols:
                cols.append(c)
    for x in [] if predict_at is None else predict_at:
        cols += [f"mean@{_point_label(x)}", f"sd@{_point_label(x)}"]
    return cols


def _point_label(x: np.ndarray) -> str:
    """``x``'s coordinates joined by ``;``, each its shortest round-trip text (``6``,
    ``1000001``, ``0.1``, ``1e-300``): distinct points get distinct labels."""
    return ";".join(_number(v) for v in x.tolist())


def _number(v: float) -> str:
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def prediction_points(predict_at: Any, d: int | None) -> np.ndarray | None:
    if predict_at is None:
        return None
    P = np.asarray(predict_at, dtype=np.float64)
    if P.ndim == 1:
        P = P[:, None]
    if P.ndim != 2 or P.shape[0] == 0 or not np.isfinite(P).all():
        raise OptionError(
            f"predict_at must be finite points (m,) or (m, d), got shape {np.shape(predict_at)}"
        )
    if d is not None and P.shape[1] != d:
        raise OptionError(f"predict_at has {P.shape[1]} input value(s) per point, the data {d}")
    seen: set[tuple[float, ...]] = set()
    for x in P.tolist():
        if tuple(x) in seen:
            raise OptionError(f"predict_at repeats the point {_point_label(np.asarray(x))}")
        seen.add(tuple(x))
    return P


def result_rows(
    fits: Iterable[DatasetFit],
    keys: Sequence[tuple[Hashable, ...]],
    key_names: Sequence[str],
    kernels: Sequence[str],
    predict_at: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """One row (a dict, see the module docstring) per fitted dataset and kernel;
    ``fits[i].index`` is the position of its key in ``keys``.  ``at_optimum`` and
    ``refine_gain`` cost one Fisher evaluation per result the refinement did not check
    (batched over results of one structure and size: :func:`~amorgp.amortizer.stages.results.
    evaluate_optimality`)."""
    from amorgp.amortizer.stages.results import evaluate_optimality

    fits = list(fits)
    evaluate_optimality([r for f in fits if f.ok for r in f.results])
    labels = [] if predict_at is None else [_point_label(x) for x in predict_at]
    rows = []
    for f in fits:
        key = dict(zip(key_names, keys[f.index], strict=True))
        if not f.ok:
            for k in kernels:
                rows.append({**key, "kernel": str(k), "n_points": f.n_points, "error": f.error})
            continue
        for r in f.results:
            row: dict[str, Any] = {
                **key,
                "kernel": r.kernel_text,
                "n_points": r.n_points,
                "log_marginal_likelihood": r.log_marginal_likelihood_original,
                "noise": r.noise_original,
                "start": r.start,
                "error": None,
                **_diagnostics(r),
            }
            for h in r.table:
                value = h.original
                row[f"{h.symbol}@{h.dim}[{h.addend}].{h.name}"] = (
                    math.nan if value is None else value
                )
            if predict_at is not None:
                mean, var = r.predict(predict_at)
                sd = np.sqrt(np.asarray(var, dtype=np.float64))
                for j, lab in enumerate(labels):
                    row[f"mean@{lab}"] = float(mean[j])
                    row[f"sd@{lab}"] = float(sd[j])
            rows.append(row)
    return rows


def _diagnostics(r: Any) -> dict[str, Any]:
    """The :data:`DIAGNOSTIC_COLUMNS` of one result (a ``KernelResult``)."""
    opt = r.optimality()
    symbols = {(h.dim, h.addend, h.name): h.symbol for h in r.table}
    untouched = [f"{symbols[n]}@{n[0]}[{n[1]}].{n[2]}" for n in r.untouched()]
    return {
        "refine_steps": r.refine_steps,
        "refine_status": r.refine_status,
        "at_optimum": opt.at_optimum,
        "refine_gain": opt.gain,
        "untouched": ";".join(untouched),
    }


def rows_frame(
    rows: list[dict[str, Any]], key_names: Sequence[str], columns: Sequence[str] = ()
) -> pd.DataFrame:
    """The rows as a DataFrame: ``columns`` (default: the key columns,
    :data:`FIXED_COLUMNS` and :data:`DIAGNOSTIC_COLUMNS`), then any other column in
    order of first appearance; numbers as float64 (NaN where empty), ``n_points`` and
    ``refine_steps`` as int64 (0 where empty), ``at_optimum`` as pandas' nullable
    ``boolean``, text as objects (``None`` where empty)."""
    pd = require_pandas()
    cols = list(columns) or [*key_names, *FIXED_COLUMNS, *DIAGNOSTIC_COLUMNS]
    seen = set(cols)
    for r in rows:
        for c in r:
            if c not in seen:
                seen.add(c)
                cols.append(c)
    frame = pd.DataFrame.from_records(rows, columns=cols)
    for c in ("n_points", "refine_steps"):
        frame[c] = frame[c].fillna(0).astype("int64")
    for c in ("kernel", "start", "error", "refine_status", "untouched"):
        col = frame[c].astype("object")
        frame[c] = col.where(col.notna(), None)
    frame["at_optimum"] = frame["at_optimum"].astype("boolean")
    keys = set(key_names) | set(FIXED_COLUMNS) | set(DIAGNOSTIC_COLUMNS)
    for c in cols:
        if c not in keys:
            frame[c] = frame[c].astype("float64")
    for c in ("log_marginal_likelihood", "noise", "refine_gain"):
        frame[c] = frame[c].astype("float64")
    return frame


def fit_groups(
    df: pd.DataFrame,
    by: str | Sequence[str],
    kernel: str | DimWiseStructure | Sequence[str | DimWiseStructure],
    *,
    inputs: Sequence[str] | None = None,
    target: str | None = None,
    predict_at: Any = None,
    amortizer: Amortizer | None = None,
    refine: int | Literal["auto"] | None = None,
    calibrate: bool | None = None,
    starts: int | None = None,
    budget: float | None = None,
    exact_network: bool = False,
    progress: ManyProgress | None = None,
    noise_floor: float | None = None,
    fixed: Mapping[Name, float] | None = None,
    bounds: Mapping[Name, tuple[float, float]] | None = None,
    priors: bool = False,
) -> pd.DataFrame:
    """Fit ``kernel`` (one or a list) to every group of ``df``: one row per group and kernel.

    Args:
        df: a long table, one row per observation.
        by: the group column (or columns).
        kernel: a kernel expression (``"SE + SE*PER"``) or a list of them.
        inputs: the input columns (default: every column but the group and target ones).
        target: the target column (default: the last column that is not a group column).
        predict_at: points ``(m,)`` (one input) or ``(m, d)`` at which to add the
            predictive mean and standard deviation of every group (columns
            ``mean@<x>``, ``sd@<x>``).
        amortizer: the :class:`~amorgp.amortizer.frontends.inference.Amortizer` (default: the bundled
            network, loaded once).
        refine, calibrate, starts, budget, exact_network, progress, noise_floor, fixed,
            bounds, priors: as :meth:`Amortizer.infer_datasets
            <amorgp.amortizer.frontends.inference.Amortizer.infer_datasets>`.

    Returns:
        A DataFrame, one row per group and kernel, groups in order of first appearance
        (columns in the module docstring); a failed group's rows hold its ``error``.

    Raises:
        MissingExtraError: pandas is not installed.
        OptionError: before any work: ``df`` not a DataFrame, a column that does not
            exist, a group column named like a result column (``kernel``, ``noise``, a
            hyperparameter's...), bad or repeated ``predict_at`` points, a kernel that
            does not parse or fit the input columns, a ``fixed``/``bounds`` name no kernel
            has, or bad options.
        DataError: the table has duplicate column names.
    """
    from amorgp.amortizer.frontends.many import BUDGET, iter_datasets
    from amorgp.amortizer.stages.results import evaluate_optimality

    check_frame(df)
    kernels = [kernel] if isinstance(kernel, str) or not isinstance(kernel, Sequence) else kernel
    kernels = list(kernels)
    if not kernels:
        raise OptionError("kernel names no kernel")
    key_names = group_keys(by)
    d = len(data_columns(df, key_names, inputs, target)[0])
    points = prediction_points(predict_at, d)
    if amortizer is None:
        from amorgp.amortizer.frontends.inference import Amortizer

        amortizer = Amortizer.from_pretrained()
    constraints = {"fixed": fixed, "bounds": bounds, "noise_floor": noise_floor, "priors": priors}
    check_kernels(kernels, d, key_names, points, amortizer, constraints)
    keys, data, inputs_used, _ = group_datasets(df, key_names, inputs, target)
    texts = [kernel_label(k, len(inputs_used)) for k in kernels]
    rows: list[dict[str, Any]] = []
    order: list[int] = []
    for fits in iter_datasets(
        amortizer,
        data,
        kernels,
        refine=refine,
        calibrate=calibrate,
        starts=starts,
        budget=BUDGET if budget is None else budget,
        exact_network=exact_network,
        progress=progress,
        noise_floor=noise_floor,
        fixed=fixed,
        bounds=bounds,
        priors=priors,
    ):  # bucket by bucket: only numbers are kept
        evaluate_optimality([r for f in fits if f.ok for r in f.results])  # one batch
        for f in fits:
            part = result_rows([f], keys, key_names, texts, points)
            rows.extend(part)
            order.extend([f.index] * len(part))
    ranked = sorted(range(len(rows)), key=lambda i: order[i])  # stable: kernels in order
    columns = output_columns(key_names, kernels, len(inputs_used), points)
    return rows_frame([rows[i] for i in ranked], key_names, columns)
