"""Datasets for inference: validation and CSV loading.

The normalisation contract (``docs/architecture.md`` §3.1, stored in every checkpoint as
``NORMALISATION``) is :class:`amorgp.core.data.Normalizer`: each input column is
min-max scaled to ``[0, 1]`` (a constant column maps to 0.5), the targets are
standardised, and hyperparameters map back to original units where the map is
exact (:meth:`~amorgp.core.data.Normalizer.to_original`).  The network and the
GP only ever see normalised data.  :func:`read_csv` validates the table with the one
dataset validation, :func:`amorgp.core.data.as_dataset`; the amortizer fits data with at least :data:`MIN_POINTS` rows.

Positions in messages: :func:`~amorgp.core.data.as_dataset` names data rows counting
from 1; :func:`read_csv` names file lines (the header is line 1).
"""

from __future__ import annotations

import csv
import io
import os
import stat
from dataclasses import dataclass
from typing import Any

import numpy as np

from amorgp.core.data import MIN_POINTS
from amorgp.core.data import as_dataset as _as_dataset
from amorgp.core.errors import DataError, OptionError

__all__ = [
    "MAX_COLUMNS",
    "check_table_header",
    "MAX_CSV_BYTES",
    "MIN_POINTS",
    "PANDAS_HINT",
    "Dataset",
    "read_csv",
    "read_table",
    "require_pandas",
]

MAX_CSV_BYTES = 512 * 2**20
"""Largest CSV file :func:`read_csv` reads (512 MiB: some 20 million numbers, far more
than a GP fit handles); a longer file or stream (``/dev/zero``) is refused."""
MAX_COLUMNS = 1024
"""Most columns a CSV table may have; a wider header is refused before any row is read."""


@dataclass(frozen=True)
class Dataset:
    """A table read from CSV.

    Attributes:
        X: ``(n, d)`` float64 inputs.
        y: ``(n,)`` float64 targets, or ``None`` if the table has no target column.
        feature_names: the ``d`` input column names.
        target_name: the target column name (``None`` without targets).
        lines: the file line (counting from 1, the header is line 1) of each data row.
    """

    X: np.ndarray
    y: np.ndarray | None
    feature_names: tuple[str, ...]
    target_name: str | None
    lines: tuple[int, ...] = ()


