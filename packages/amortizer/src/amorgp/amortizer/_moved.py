"""Deprecated import paths of modules that moved, kept importable with a warning.

A module that moved leaves no file at its old path: an import of the old dotted name is
answered by :class:`MovedModuleFinder`, which imports the module at its new path, warns
(:class:`DeprecationWarning` naming the new path) and hands back that same module object,
so ``amorgp.amortizer.train`` and ``amorgp.amortizer.training.train`` are one module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["EXPERIMENTS_HINT", "MOVED", "MovedModuleFinder", "install", "require_experiments"]

_TRAINING = (
    "train",
    "trainer",
    "loss",
    "runstate",
    "rundir",
    "runtime",
    "campaign",
    "campaign_plan",
    "campaign_segments",
)

#: old module path -> new module path (submodules of a moved package follow it).
MOVED: dict[str, str] = {
    **{f"amorgp.amortizer.{name}": f"amorgp.amortizer.training.{name}" for name in _TRAINING},
    "amorgp.amortizer.campaign_report": "amorgp_experiments.campaign_report",
    "amorgp.amortizer.paper": "amorgp_experiments.paper",
}

EXPERIMENTS_HINT = (
    "amorgp_experiments lives in the repository's experiments/ folder, outside the "
    "amorgp-amortizer wheel; from a source checkout, run `pip install -e experiments` "
    "(or `nox -s paper`)"
)


def new_path(fullname: str) -> str | None:
    """The new dotted path of ``fullname`` if it (or a package above it) moved."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError as err:
            if self.target.startswith("amorgp_experiments") and err.name == "amorgp_experiments":
                from amorgp.amortizer.errors import MissingExtraError

                raise MissingExtraError(
                    f"{spec.name} moved to {self.target}: {EXPERIMENTS_HINT}", name=spec.name
                ) from None
            raise
        self.spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system stamped the alias's spec on the module: give it back its own.
        module.__spec__ = self.spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Answer imports of a moved module's old path with the module at its new path."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_path(fullname)
        if new is None:
            return None
        warnings.warn(
            f"{fullname} moved to {new}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put one :class:`MovedModuleFinder` on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())


def require_experiments(what: str) -> None:
    """Raise :class:`~amorgp.amortizer.errors.MissingExtraError` (naming ``what`` and how to
    get them) unless the repository's experiments package is importable."""
    try:
        import amorgp_experiments  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name != "amorgp_experiments":
            raise
        from amorgp.amortizer.errors import MissingExtraError

        raise MissingExtraError(
            f"{what} needs the experiments package: {EXPERIMENTS_HINT}", name=err.name
        ) from None
