"""The bundled pretrained models: the default and earlier defaults kept loadable by name.

Each bundled model is a checkpoint directory ``pretrained/<name>/`` of this package
(``model.safetensors`` + ``checkpoint.json`` with checksums); ``default`` is the one
:meth:`~amorgp.amortizer.Amortizer.from_pretrained` loads without arguments.
"""

from __future__ import annotations

import os
from pathlib import Path

from amorgp.amortizer.errors import CheckpointError

__all__ = [
    "PRETRAINED_DIR",
    "PRETRAINED_ROOT",
    "pretrained_names",
    "resolve_checkpoint",
    "ship_model",
]

PRETRAINED_ROOT = Path(__file__).parent / "pretrained"
"""The folder of the bundled models, one checkpoint directory per name."""

PRETRAINED_DIR = PRETRAINED_ROOT / "default"

DATA_DIR = Path(__file__).parent / "data"
"""The bundled CSV datasets (the demo's airline series and the paper's four UCI tables);
the repository's top-level ``data/`` is a link to this folder."""


def pretrained_names() -> list[str]:
    """Names of the bundled models (``"default"`` and the earlier ones kept loadable)."""
    return sorted(p.name for p in PRETRAINED_ROOT.iterdir() if (p / "checkpoint.json").exists())


def resolve_checkpoint(path: str | os.PathLike[str] | None) -> Path:
    """A checkpoint directory from a path, a bundled model's name, or ``None`` (the default).

    Raises:
        CheckpointError: neither an existing directory nor a bundled name.
    """
    if path is None:
        if not PRETRAINED_DIR.exists():
            raise CheckpointError(
                f"no checkpoint at {PRETRAINED_DIR} (the bundled weights are missing from "
                "this installation)"
            )
        return PRETRAINED_DIR
    where = Path(path)
    if where.exists():
        return where
    if isinstance(path, str) and "/" not in path and (PRETRAINED_ROOT / path).is_dir():
        return PRETRAINED_ROOT / path
    raise CheckpointError(
        f"no checkpoint at {where}; give a checkpoint directory or the name of a bundled "
        f"model ({', '.join(pretrained_names())})"
    )


def ship_model(
    source: str | os.PathLike[str],
    name: str = "default",
    *,
    provenance: str,
    reproduce: str,
    hardware: str,
    extra: dict[str, object] | None = None,
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """Copy the weights of checkpoint ``source`` into the bundled model ``name``.

    The model file is copied as is (its SHA-256 is verified by loading); the JSON gains
    ``provenance``, ``reproduce`` (the commands that rebuild it), ``hardware`` and ``extra``
    entries, and loses any optimiser entry.  The target directory is replaced atomically.

    Raises:
        CheckpointError: ``source`` does not load, or the copy does not verify.
    """
    import json
    import shutil
    import tempfile

    from amorgp.amortizer.checkpoint import (
        MODEL_FILE,
        load_checkpoint,
        replace_directory,
        tensor_files,
    )

    src = Path(source)
    meta = load_checkpoint(src).meta
    files = tensor_files(src, meta, MODEL_FILE)
    meta = {k: v for k, v in meta.items() if k not in ("optimizer",)}
    meta["sha256"] = {f: meta["sha256"][f] for f in files}
    shards = meta.pop("shards", None)
    if isinstance(shards, dict) and "model" in shards:
        meta["shards"] = {"model": shards["model"]}
    meta.update(provenance=provenance, reproduce=reproduce, hardware=hardware, **(extra or {}))
    base = Path(root) if root is not None else PRETRAINED_ROOT
    target = base / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
    try:
        for f in files:
            shutil.copyfile(src / f, tmp / f)
        (tmp / "checkpoint.json").write_text(
            json.dumps(meta, indent=2, sort_keys=True, default=str)
        )
        load_checkpoint(tmp)  # verifies the checksum and the architecture
        replace_directory(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
