"""Datasets for inference: validation and CSV loading.

The normalisation contract (ARCHITECTURE §3, stored in every checkpoint as
``NORMALISATION``) is :class:`amorgp.baselines.Normalizer`: each input column is
min-max scaled to ``[0, 1]`` (a constant column maps to 0.5), the targets are
standardised, and hyperparameters map back to original units where the map is
exact (:meth:`~amorgp.baselines.Normalizer.to_original`).  The network and the
GP only ever see normalised data.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from amorgp.baselines.data import as_dataset as _as_dataset
from amorgp.baselines.data import as_inputs

__all__ = ["MIN_POINTS", "Dataset", "as_dataset", "read_csv"]

MIN_POINTS = 3
"""Fewest points a dataset may have (a GP fit to fewer is meaningless)."""


def as_dataset(
    X: Any, y: Any | None = None, *, min_points: int = MIN_POINTS, training: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate a dataset and return float64 arrays ``X (n, d)`` and ``y (n,)``.

    The checks of :func:`amorgp.baselines.data.as_dataset` (training data by
    default, at least :data:`MIN_POINTS` rows), returned as numpy arrays.  A 1-D ``X`` is ``n`` points in one dimension; ``y`` may be ``(n,)`` or ``(n, 1)``.

    Args:
        X: inputs.
        y: targets, or ``None`` for inputs only (e.g. test points).
        min_points: fewest rows accepted (only checked for training data).
        training: the data are to be fitted (at least ``min_points`` rows and a
            non-constant target); False for test data.

    Raises:
        ValueError: non-numeric values, wrong shapes, mismatched lengths, too few
            rows, NaN or infinite values, a constant target.
    """
    if y is None:
        return as_inputs(X).numpy(), None
    Xt, yt = _as_dataset(X, y, min_points=min_points, training=training)
    return Xt.numpy(), yt.numpy()


@dataclass(frozen=True)
class Dataset:
    """A table read from CSV.

    Attributes:
        X: ``(n, d)`` float64 inputs.
        y: ``(n,)`` float64 targets, or ``None`` if the table has no target column.
        feature_names: the ``d`` input column names.
        target_name: the target column name (``None`` without targets).
    """

    X: np.ndarray
    y: np.ndarray | None
    feature_names: tuple[str, ...]
    target_name: str | None


def read_csv(
    path: str | os.PathLike[str],
    target: str | None = None,
    *,
    require_target: bool = True,
    feature_names: tuple[str, ...] | None = None,
    training: bool = True,
) -> Dataset:
    """Read a numeric CSV table with a header row.

    Args:
        path: the file.
        target: name of the target column; default the last column.
        require_target: if False and ``feature_names`` are given, a table holding only
            those columns is read as inputs without targets (e.g. test points).
        feature_names: expected input columns (e.g. those of the training table), in
            this order; other columns except the target are an error.
        training: validate as training data (see :func:`as_dataset`); False for a
            test table.

    Returns:
        A validated :class:`Dataset` (see :func:`as_dataset`).

    Raises:
        ValueError: unreadable file, no header, ragged rows, a non-numeric value
            (naming column and line), NaN/Inf, fewer than three rows, a constant
            target, an unknown target column or missing input columns.
    """
    try:
        with open(path, newline="") as fh:
            rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}") from None
    except (csv.Error, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a CSV text file: {err}") from None
    if not rows:
        raise ValueError(f"{path} is empty")
    header = [c.strip() for c in rows[0]]
    if len(set(header)) != len(header):
        raise ValueError(f"{path}: duplicate column names in the header {header}")
    body = rows[1:]
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise ValueError(
                f"{path}, line {i + 2}: {len(r)} fields, but the header has {len(header)}"
            )
    values = np.empty((len(body), len(header)))
    for j, name in enumerate(header):
        for i, r in enumerate(body):
            try:
                values[i, j] = float(r[j])
            except ValueError:
                raise ValueError(
                    f"{path}: column {name!r} is not numeric ({r[j]!r} on line {i + 2})"
                ) from None
    if target is not None and target not in header:
        raise ValueError(f"{path}: unknown target column {target!r}; columns are {header}")
    if feature_names is not None:
        missing = [c for c in feature_names if c not in header]
        if missing:
            raise ValueError(f"{path}: missing input column(s) {missing}; columns are {header}")
        tname = target if target is not None else None
        if tname is None:
            extra = [c for c in header if c not in feature_names]
            if extra:
                raise ValueError(
                    f"{path}: unexpected column(s) {extra}; the inputs are {list(feature_names)}"
                )
        if tname is None and require_target:
            raise ValueError(f"{path} has no target column")
    else:
        if len(header) < 2:
            raise ValueError(
                f"{path} needs at least one input column and a target column, got {header}"
            )
        tname = target if target is not None else header[-1]
        feature_names = tuple(c for c in header if c != tname)
    if tname is not None and tname in feature_names:
        raise ValueError(f"{path}: target column {tname!r} is also an input column")
    Xcols = [header.index(c) for c in feature_names]
    X = values[:, Xcols]
    if tname is None:
        try:
            Xa, _ = as_dataset(X)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        return Dataset(Xa, None, tuple(feature_names), None)
    try:
        Xa, ya = as_dataset(X, values[:, header.index(tname)], training=training)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return Dataset(Xa, ya, tuple(feature_names), tname)
