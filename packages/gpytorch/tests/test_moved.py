"""The bridge's old import path (``amorgp.amortizer.bridge``) is this package, with a
DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("gpytorch")
pytest.importorskip("botorch")

import amorgp.gpytorch
import amorgp.gpytorch.fit
import amorgp.gpytorch.lean


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("amorgp.amortizer.bridge", amorgp.gpytorch),
        ("amorgp.amortizer.bridge.fit", amorgp.gpytorch.fit),
        ("amorgp.amortizer.bridge.lean", amorgp.gpytorch.lean),
    ],
)
def test_old_module_paths_are_the_moved_modules_with_a_warning(old: str, new: object) -> None:
    import amorgp.amortizer  # noqa: F401  (installs the finder of moved modules)

    for name in [m for m in sys.modules if m.startswith("amorgp.amortizer.bridge")]:
        sys.modules.pop(name)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new.__name__}"):  # type: ignore[attr-defined]
        module = importlib.import_module(old)
    assert module is new


def test_old_names_are_the_new_objects() -> None:
    sys.modules.pop("amorgp.amortizer.bridge", None)
    with pytest.warns(DeprecationWarning, match="amorgp.gpytorch"):
        from amorgp.amortizer.bridge import AmortizedFit, fit_amortized, to_gpytorch
    assert fit_amortized is amorgp.gpytorch.fit_amortized
    assert AmortizedFit is amorgp.gpytorch.AmortizedFit
    assert to_gpytorch is amorgp.gpytorch.to_gpytorch
    import amorgp.amortizer as amortizer

    sys.modules.pop("amorgp.amortizer.bridge", None)
    with pytest.warns(DeprecationWarning, match="amorgp.gpytorch"):
        assert amortizer.bridge is amorgp.gpytorch  # type: ignore[attr-defined]
