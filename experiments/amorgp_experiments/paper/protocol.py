"""The real-data protocol of the paper (Bitzer et al. 2023, Section 4): data, splits, scores.

* **Data**: the bundled datasets (airline, concrete, energy, housing, yacht; CSV with
  a header, last column the target) and any user CSV, validated by
  :func:`amorgp.core.data.as_dataset` (a clear ``DataError`` for a bad file).
* **Splits**: ``n_train = 500`` (airline 100, yacht 250; at most ``n - 10``) uniform
  random training points, the rest as test points capped at 1000; split ``s`` is
  the permutation of ``numpy.random.default_rng(1000 + s)``.
* **Scores**: test RMSE and mean test negative log predictive density in
  standardised target units (``(y - mu) / sd`` with the training targets' mean and
  population standard deviation), noise included in the predictive variance.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amorgp.amortizer.networks.bundled import DATA_DIR as BUNDLED_DATA_DIR
from amorgp.core.errors import DataError

__all__ = [
    "BUNDLED_DATASETS",
    "DATA_DIR",
    "PAPER_N_TRAIN",
    "PAPER_TABLE1_SE_ARD",
    "TEST_CAP",
    "RealDataset",
    "Split",
    "amortized_predictions",
    "bundled_datasets",
    "load_csv",
    "load_dataset",
    "n_train_for",
    "scores",
    "split_indices",
]

DATA_DIR = BUNDLED_DATA_DIR
"""The bundled CSV files (those of the amortizer's wheel)."""

BUNDLED_DATASETS = ("airline", "concrete", "energy", "housing", "yacht")
PAPER_N_TRAIN = {"airline": 100, "yacht": 250}
"""Training-set sizes of the paper where they differ from the default 500."""
DEFAULT_N_TRAIN = 500
TEST_CAP = 1000
PAPER_TABLE1_SE_ARD = {"energy": 0.0830, "concrete": 0.3635, "airline": 0.2866, "yacht": 0.0606}
"""The paper's Table 1: mean test RMSE of its amortized SE-ARD (standardised units)."""


def bundled_datasets() -> dict[str, Path]:
    """The bundled datasets by name (``{"airline": .../airline.csv, ...}``)."""
    return {name: DATA_DIR / f"{name}.csv" for name in BUNDLED_DATASETS}


def load_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``(n, d)`` and targets ``(n,)`` of a CSV with a header (last column the target).

    The file is read by the library's one CSV reader, :func:`amorgp.amortizer.frontends.io.read_csv`;
    the paper's protocol asks for at least 12 rows on top.

    Raises:
        DataError: a file that is not numeric CSV, has fewer than 2 columns, or holds
            NaN/infinite values or a constant target.
        OSError: the file cannot be read.
    """
    from amorgp.amortizer.frontends.io import read_csv
    from amorgp.core.data import as_dataset

    table = read_csv(path)
    try:
        X, y = as_dataset(table.X, table.y, min_points=12, training=True)
    except DataError as err:
        raise DataError(f"{path}: {err}") from None
    return X.numpy(), y.numpy()


@dataclass(frozen=True)
class RealDataset:
    """A named real dataset: ``X (n, d)`` and ``y (n,)`` in original units."""

    name: str
    X: np.ndarray
    y: np.ndarray

    @property
    def n_train(self) -> int:
        return n_train_for(self.name, len(self.y))


def load_dataset(name_or_path: str | Path) -> RealDataset:
    """A bundled dataset by name, or a user CSV by path (named by its file stem).

    Raises:
        DataError: an unknown name or a bad file (see :func:`load_csv`).
    """
    text = str(name_or_path)
    if text in BUNDLED_DATASETS:
        path = DATA_DIR / f"{text}.csv"
    else:
        path = Path(text)
        if not path.exists():
            raise DataError(
                f"{text}: neither a bundled dataset ({', '.join(BUNDLED_DATASETS)}) nor a file"
            )
    X, y = load_csv(path)
    return RealDataset(path.stem, X, y)


def n_train_for(name: str, n: int) -> int:
    """The paper's training size for ``name`` (500; airline 100, yacht 250), at most ``n - 10``."""
    return max(2, min(PAPER_N_TRAIN.get(name, DEFAULT_N_TRAIN), n - 10))


@dataclass(frozen=True)
class Split:
    """One train/test split of a dataset, arrays in original units."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray

    @property
    def mu(self) -> float:
        return float(self.y_train.mean())

    @property
    def sd(self) -> float:
        return float(self.y_train.std())


def split_indices(
    n: int, n_train: int, seed: int, test_cap: int = TEST_CAP
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint training (``n_train``) and test (the rest, at most ``test_cap``) indices.

    Raises:
        ValueError: ``n_train`` is not in ``1..n-1``.
    """
    if not 0 < n_train < n:
        raise ValueError(f"n_train must be in 1..{n - 1}, got {n_train}")
    perm = np.random.default_rng(seed).permutation(n)
    return perm[:n_train], perm[n_train : n_train + test_cap]


def make_split(data: RealDataset, split: int, n_train: int | None = None) -> Split:
    """Split number ``split`` of ``data`` (seed ``1000 + split``)."""
    tr, te = split_indices(len(data.y), n_train or data.n_train, 1000 + split)
    return Split(data.X[tr], data.y[tr], data.X[te], data.y[te])


def scores(
    mean: np.ndarray, var: np.ndarray, y: np.ndarray, mu: float = 0.0, sd: float = 1.0
) -> tuple[float, float]:
    """RMSE and mean NLL of ``y`` in the units of ``(y - mu) / sd``.

    With ``m = (mean - mu) / sd``, ``v = var / sd^2``, ``t = (y - mu) / sd``:
    ``RMSE = sqrt(mean((m - t)^2))`` and
    ``NLL = mean(0.5 log(2 pi v) + (t - m)^2 / (2 v))``.
    """
    m, v, t = (mean - mu) / sd, var / sd**2, (y - mu) / sd
    rmse = float(np.sqrt(np.mean((m - t) ** 2)))
    nll = float(np.mean(0.5 * (np.log(2 * np.pi * v) + (t - m) ** 2 / v)))
    return rmse, nll


def amortized_predictions(
    amz: Any,
    Xtr: np.ndarray,
    ytr: np.ndarray,
    Xte: np.ndarray,
    kernels: Sequence[Any],
    refine: int,
    *,
    calibrate: bool = False,
    starts: int = 1,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], float]:
    """Predictive means and variances of every kernel (one ``infer_many`` call) and its time.

    The paper's amortized methods start from the network's prediction alone (``starts=1``),
    optionally calibrated and refined; the library's default multi-start for periodic
    kernels (``amorgp.amortizer.stages.multistart``) is compared with it on the same protocol in
    ``docs/benchmarks/local-optima.md``.
    """
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = amz.infer_many(
            Xtr, ytr, list(kernels), refine=refine, calibrate=calibrate, starts=starts
        )
        preds = [(np.asarray(m), np.asarray(v)) for m, v in (f.predict(Xte) for f in fits)]
    return preds, time.perf_counter() - t0
