"""The bundled pretrained models: the default and earlier defaults kept loadable by name.

Each bundled model is a checkpoint directory ``pretrained/<name>/`` of this package
(``model.safetensors`` + ``checkpoint.json`` with checksums); ``default`` is the one
:meth:`~amorgp.amortizer.Amortizer.from_pretrained` loads without arguments.
"""

from __future__ import annotations

import os
from pathlib import Path

from amorgp.kernel_grammar import CheckpointError

__all__ = ["PRETRAINED_DIR", "PRETRAINED_ROOT", "pretrained_names", "resolve_checkpoint"]

PRETRAINED_ROOT = Path(__file__).parent / "pretrained"
"""The folder of the bundled models, one checkpoint directory per name."""

PRETRAINED_DIR = PRETRAINED_ROOT / "default"


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
