"""Append-only JSON-lines logs that survive a writer killed mid-line, and atomic rewrites.

A log holds one JSON object per line, each written by one ``write`` and ended by a
newline.  A writer killed mid-append leaves a *torn* last line: bytes after the last
newline.  Readers ignore it with a warning; :func:`append_record` cuts it off (with a
warning) before it appends, so the new record starts a line of its own and
:func:`last_record` returns it.  A whole line that is not a JSON object is damage, not
an interruption: :func:`read_records` raises :class:`~amorgp.core.errors.DataError`
naming the file and the line (``strict=False`` skips such lines with one warning).

Reads are bounded: a log must be a regular file (a symbolic link to ``/dev/zero`` or a
named pipe would be read without end) of at most :data:`MAX_LOG_BYTES`
(:func:`read_bounded`); anything else is a ``DataError`` naming the file.

Used by the training campaign (``export/campaign.jsonl``), the GPU chunk export and the
paper runner's ``runs.jsonl``.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

from amorgp.core.errors import DataError

__all__ = [
    "MAX_LOG_BYTES",
    "append_record",
    "irregular_kind",
    "last_record",
    "read_bounded",
    "read_records",
    "whole_lines",
    "write_text_atomic",
]

MAX_LOG_BYTES = 256 * 2**20
"""Largest log (or small JSON state file) read: 256 MiB, some 100,000 times a campaign
record; a larger file is refused, never read into memory."""


def irregular_kind(info: os.stat_result) -> str | None:
    """What a file that is not a regular file is (``"a folder"``, ``"a named pipe"``,
    ``"a device or socket"``), for an error message; ``None`` for a regular file."""
    if stat.S_ISREG(info.st_mode):
        return None
    if stat.S_ISDIR(info.st_mode):
        return "a folder"
    return "a named pipe" if stat.S_ISFIFO(info.st_mode) else "a device or socket"


def _check_regular(path: Path, info: os.stat_result) -> None:
    kind = irregular_kind(info)
    if kind is not None:
        raise DataError(f"{path} is {kind}, not a regular file; refusing to read it")


def read_bounded(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of ``path``, a regular file (a symbolic link to one is fine) of at most
    ``limit`` bytes (default :data:`MAX_LOG_BYTES`).

    Raises:
        DataError: ``path`` is a folder, a device (``/dev/zero``), a named pipe or a
            socket, or larger than ``limit`` (also if it grows past it while read).
        OSError: it cannot be read (missing, no permission).
    """
    path = Path(path)
    limit = MAX_LOG_BYTES if limit is None else limit
    _check_regular(path, path.stat())  # before opening: a named pipe would block the open
    with open(path, "rb") as fh:
        _check_regular(path, os.fstat(fh.fileno()))  # the file opened is the one checked
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise DataError(
            f"{path} holds more than {limit} bytes, more than a log may hold; refusing to read it"
        )
    return data


def _torn_tail(data: bytes) -> int:
    """The length of the whole lines of ``data`` (the torn tail starts there)."""
    return data.rfind(b"\n") + 1


def read_records(
    path: str | os.PathLike[str], *, strict: bool = True, stacklevel: int = 2
) -> list[dict[str, Any]]:
    """The records of the log ``path`` (none if it does not exist).

    A torn last line is ignored with a warning.

    Raises:
        DataError: with ``strict``, a whole line that is not a JSON object, naming the
            file and the line (counting from 1); without it such lines are skipped with
            one warning.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = read_bounded(path)
    whole = _torn_tail(data)
    if whole < len(data):
        warnings.warn(
            f"{path}: ignoring a torn last line ({len(data) - whole} bytes) left by an "
            "interrupted writer",
            UserWarning,
            stacklevel=stacklevel,
        )
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(data[:whole].split(b"\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            record = None
        if not isinstance(record, dict):
            if strict:
                raise DataError(
                    f"{path}, line {number}: not a JSON object (a corrupted log line); "
                    "repair or remove that line"
                )
            bad.append(number)
            continue
        records.append(record)
    if bad:
        warnings.warn(
            f"{path}: skipped {len(bad)} corrupted line(s) (line {bad[0]} first)",
            UserWarning,
            stacklevel=stacklevel,
        )
    return records


def last_record(path: str | os.PathLike[str], *, strict: bool = True) -> dict[str, Any] | None:
    """The last whole record of the log ``path`` (``None`` if there is none; see
    :func:`read_records` for torn and corrupted lines)."""
    records = read_records(path, strict=strict, stacklevel=3)
    return records[-1] if records else None


def whole_lines(path: str | os.PathLike[str] | None) -> str:
    """The text of the log ``path`` up to its last newline (``""`` if there is none): a
    torn last line is left out, also one cut inside a multi-byte UTF-8 character.

    Raises:
        DataError: a whole line is not UTF-8, or the file is not a regular file of at
            most :data:`MAX_LOG_BYTES` (see :func:`read_bounded`).
    """
    if path is None or not Path(path).exists():
        return ""
    data = read_bounded(path)
    whole = data[: _torn_tail(data)]
    try:
        return whole.decode("utf-8")
    except UnicodeDecodeError as err:
        number = whole.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}, line {number}: not UTF-8 text (a corrupted log line); repair or "
            "remove that line"
        ) from None


def append_record(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append ``record`` as one line (one ``write``, then ``fsync``), first cutting off a
    torn last line left by an interrupted writer (with a warning).

    Raises:
        DataError: ``path`` exists and is not a regular file (a device, a named pipe).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    try:
        info = path.stat()
    except FileNotFoundError:
        pass
    else:
        _check_regular(path, info)  # before opening: a named pipe would block the open
    with open(path, "a+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(max(0, size - 65536))
            tail = fh.read()
            if not tail.endswith(b"\n"):
                start = size - len(tail)
                cut = tail.rfind(b"\n") + 1 if b"\n" in tail else 0
                if cut == 0 and start > 0:  # a torn line longer than the tail read
                    fh.seek(0)
                    cut, start = _torn_tail(fh.read()), 0
                warnings.warn(
                    f"{path}: dropped a torn last line ({size - start - cut} bytes) left by "
                    "an interrupted writer",
                    UserWarning,
                    stacklevel=2,
                )
                fh.truncate(start + cut)
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` by ``text`` atomically: a private temporary file beside it, synced
    and renamed over it (a crash leaves the old file or the new one, never a mix)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
