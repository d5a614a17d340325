"""``amorgp infer TABLE --group-by COLUMN``: one fit per group of a long table.

The table (CSV, or Parquet by its extension ``.parquet``/``.pq``; read by
:func:`amorgp.amortizer.frontends.io.read_table`) holds one row per observation; every group of ``--group-by`` is one dataset, fitted by
:func:`amorgp.amortizer.frontends.tables.fit_groups` (groups of equal size share batched work).
The output has one row per group and kernel (the columns of
:mod:`amorgp.amortizer.frontends.tables`: after ``error``, how each fit ended, ``refine_steps``,
``refine_status``, ``at_optimum``, ``refine_gain`` and ``untouched``, the hyperparameters
still at a start's constant), written to ``--output`` as CSV, Parquet or JSON Lines by
its extension (``.csv``, ``.parquet``/``.pq``, ``.jsonl``/``.ndjson``), or to stdout
(CSV; JSON Lines with ``--json``); every float is written so that it reads back exactly.
A group that fails keeps its rows with its ``error``; the command then says how many
failed on stderr (exit 0: the others are fitted).  Where no group was fitted (all
failed, or a table without rows) it writes nothing and exits 1.

Checked before any work, as the plain ``amorgp infer``: the output path (never the input
table), the table's header (at most :data:`~amorgp.amortizer.frontends.io.MAX_COLUMNS` columns, no
duplicate names), ``--predict-at`` (distinct points), the kernels, ``--fixed`` and
``--bounds`` names against the input columns, and group columns named like a result
column (``kernel``, ``noise``...): usage errors exit 2.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from amorgp.cli._output import atomic_write, check_output_path, emit, is_stdout

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMATS", "jsonl_text", "output_format", "run_groups"]

FORMATS = {
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
"""Output format by file extension."""


def output_format(path: Path | None, as_json: bool) -> str:
    """``csv``, ``parquet`` or ``jsonl`` for ``--output`` (stdout: CSV, or JSON Lines with
    ``--json``)."""
    if path is None or is_stdout(path):
        return "jsonl" if as_json else "csv"
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise click.BadParameter(
            f"{path}: unknown output format; use one of {', '.join(sorted(FORMATS))}",
            param_hint="--output",
        )
    return fmt


def _write(frame: pd.DataFrame, fmt: str, path: Path | None) -> None:
    """``frame`` as CSV, Parquet or JSON Lines to ``path`` (atomically) or stdout; every
    float reads back exactly (CSV and JSON Lines: its shortest round-trip text)."""
    if path is None or is_stdout(path):
        if fmt == "jsonl":
            emit(jsonl_text(frame).rstrip("\n"))
        else:
            emit(frame.to_csv(index=False).rstrip("\n"))
        return

    def write(tmp: Path) -> None:
        if fmt == "parquet":
            frame.to_parquet(tmp, index=False)
        elif fmt == "jsonl":
            tmp.write_text(jsonl_text(frame), encoding="utf-8")
        else:
            frame.to_csv(tmp, index=False)

    atomic_write(path, write)


def jsonl_text(frame: pd.DataFrame) -> str:
    """One JSON object per row (a line each): floats as their shortest round-trip text
    (``json``'s, not pandas' ``to_json``, which rounds to 10 decimals), NaN and infinities
    as ``null``, dates and times in ISO 8601."""
    columns = [str(c) for c in frame.columns]
    lines = []
    for row in frame.itertuples(index=False, name=None):
        record = {c: _json_value(v) for c, v in zip(columns, row, strict=True)}
        lines.append(json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n")
    return "".join(lines)


def _json_value(v: Any) -> Any:
    """``v`` as a JSON value (see :func:`jsonl_text`)."""
    import numpy as np
    import pandas as pd

    if isinstance(v, np.generic):
        v = v.item()
    if v is None or v is pd.NaT or v is pd.NA:
        return None
    if isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _points(values: Sequence[str]) -> list[list[float]] | None:
    """``--predict-at`` values: one point each, its inputs separated by commas."""
    if not values:
        return None
    out = []
    for v in values:
        try:
            out.append([float(p) for p in v.split(",")])
        except ValueError:
            raise click.BadParameter(
                f"{v!r} is not a point (numbers separated by commas)", param_hint="--predict-at"
            ) from None
    if len({len(p) for p in out}) != 1:
        raise click.BadParameter("points of different lengths", param_hint="--predict-at")
    return out


def run_groups(
    data: Path,
    group_by: Sequence[str],
    kernels: Sequence[str],
    target: str | None,
    inputs: Sequence[str],
    predict_at: Sequence[str],
    output: Path | None,
    as_json: bool,
    refine: Any,
    seed: int,
    starts: int | None,
    **constraints: Any,
) -> None:
    """Check, read, fit every group, write (see the module docstring); ``constraints``:
    ``noise_floor``, ``fixed``, ``bounds`` as :func:`~amorgp.amortizer.frontends.tables.fit_groups`.

    Before any work: the output path (never the input table, as ``amorgp predict``), the
    points, the table's header; then, with the network loaded, the kernels and
    constraints against the input columns (:func:`~amorgp.amortizer.frontends.tables.fit_groups`).

    Raises:
        DataError: a table without rows, or no group fitted (nothing is written).
    """
    from tqdm import tqdm

    from amorgp.amortizer.frontends.io import check_table_header, read_table
    from amorgp.amortizer.frontends.tables import fit_groups
    from amorgp.cli._common import load_amortizer
    from amorgp.cli.predict import _check_paths
    from amorgp.core.errors import DataError

    fmt = output_format(output, as_json)
    if output is not None and not is_stdout(output):
        _check_paths([data], output, None)  # never the input table
        check_output_path(output, "--output")
    points = _points(predict_at)
    check_table_header(data)
    frame = read_table(data)
    if len(frame) == 0:
        raise DataError(f"{data} has a header but no data rows")
    amz = load_amortizer(seed)
    amz.starts = starts
    bar = tqdm(desc="groups", unit="group", disable=None, file=sys.stderr, leave=False)

    def progress(stage: str, done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        result = fit_groups(
            frame,
            list(group_by),
            list(kernels),
            inputs=list(inputs) or None,
            target=target,
            predict_at=points,
            amortizer=amz,
            refine=refine,
            progress=progress,
            **constraints,
        )
    finally:
        bar.close()
    bad = result["error"].notna()
    failed = result.loc[bad, list(group_by)].drop_duplicates()
    first = result.loc[bad, "error"].iloc[0] if bad.any() else None
    if bad.all():
        raise DataError(
            f"no group was fitted: all {len(failed)} group(s) failed, e.g. {first}; nothing written"
        )
    _write(result, fmt, output)
    if len(failed):
        click.echo(
            f"Warning: {len(failed)} group(s) failed (their rows hold the error), e.g. {first}",
            err=True,
        )
