"""Without GPyTorch, importing the bridge names the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_import_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name.startswith("amorgp.gpytorch"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "gpytorch", None)  # import gpytorch -> ImportError
    with pytest.raises(ImportError, match=r"amorgp-amortizer\[gpytorch\]"):
        importlib.import_module("amorgp.gpytorch")


def test_package_imports_without_the_bridge() -> None:
    import amorgp.amortizer

    assert "bridge" not in amorgp.amortizer.__all__
