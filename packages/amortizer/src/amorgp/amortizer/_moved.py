"""Deprecated import paths of modules that moved, kept importable with a warning.

A module that moved leaves no file at its old path: an import of the old dotted name is
answered by :class:`MovedModuleFinder`, which imports the module at its new path, warns
(:class:`DeprecationWarning` naming the new path) and hands back that same module object,
so ``amorgp.amortizer.train`` and ``amorgp.amortizer.training.train`` are one module.
Where the new path belongs to a part installed apart (:mod:`amorgp.amortizer.extras`:
``amorgp-cli``, ``amorgp-gpytorch``, the experiments) and that part is absent, the old
path raises :class:`~amorgp.amortizer.errors.MissingExtraError` saying what to install.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence

from amorgp.amortizer.extras import EXPERIMENTS_HINT, INSTALL_HINTS, require_experiments

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
    "amorgp.amortizer.cli": "amorgp.cli",
    "amorgp.amortizer.plotting": "amorgp.cli.plotting",
    "amorgp.amortizer.bridge": "amorgp.gpytorch",
}


def new_path(fullname: str) -> str | None:
    """The new dotted path of ``fullname`` if it (or a package above it) moved."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


def _part_of(module: str) -> str | None:
    """The part installed apart (a key of ``INSTALL_HINTS``) that ``module`` belongs to."""
    for part in INSTALL_HINTS:
        if module == part or module.startswith(part + "."):
            return part
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None
        self.alias_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError as err:
            part = _part_of(self.target)
            if part is not None and err.name is not None and _part_of(err.name) == part:
                from amorgp.amortizer.errors import MissingExtraError

                raise MissingExtraError(
                    f"{spec.name} moved to {self.target}: {INSTALL_HINTS[part]}", name=spec.name
                ) from None
            raise
        self.spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system stamped the alias's spec on the module: give it back its own.
        module.__spec__ = self.spec

    def get_code(self, fullname: str) -> types.CodeType | None:
        """What ``python -m <old path>`` runs: the new module's code (its ``__main__``'s
        where the new path is a package), so ``python -m amorgp.amortizer.cli`` still works."""
        self.create_module(importlib.machinery.ModuleSpec(fullname, self))  # or a one-line error
        spec = importlib.util.find_spec(self.target)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(self.target + ".__main__")
        loader = None if spec is None else spec.loader
        if spec is None or not isinstance(loader, importlib.abc.InspectLoader):
            raise ImportError(
                f"{fullname} moved to {self.target}, which cannot be run", name=fullname
            )
        if self.alias_spec is not None:  # runpy sets sys.argv[0] to the origin
            self.alias_spec.origin = spec.origin
        return loader.get_code(spec.name)


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
        loader = _AliasLoader(new)
        loader.alias_spec = importlib.machinery.ModuleSpec(fullname, loader)
        return loader.alias_spec


def install() -> None:
    """Put one :class:`MovedModuleFinder` on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
