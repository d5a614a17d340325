"""Shared fixtures: the scripts of ``benchmarks/`` as modules (the folder is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("amorgp_experiments") is None:  # the paper guide's examples
    sys.path.insert(0, str(ROOT / "experiments"))


def load_script(path: str, name: str) -> ModuleType:
    """The file ``path`` of the repository imported as the module ``name`` (entered in
    ``sys.modules``, where dataclasses resolve their annotations)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as the module ``name``."""
    return load_script(f"benchmarks/{name}.py", name)


@pytest.fixture(scope="session")
def script() -> Callable[[str, str], ModuleType]:
    """:func:`load_script`, for tests (a script of ``tools/`` or ``.ci/``)."""
    return load_script


@pytest.fixture
def benchmark_script() -> Callable[[str], ModuleType]:
    """:func:`load_benchmark`, for tests."""
    return load_benchmark
