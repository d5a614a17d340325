"""The package interface: ``__all__`` is importable and the package does not load torch."""

from __future__ import annotations

import subprocess
import sys

import amorgp.kernel_grammar as kg
from amorgp.core.testing import check_public_names


def test_all_names_exist() -> None:
    check_public_names(kg)


def test_import_does_not_load_torch() -> None:
    code = (
        "import sys, amorgp.kernel_grammar as kg; "
        "kg.DimWiseStructure.parse('SE + PER', 2); kg.positive(0.0, 'noise'); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
