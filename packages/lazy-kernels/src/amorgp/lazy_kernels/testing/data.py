"""The bad-data suite: every fitting entry point rejects the same bad datasets with the one
data error (:class:`~amorgp.core.errors.DataError`, a ``ValueError``) and a one-line
message naming the problem.

The datasets are built here, independently of the validation they test; the expected
fragment of each message is the problem in words (``"NaN"``, ``"rows"``...).

>>> from amorgp.core.data import MIN_POINTS, as_dataset
>>> check_rejects_bad_data(lambda X, y: as_dataset(X, y, min_points=MIN_POINTS, training=True))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from amorgp.core.errors import DataError

__all__ = ["BAD_DATASETS", "BadDataset", "bad_datasets", "check_rejects_bad_data"]


@dataclass(frozen=True)
class BadDataset:
    """A dataset that every fit must refuse: ``X``, ``y`` and a regex of the message."""

    name: str
    X: np.ndarray
    y: np.ndarray
    message: str


def bad_datasets(n: int = 12, d: int = 2) -> list[BadDataset]:
    """Bad variants of a valid dataset ``X (n, d)``, ``y (n,)`` (a sine on a grid)."""
    X = np.stack([np.linspace(0.0, 1.0, n) ** (j + 1) for j in range(d)], axis=1)
    y = np.sin(6.0 * X[:, 0]) + X[:, -1]
    x_nan, y_inf, y_nan = X.copy(), y.copy(), y.copy()
    x_nan[2, d - 1] = np.nan
    y_inf[3] = np.inf
    y_nan[0] = np.nan
    x_inf = X.copy()
    x_inf[n - 1, 0] = -np.inf
    return [
        BadDataset("NaN in X", x_nan, y, rf"X contains NaN .*row 3, column {d}"),
        BadDataset("inf in X", x_inf, y, rf"X contains NaN or infinite .*row {n}, column 1"),
        BadDataset("inf in y", X, y_inf, r"y contains NaN or infinite .*row 4"),
        BadDataset("NaN in y", X, y_nan, r"y contains NaN .*row 1"),
        BadDataset("X of rank 3", X[None], y, r"X must have shape \(n, d\)"),
        BadDataset("y of two columns", X, np.stack([y, y], 1), r"y must have shape \(n,\)"),
        BadDataset("mismatched lengths", X, y[:-1], rf"X has {n} rows but y has {n - 1}"),
        BadDataset("too few points", X[:2], y[:2], r"at least 3 data points, got 2"),
        BadDataset("no points", X[:0], y[:0], r"empty inputs"),
        BadDataset("constant y", X, np.full(n, 2.5), r"y is constant"),
        BadDataset("non-numeric X", np.full((n, d), "abc", dtype=object), y, r"X must be numeric"),
    ]


BAD_DATASETS = bad_datasets()
"""The default bad datasets (``n = 12``, ``d = 2``)."""


def check_rejects_bad_data(fit: Callable[[Any, Any], Any], n: int = 12, d: int = 2) -> None:
    """Call ``fit(X, y)`` on every bad dataset: each must raise :class:`DataError` whose
    message is one line matching the case's pattern.

    Raises:
        AssertionError: naming the case that was accepted or misreported.
    """
    import re

    for case in bad_datasets(n, d):
        try:
            fit(case.X, case.y)
        except DataError as err:
            text = str(err)
            assert "\n" not in text, f"{case.name}: a multi-line message {text!r}"
            assert re.search(case.message, text), f"{case.name}: {text!r} !~ {case.message!r}"
        else:
            raise AssertionError(f"{case.name}: accepted")
