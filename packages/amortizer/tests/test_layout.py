"""The amortizer's folders are layers: ``networks`` imports neither ``stages`` nor
``frontends``, ``stages`` does not import ``frontends``, and no module imports a private
name of another module of the package (read from the sources, every import counted, the
ones inside functions and under ``TYPE_CHECKING`` included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "amorgp" / "amortizer"
LAYERS = {"networks": 0, "stages": 1, "frontends": 2}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every ``from amorgp.amortizer... import`` and ``import
    amorgp.amortizer...`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("amorgp.amortizer")
        ):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("amorgp.amortizer")]
    return out


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[2]) if len(parts) > 2 else None


SOURCES = sorted(p for folder in LAYERS for p in (PACKAGE / folder).glob("*.py"))


def test_the_layers_are_found() -> None:
    assert len(SOURCES) > 30
    assert {p.parent.name for p in SOURCES} == set(LAYERS)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_layer_imports_only_the_layers_below_it(path: Path) -> None:
    own = LAYERS[path.parent.name]
    above = []
    for module, names in _imports(path):
        targets = [module] if _layer(module) is not None else [f"{module}.{n}" for n in names]
        above += [t for t in targets if (_layer(t) or -1) > own]
    assert above == [], f"{path.parent.name}/{path.name} imports from a higher layer: {above}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_no_private_name_is_imported_across_modules(path: Path) -> None:
    private = [
        f"{module}.{n}"
        for module, names in _imports(path)
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert private == []
