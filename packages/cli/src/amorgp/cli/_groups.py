"""``amorgp infer TABLE --group-by COLUMN``: one fit per group of a long table.

The table (CSV, or Parquet by its extension ``.parquet``/``.pq``; read by
:func:`amorgp.amortizer.io.read_table`) holds one row per observation; every group of ``--group-by`` is one dataset, fitted by
:func:`amorgp.amortizer.tables.fit_groups` (groups of equal size share batched work).
The output has one row per group and kernel (the columns of
:mod:`amorgp.amortizer.tables`), written to ``--output`` as CSV, Parquet or JSON Lines by
its extension (``.csv``, ``.parquet``/``.pq``, ``.jsonl``/``.ndjson``), or to stdout
(CSV; JSON Lines with ``--json``).  A group that fails keeps its rows with its ``error``;
the command then says how many failed on stderr (exit 0: the others are fitted).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from amorgp.cli._output import atomic_write, check_output_path, emit, is_stdout

if TYPE_CHECKING:
    import pandas as pd

    from amorgp.amortizer.api import Amortizer

__all__ = ["FORMATS", "output_format", "run_groups"]

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
    if path is None or is_stdout(path):
        if fmt == "jsonl":
            emit(frame.to_json(orient="records", lines=True).rstrip("\n"))
        else:
            emit(frame.to_csv(index=False).rstrip("\n"))
        return

    def write(tmp: Path) -> None:
        if fmt == "parquet":
            frame.to_parquet(tmp, index=False)
        elif fmt == "jsonl":
            frame.to_json(tmp, orient="records", lines=True)
        else:
            frame.to_csv(tmp, index=False)

    atomic_write(path, write)


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
    amz: Amortizer,
    data: Path,
    group_by: Sequence[str],
    kernels: Sequence[str],
    target: str | None,
    inputs: Sequence[str],
    predict_at: Sequence[str],
    output: Path | None,
    as_json: bool,
    refine: Any,
    **constraints: Any,
) -> None:
    """Read, fit every group, write (see the module docstring); ``constraints``:
    ``noise_floor``, ``fixed``, ``bounds`` as :func:`~amorgp.amortizer.tables.fit_groups`."""
    from tqdm import tqdm

    from amorgp.amortizer.io import read_table
    from amorgp.amortizer.tables import fit_groups

    fmt = output_format(output, as_json)
    if output is not None and not is_stdout(output):
        check_output_path(output, "--output")
    points = _points(predict_at)
    frame = read_table(data)
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
    _write(result, fmt, output)
    failed = result.loc[result["error"].notna(), list(group_by)].drop_duplicates()
    if len(failed):
        first = result.loc[result["error"].notna(), "error"].iloc[0]
        click.echo(
            f"Warning: {len(failed)} group(s) failed (their rows hold the error), e.g. {first}",
            err=True,
        )
