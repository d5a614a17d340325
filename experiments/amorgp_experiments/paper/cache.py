"""The cell cache: every finished result is stored once, and a rerun reuses it.

A *cell* is one result of the paper experiments, identified by a :class:`CellKey`
``(experiment, dataset, split, kernel, method, config)`` where ``config`` is a hash
of the settings that change the number (:func:`config_hash`).  Cells are appended
as JSON lines to ``<root>/cells/<experiment>.jsonl`` with one ``write`` of a whole
line on a file opened for appending, followed by ``fsync``: an interrupted run
leaves at most one torn last line (no final newline), which the next run cuts off
with a warning before it appends (a read-only reader only warns), and the next run
computes only the cells that are missing.  A later line for the same key wins.
Caches of runs on other machines (e.g. the spare cores of a machine lent for training)
are added with :meth:`CellCache.merge`.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from amorgp.amortizer.strictjson import json_text

__all__ = ["CellCache", "CellKey", "config_hash"]


class CellKey(NamedTuple):
    """What identifies a cell (``"-"`` where a field does not apply)."""

    experiment: str
    dataset: str
    split: int
    kernel: str
    method: str
    config: str

    def text(self) -> str:
        return json.dumps(list(self))


def config_hash(settings: Any) -> str:
    """A short, stable hash (12 hex digits) of JSON-serialisable ``settings``."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class CellCache:
    """Cells of the paper experiments under ``<root>/cells/``.

    Args:
        root: the output folder of the run.
        read_only: never compute: :meth:`get_many` returns ``None`` for missing cells
            (used to regenerate the report from the cache alone).

    Attributes:
        computed: number of cells computed (not read back) by this instance.
    """

    def __init__(self, root: Path, *, read_only: bool = False) -> None:
        self.folder = Path(root) / "cells"
        self.read_only = read_only
        self.computed = 0
        self._cells: dict[str, dict[str, Any]] = {}
        self._loaded: set[str] = set()

    def _file(self, experiment: str) -> Path:
        return self.folder / f"{experiment}.jsonl"

    def _load(self, experiment: str) -> None:
        if experiment in self._loaded:
            return
        self._loaded.add(experiment)
        path = self._file(experiment)
        if not path.exists():
            return
        data = path.read_bytes()
        complete = data.rfind(b"\n") + 1  # the end of the last whole line
        if complete < len(data):
            self._torn_tail(path, complete, len(data) - complete)
            data = data[:complete]
        bad = 0
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
                self._cells[json.dumps(rec["key"])] = rec["value"]
            except (json.JSONDecodeError, KeyError, TypeError):
                bad += 1
        if bad:
            warnings.warn(
                f"{path}: skipped {bad} unreadable line(s); their cells will be recomputed",
                UserWarning,
                stacklevel=3,
            )

    def _torn_tail(self, path: Path, complete: int, torn: int) -> None:
        """A last line without its newline (a run killed mid-append): cut it off, so the
        next append starts a line of its own, and say so (read-only: only say so)."""
        if self.read_only:
            warnings.warn(
                f"{path}: ignoring a torn last line ({torn} bytes) left by an interrupted run",
                UserWarning,
                stacklevel=4,
            )
            return
        with open(path, "r+b") as fh:
            fh.truncate(complete)
            fh.flush()
            os.fsync(fh.fileno())
        warnings.warn(
            f"{path}: dropped a torn last line ({torn} bytes) left by an interrupted run; "
            "its cell will be recomputed",
            UserWarning,
            stacklevel=4,
        )

    def get(self, key: CellKey) -> dict[str, Any] | None:
        """The stored value of ``key``, or ``None``."""
        self._load(key.experiment)
        return self._cells.get(key.text())

    def put(self, key: CellKey, value: dict[str, Any]) -> None:
        """Store ``value`` for ``key`` (one atomic line appended, then fsync)."""
        self._load(key.experiment)
        line = json_text({"key": list(key), "value": value}) + "\n"
        value = json.loads(line)["value"]  # as read back: NaN and infinities are null
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._file(key.experiment), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        self._cells[key.text()] = value

    def get_many(
        self,
        keys: Sequence[CellKey],
        compute: Callable[[list[int]], Sequence[dict[str, Any]]],
    ) -> list[dict[str, Any] | None]:
        """Values of ``keys``; the missing ones computed in one call and stored.

        Args:
            keys: the cells wanted.
            compute: given the positions of the missing keys in ``keys``, their values
                in that order (one batched computation, e.g. all missing kernels of a
                split in one amortized call).

        Returns:
            One value per key (``None`` for missing cells in read-only mode).
        """
        values = [self.get(k) for k in keys]
        missing = [i for i, v in enumerate(values) if v is None]
        if missing and not self.read_only:
            new = list(compute(missing))
            if len(new) != len(missing):
                raise RuntimeError(f"computed {len(new)} cells for {len(missing)} missing keys")
            for i, v in zip(missing, new, strict=True):
                self.put(keys[i], v)
                values[i] = self.get(keys[i])
            self.computed += len(missing)
        return values

    def merge(self, other: Path) -> int:
        """Add the cells of another run's output folder that this cache lacks.

        Every ``<other>/cells/<experiment>.jsonl`` is read like this cache's own files (a
        torn last line is skipped); a cell whose key is already here is left as it is, so
        merging twice, or merging a copy of this cache, adds nothing.

        Args:
            other: the other run's output folder (holding ``cells/``).

        Returns:
            The number of cells added.

        Raises:
            FileNotFoundError: ``other`` holds no ``cells/`` folder.
        """
        source = CellCache(Path(other), read_only=True)
        if not source.folder.is_dir():
            raise FileNotFoundError(f"no cells/ folder under {other}")
        if source.folder.resolve() == self.folder.resolve():
            return 0
        added = 0
        for path in sorted(source.folder.glob("*.jsonl")):
            for key, value in source.cells(path.stem):
                if self.get(key) is None:
                    self.put(key, value)
                    added += 1
        return added

    def cells(self, experiment: str) -> list[tuple[CellKey, dict[str, Any]]]:
        """Every stored cell of ``experiment`` (the latest value per key)."""
        self._load(experiment)
        out = []
        for text, value in self._cells.items():
            key = CellKey(*json.loads(text))
            if key.experiment == experiment:
                out.append((key, value))
        return out
