"""Fixed validation/test sets on disk: safetensors + JSON index + the generating config.

A fixed set is a directory::

    <path>/
      batches.safetensors   tensors of every batch, keys "<index>/<field>" (e.g. "00003/X")
      index.json            format tag, number of batches, per-batch sizes and counters,
                            generation seed, SHA-256 of batches.safetensors
      config.json           the SimulatorConfig that generated the set (SimulatorConfig.to_json)

No pickle is involved.  The directory is written to a temporary sibling and
renamed into place, so a crash never leaves a half-written set, and reading
verifies the checksum and the format.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from amorgp.simulator.batch import SimulatedBatch
from amorgp.simulator.config import SimulatorConfig
from amorgp.simulator.simulator import Simulator
from amorgp.simulator.stream import stream_seed

__all__ = ["FixedSet", "generate_fixed_set", "read_fixed_set", "write_fixed_set"]

FORMAT = "amorgp-simulator-fixed-set/1"
TENSORS = "batches.safetensors"
INDEX = "index.json"
CONFIG = "config.json"


@dataclass(frozen=True)
class FixedSet:
    """A fixed set read from disk.

    Attributes:
        config: the configuration that generated it.
        batches: the batches, in order.
        metadata: the ``metadata`` dictionary stored in the index (seed, ...).
    """

    config: SimulatorConfig
    batches: list[SimulatedBatch]
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[SimulatedBatch]:
        return iter(self.batches)

    def __getitem__(self, i: int) -> SimulatedBatch:
        return self.batches[i]

    @property
    def n_datasets(self) -> int:
        return sum(len(b) for b in self.batches)


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def write_fixed_set(
    path: str | os.PathLike[str],
    batches: Sequence[SimulatedBatch],
    config: SimulatorConfig,
    *,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``batches`` and ``config`` to the directory ``path`` atomically.

    Args:
        path: target directory (must not exist unless ``overwrite``).
        batches: the batches (moved to CPU for writing).
        config: the generating configuration, stored as ``config.json``.
        metadata: JSON-serialisable extra information (e.g. the seed).
        overwrite: replace an existing set.

    Returns:
        The directory path.

    Raises:
        ValueError: no batches, a non-JSON ``metadata``, or ``path`` exists and
            ``overwrite`` is False.
    """
    target = Path(path)
    if not batches:
        raise ValueError("write_fixed_set: no batches to write")
    if target.exists() and not overwrite:
        raise ValueError(f"write_fixed_set: {target} exists (pass overwrite=True to replace it)")
    try:
        meta_text = json.dumps(metadata or {})
    except TypeError as err:
        raise ValueError(f"write_fixed_set: metadata is not JSON-serialisable: {err}") from err
    tensors: dict[str, torch.Tensor] = {}
    entries: list[dict[str, Any]] = []
    for i, batch in enumerate(batches):
        if not isinstance(batch, SimulatedBatch):
            raise ValueError(f"write_fixed_set: item {i} is {type(batch)}, not a SimulatedBatch")
        names = []
        for name, value in batch.tensors().items():
            tensors[f"{i:05d}/{name}"] = value.detach().to("cpu").contiguous()
            names.append(name)
        entries.append({"batch_size": len(batch), "tensors": names, **batch.counters()})
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        save_file(tensors, str(tmp / TENSORS))
        index = {
            "format": FORMAT,
            "n_batches": len(entries),
            "n_datasets": sum(e["batch_size"] for e in entries),
            "batches": entries,
            "sha256": _sha256(tmp / TENSORS),
            "metadata": json.loads(meta_text),
        }
        (tmp / INDEX).write_text(json.dumps(index, indent=2))
        (tmp / CONFIG).write_text(config.to_json())
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def read_fixed_set(path: str | os.PathLike[str]) -> FixedSet:
    """Read a set written by :func:`write_fixed_set`.

    Raises:
        ValueError: missing files, unknown format, checksum mismatch, or tensors
            that do not match the index.
    """
    root = Path(path)
    for name in (TENSORS, INDEX, CONFIG):
        if not (root / name).is_file():
            raise ValueError(f"read_fixed_set: {root} has no {name}; not a fixed set")
    try:
        index = json.loads((root / INDEX).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"read_fixed_set: {root / INDEX} is not valid JSON: {err}") from err
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"read_fixed_set: {root / INDEX} has an unknown format (need {FORMAT!r})")
    digest = _sha256(root / TENSORS)
    if digest != index.get("sha256"):
        raise ValueError(
            f"read_fixed_set: checksum mismatch for {root / TENSORS} (file corrupted or replaced)"
        )
    config = SimulatorConfig.from_json((root / CONFIG).read_text())
    flat = load_file(str(root / TENSORS))
    batches = []
    for i, entry in enumerate(index["batches"]):
        prefix = f"{i:05d}/"
        tensors = {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}
        if sorted(tensors) != sorted(entry["tensors"]):
            raise ValueError(f"read_fixed_set: batch {i} tensors do not match the index")
        batch = SimulatedBatch.from_tensors(tensors, entry, vocab=config.vocabulary)
        if len(batch) != entry["batch_size"]:
            raise ValueError(f"read_fixed_set: batch {i} has the wrong batch size")
        batches.append(batch)
    if len(batches) != index["n_batches"]:
        raise ValueError("read_fixed_set: number of batches does not match the index")
    return FixedSet(config, batches, dict(index.get("metadata", {})))


def generate_fixed_set(
    path: str | os.PathLike[str],
    config: SimulatorConfig,
    *,
    n_batches: int,
    batch_size: int,
    seed: int,
    overwrite: bool = False,
) -> FixedSet:
    """Draw ``n_batches`` batches with seed ``seed`` and write them to ``path``.

    The generator is seeded with :func:`~amorgp.simulator.stream.stream_seed`
    ``(seed, epoch=0, worker=0)``, the first worker stream of the same seed; use a
    seed distinct from the training stream's.

    Returns:
        The written set (as :func:`read_fixed_set` would return it).
    """
    if n_batches < 1:
        raise ValueError(f"generate_fixed_set: n_batches must be >= 1, got {n_batches}")
    sim = Simulator(config)
    g = torch.Generator().manual_seed(stream_seed(seed))
    batches = [sim.sample(batch_size, g) for _ in range(n_batches)]
    meta = {"seed": seed, "n_batches": n_batches, "batch_size": batch_size}
    write_fixed_set(path, batches, config, metadata=meta, overwrite=overwrite)
    return FixedSet(config, batches, meta)