_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def _short(text: object, limit: int = 40) -> str:
    """``repr(text)``, cut to about ``limit`` characters (a cell or name in a message)."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[: limit - 5]}...{shown[-1]}"


def _names(names: list[str] | tuple[str, ...], limit: int = 8) -> str:
    """A list of column names for a message: at most ``limit`` of them, each cut short."""
    shown = ", ".join(_short(n) for n in names[:limit])
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return f"[{shown}{more}]"


def _decode(path: str | os.PathLike[str]) -> str:
    """The text of ``path``: UTF-8, or any UTF with a byte-order mark.

    Only a regular file or a pipe is read, and at most :data:`MAX_CSV_BYTES` of it."""
    try:
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            kind = "a folder" if stat.S_ISDIR(mode) else "a device or socket"
            raise DataError(f"cannot read {path}: it is {kind}, not a file")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CSV_BYTES + 1)
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror or err}") from None
    if len(raw) > MAX_CSV_BYTES:
        raise DataError(
            f"{path} is larger than {MAX_CSV_BYTES // 2**20} MiB, the most a CSV table may "
            "hold; subsample it"
        )
    encoding = next((enc for bom, enc in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path} is not {encoding.upper()} text (byte {raw[err.start]:#04x} at offset "
            f"{err.start}); save it as UTF-8"
        ) from None


def _rows(path: str | os.PathLike[str]) -> tuple[list[list[str]], list[int]]:
    """Non-blank CSV records and the file line each starts on.

    The delimiter is ``,``, or ``;`` or a tab when the first non-blank line holds no comma.
    """
    text = _decode(path)
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    delimiter = "," if "," in first else ";" if ";" in first else "\t" if "\t" in first else ","
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        rows, lines = [], []
        start = 1
        for r in reader:
            if r and any(c.strip() for c in r):
                if len(r) > MAX_COLUMNS:
                    raise DataError(
                        f"{path}, line {start}: {len(r)} columns; at most {MAX_COLUMNS} are "
                        "supported"
                    )
                rows.append(r)
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as err:
        raise DataError(f"{path} is not a CSV text file: {err}") from None
    if not rows:
        raise DataError(f"{path} is empty")
    return rows, lines


def _values(path: Any, header: list[str], body: list[list[str]], lines: list[int]) -> np.ndarray:
    """The numeric table; errors name the column and the file line."""
    for r, line in zip(body, lines, strict=True):
        if len(r) != len(header):
            raise DataError(
                f"{path}, line {line}: {len(r)} fields, but the header has {len(header)}"
            )
    values = np.empty((len(body), len(header)))
    for j, name in enumerate(header):
        for i, r in enumerate(body):
            try:
                if "_" in r[j]:  # float() reads '1_000' as 1000
                    raise ValueError(r[j])
                values[i, j] = float(r[j])
            except ValueError:
                hint = "; write plain numbers: no thousands separators, '.' for decimals"
                raise DataError(
                    f"{path}: column {_short(name)} is not numeric ({_short(r[j])} on line {lines[i]})"
                    + (hint if any(c in r[j] for c in ",_' ") else "")
                ) from None
            if not np.isfinite(values[i, j]):
                raise DataError(
                    f"{path}: column {_short(name)} has a NaN or infinite value "
                    f"({_short(r[j].strip())} on line {lines[i]})"
                )
    return values


def _columns(
    path: Any,
    header: list[str],
    target: str | None,
    feature_names: tuple[str, ...] | None,
    require_target: bool,
) -> tuple[tuple[str, ...], str | None]:
    """The input columns and the target column (``None``: a table of inputs only)."""
    if target is not None and target not in header:
        if not require_target and feature_names is not None:
            return _columns(path, header, None, feature_names, require_target)  # no targets
        raise OptionError(
            f"{path}: unknown target column {_short(target)}; columns are {_names(header)}"
        )
    if feature_names is not None:
        missing = [c for c in feature_names if c not in header]
        if missing:
            raise DataError(
                f"{path}: missing input column(s) {_names(missing)}; columns are {_names(header)}"
            )
        tname = target
        if tname is None:
            extra = [c for c in header if c not in feature_names]
            if extra:
                raise DataError(
                    f"{path}: unexpected column(s) {_names(extra)}; the inputs are "
                    f"{_names(feature_names)}"
                )
            if require_target:
                raise DataError(f"{path} has no target column")
    else:
        if len(header) < 2:
            raise DataError(
                f"{path} needs at least one input column and a target column, got {_names(header)}"
            )
        tname = target if target is not None else header[-1]
        feature_names = tuple(c for c in header if c != tname)
    if tname is not None and tname in feature_names:
        raise DataError(f"{path}: target column {_short(tname)} is also an input column")
    return tuple(feature_names), tname


def read_csv(
    path: str | os.PathLike[str],
    target: str | None = None,
    *,
    require_target: bool = True,
    feature_names: tuple[str, ...] | None = None,
    training: bool = True,
) -> Dataset:
    """Read a numeric CSV table with a header row.

    The text may be UTF-8 (with or without a byte-order mark) or UTF-16/32 with a
    byte-order mark; the delimiter is ``,``, or ``;`` or a tab when the header holds
    no comma.  Blank lines are skipped.

    Args:
        path: the file.
        target: name of the target column; default the last column.
        require_target: if False and ``feature_names`` are given, a table holding only
            those columns (without ``target``) is read as inputs without targets
            (e.g. test points).
        feature_names: expected input columns (e.g. those of the training table), in
            this order; other columns except the target are an error.
        training: validate as training data (at least :data:`MIN_POINTS` rows and a
            non-constant target, see :func:`amorgp.core.data.as_dataset`); False for a test table.

    Returns:
        A validated :class:`Dataset`.

    Raises:
        DataError: unreadable file, no header, ragged rows, a non-numeric, NaN or
            infinite value (naming column and file line), fewer than three rows, a
            constant target, missing or unexpected input columns.
        OptionError: an unknown target column.
    """
    rows, lines = _rows(path)
    header = [c.strip() for c in rows[0]]
    if "" in header:
        raise DataError(
            f"{path}: column {header.index('') + 1} of the header has no name "
            "(a trailing delimiter?)"
        )
    if len(set(header)) != len(header):
        raise DataError(f"{path}: duplicate column names in the header {_names(header)}")
    if len(rows) == 1:
        raise DataError(f"{path} has a header but no data rows")
    values = _values(path, header, rows[1:], lines[1:])
    names, tname = _columns(path, header, target, feature_names, require_target)
    X = values[:, [header.index(c) for c in names]]
    y = None if tname is None else values[:, header.index(tname)]
    try:
        Xa, ya = _as_dataset(X, y, min_points=MIN_POINTS, training=training and y is not None)
    except DataError as err:
        raise DataError(f"{path}: {err}") from None
    return Dataset(Xa.numpy(), None if ya is None else ya.numpy(), names, tname, tuple(lines[1:]))


PANDAS_HINT = "pip install 'amorgp-amortizer[pandas]' (pandas, pyarrow)"


def require_pandas(what: str = "fit_groups") -> Any:
    """The ``pandas`` module, or :class:`~amorgp.core.errors.MissingExtraError` (one
    line: ``what`` needs pandas, and how to install it) where it is not installed."""
    try:
        import pandas
    except ModuleNotFoundError:
        from amorgp.core.errors import MissingExtraError

        raise MissingExtraError(f"{what} needs pandas: {PANDAS_HINT}", name="pandas") from None
    return pandas


def read_table(path: str | os.PathLike[str]) -> Any:
    """A long table (one row per observation, any column types) as a pandas DataFrame, for
    grouped fits (:func:`amorgp.amortizer.frontends.tables.fit_groups`): Parquet by its extension
    (``.parquet``, ``.pq``), else CSV text decoded and delimited as :func:`read_csv` does
    (UTF-8 or a byte-order mark; ``,``, or ``;`` or a tab when the first non-blank line
    has no comma).  Values are not validated here: each group is, when it is fitted.

    Raises:
        MissingExtraError: pandas (or pyarrow, for Parquet) is not installed.
        DataError: the file cannot be read or parsed.
    """
    pd = require_pandas("reading a table")
    where = os.fspath(path)
    if not os.path.exists(where):
        raise DataError(f"cannot read {where}: no such file")
    try:
        if where.lower().endswith((".parquet", ".pq")):
            return pd.read_parquet(where)
        text = _decode(where)
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        sep = "," if "," in first else ";" if ";" in first else "\t" if "\t" in first else ","
        if not first:
            raise DataError(f"{where} is empty")
        return pd.read_csv(io.StringIO(text), sep=sep)
    except ImportError as err:
        from amorgp.core.errors import MissingExtraError

        raise MissingExtraError(
            f"reading {where} needs {err.name or 'pyarrow'}: {PANDAS_HINT}",
            name=err.name,
        ) from None
    except (ValueError, OSError) as err:
        if isinstance(err, DataError):
            raise
        text = " ".join(str(err).split())
        raise DataError(f"cannot read {where} as a table: {text}") from None


def check_table_header(path: str | os.PathLike[str]) -> None:
    """The header of the table ``path``, checked before it is read whole, as
    :func:`read_csv` checks a plain table's: at most :data:`MAX_COLUMNS` columns, no name twice (pandas would rename
    the second ``x`` to ``x.1``).  A file that cannot be read is left to the reader.

    Raises:
        DataError: too many columns, or a duplicate column name.
    """
    where = str(path)
    if not os.path.exists(where):
        return
    if where.lower().endswith((".parquet", ".pq")):
        try:
            import pyarrow.parquet as pq

            names = list(pq.read_schema(where).names)
        except (ImportError, OSError, ValueError):
            return  # the reader says why
        names = [n for n in names if not n.startswith("__index_level_")]
    else:
        text = _decode(where)
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        sep = "," if "," in first else ";" if ";" in first else "\t" if "\t" in first else ","
        try:
            reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
            names = next((r for r in reader if r and any(c.strip() for c in r)), [])
        except csv.Error:
            return  # the reader says why
    if len(names) > MAX_COLUMNS:
        raise DataError(f"{where}: {len(names)} columns; at most {MAX_COLUMNS} are supported")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise DataError(f"{where}: duplicate column names in the header {_names(twice)}")
