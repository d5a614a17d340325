"""The bundled pretrained models: the default and the AHGP comparison network.

Each bundled model is a checkpoint directory ``pretrained/<name>/`` of this package
(``model.safetensors`` + ``checkpoint.json`` with checksums); ``default`` is the one
:meth:`~amorgp.amortizer.Amortizer.from_pretrained` loads without arguments.

The earlier defaults (``default-phase1``, ``small-*``) are not in the wheel: they live in
the repository's top-level ``models/`` folder, loadable by path from anywhere and, from a
source checkout, by name (with a warning saying where the network was loaded from).
"""

from __future__ import annotations

import os
from pathlib import Path

from amorgp.core.errors import CheckpointError
from amorgp.core.warn import warn

__all__ = [
    "PRETRAINED_DIR",
    "PRETRAINED_ROOT",
    "REPOSITORY_MODELS",
    "check_model_name",
    "pretrained_names",
    "repository_model_names",
    "resolve_checkpoint",
    "ship_model",
]

PRETRAINED_ROOT = Path(__file__).parents[1] / "pretrained"
"""The folder of the bundled models, one checkpoint directory per name."""

PRETRAINED_DIR = PRETRAINED_ROOT / "default"

DATA_DIR = Path(__file__).parents[1] / "data"
"""The bundled CSV datasets (the demo's airline series and the paper's four UCI tables);
the repository's top-level ``data/`` is a link to this folder."""


def _repository_models() -> Path | None:
    repo = Path(__file__).resolve().parents[6]
    inside = (repo / "packages" / "amortizer" / "pyproject.toml").is_file()
    return repo / "models" if inside and (repo / "models").is_dir() else None


REPOSITORY_MODELS = _repository_models()
"""The repository's ``models/`` folder (earlier networks, not in the wheel) when this
package runs from a source checkout; ``None`` in an installed wheel."""


def _names(root: Path | None) -> list[str]:
    if root is None or not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "checkpoint.json").exists())


def pretrained_names() -> list[str]:
    """Names of the models bundled in the package (``"default"``, ``"ahgp-se-ard-d4-v1"``)."""
    return _names(PRETRAINED_ROOT)


def repository_model_names() -> list[str]:
    """Names of the earlier networks in the repository's ``models/`` folder, loadable by
    name from a source checkout (empty in an installed wheel)."""
    return _names(REPOSITORY_MODELS)


def _as_name(path: str | os.PathLike[str]) -> str | None:
    """``path`` as a model name: one path component (``small-d8-c640k``), else ``None``."""
    parts = Path(path).parts
    return parts[0] if len(parts) == 1 and parts[0] not in (".", "..") else None


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
    name = _as_name(path)
    named = None
    if name is not None:
        for root, kind in ((PRETRAINED_ROOT, "bundled"), (REPOSITORY_MODELS, "repository")):
            if root is not None and (root / name / "checkpoint.json").is_file():
                named = (root / name, kind)
                break
    if where.exists():
        if named is not None:
            warn(
                f"loaded the folder {where.resolve()}, not the {named[1]} model {name!r} of "
                f"the same name (give its path, {named[0]}, to load that one)"
            )
        return where
    if named is not None:
        if named[1] == "repository":
            warn(
                f"{name!r} is not bundled with the package: loaded it from the repository's "
                f"models/ folder ({named[0]})"
            )
        return named[0]
    others = repository_model_names()
    more = f"; in this checkout's models/ folder: {', '.join(others)}" if others else ""
    raise CheckpointError(
        f"no checkpoint at {where}; give a checkpoint directory or the name of a bundled "
        f"model ({', '.join(pretrained_names())}{more})"
    )


def check_model_name(name: object) -> str:
    """``name`` if it can name a bundled model: letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter or digit (no path, no hidden name, not ``""``, ``.`` or ``..``).

    Raises:
        OptionError: naming the problem.
    """
    import re

    from amorgp.core.errors import OptionError

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
        raise OptionError(
            f"model name {name!r} is not a plain folder name: use letters, digits, '.', '_' "
            "and '-', starting with a letter or digit (at most 100 characters)"
        )
    return name


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
        OptionError: ``name`` is not a plain folder name (checked before anything is read
            or written).
        CheckpointError: ``source`` does not load, or the copy does not verify.
    """
    import json
    import shutil
    import tempfile

    from amorgp.amortizer.networks.checkpoint import (
        MODEL_FILE,
        load_checkpoint,
        replace_directory,
        tensor_files,
    )

    check_model_name(name)
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
