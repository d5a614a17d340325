"""The package interface: ``__all__`` is importable, and only the data contract loads torch."""

from __future__ import annotations

import subprocess
import sys

import amorgp.core as core


def test_all_names_exist() -> None:
    assert sorted(core.__all__) == sorted(set(core.__all__))
    for name in core.__all__:
        assert hasattr(core, name), name


def test_errors_warnings_and_units_do_not_load_torch_or_numpy() -> None:
    code = (
        "import sys, amorgp.core, amorgp.core.errors, amorgp.core.warn, amorgp.core.units; "
        "assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert 'numpy' not in sys.modules, 'numpy was imported'; "
        "import amorgp.core.data; assert 'torch' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
