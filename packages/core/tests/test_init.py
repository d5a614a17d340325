"""The package interface: ``__all__`` is importable, and only the data contract loads torch."""

from __future__ import annotations

import subprocess
import sys

import amorgp.core as core
from amorgp.core.testing import check_public_names


def test_all_names_exist() -> None:
    import amorgp.core.fit as fit

    check_public_names(core)
    check_public_names(fit)


def test_errors_warnings_and_units_do_not_load_torch_or_numpy() -> None:
    code = (
        "import sys, amorgp.core, amorgp.core.errors, amorgp.core.warn, amorgp.core.units; "
        "assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert 'numpy' not in sys.modules, 'numpy was imported'; "
        "import amorgp.core.data; assert 'torch' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_data_contract_without_torch_names_the_extra() -> None:
    """Without PyTorch (the ``data`` extra) ``amorgp.core.data`` stops with one line naming
    what to install, while the errors still import."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import amorgp.core.errors as e\n"
        "try:\n"
        "    import amorgp.core.data\n"
        "except e.MissingExtraError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=120, capture_output=True, text=True
    )
    assert out.stdout.strip() == (
        "amorgp.core.data needs PyTorch: pip install 'amorgp-core[data]' (or torch)"
    )
