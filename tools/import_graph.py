"""Print the import graph of the amorgp packages and find its cycles.

The graph is read from the sources (``packages/*/src/amorgp/**.py``) with :mod:`ast`,
without importing anything.  Only module-level imports count: an import inside a
function or method runs when it is called, and one under ``if TYPE_CHECKING:`` never
runs, so neither can close a circle at import time.  ``from a.b import c`` is an edge
to ``a.b.c`` where that is a module, else to ``a.b``.

Usage::

    python tools/import_graph.py              # packages, then modules inside each package
    python tools/import_graph.py --cycles     # only the cycles; exit status 1 if any
    python tools/import_graph.py --deferred   # imports inside functions count too

``--deferred`` shows the circles that an import deferred into a function hides (they do
not fail at import time but still tie the modules together); imports in a module's
``__getattr__`` (names imported on first use) and under ``TYPE_CHECKING`` never count.

Cycles are the strongly connected components of more than one module (or a module
that imports itself), between modules and between packages.

Private modules: no module imports a private module (a path part that starts with ``_``,
such as ``amorgp.cli._output``) of another package, anywhere in its body; the same holds
for the scripts outside the packages (``experiments/``, ``benchmarks/``).  The tool lists
such imports and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "amorgp."


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Map each module name (``amorgp.x.y``) under ``packages/*/src`` to its file."""
    out: dict[str, Path] = {}
    for src in sorted((root / "packages").glob("*/src")):
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _top_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _top_level_imports(node.body)
            yield from _top_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level_imports(block)
            for handler in node.handlers:
                yield from _top_level_imports(handler.body)
        elif isinstance(node, ast.With):
            yield from _top_level_imports(node.body)


def _all_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import, also inside functions and classes, except under ``TYPE_CHECKING`` and
    in a module's ``__getattr__`` (names imported on first use, PEP 562)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _all_imports(node.orelse)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _all_imports([child])
                else:
                    for sub in ast.walk(child):
                        if isinstance(sub, (ast.Import, ast.ImportFrom)):
                            yield sub


def imports_of(name: str, path: Path, modules: Iterable[str], deferred: bool = False) -> set[str]:
    """The ``amorgp`` modules that module ``name`` imports at module level (and inside
    functions too if ``deferred``)."""
    known = set(modules)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    nodes = _all_imports(tree.body) if deferred else _top_level_imports(tree.body)
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = name.split(".")
                drop = node.level - (1 if is_package else 0)
                base = base[: len(base) - drop] if drop else base
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = []
            for alias in node.names:
                full = f"{stem}.{alias.name}"
                targets.append(full if full in known else stem)
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith(PREFIX):
                out.add(target)
    return out


def module_graph(root: Path = ROOT, deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the amorgp modules it imports at module level (``deferred``: anywhere)."""
    files = module_files(root)
    return {name: imports_of(name, path, files, deferred) for name, path in files.items()}


def package_of(module: str) -> str:
    """``amorgp.lazy_kernels.keops`` -> ``lazy_kernels``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    out: dict[str, set[str]] = {}
    for source, targets in graph.items():
        pkg = package_of(source)
        out.setdefault(pkg, set())
        out[pkg] |= {package_of(t) for t in targets if package_of(t) != pkg}
    return out


def is_private(module: str) -> bool:
    """Whether a part of the dotted path is private (``_output``; not ``__main__``)."""
    return any(p.startswith("_") and not p.startswith("__") for p in module.split("."))


def private_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(importer, private module)`` pairs where the private module is another package's."""
    return sorted(
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if is_private(target) and package_of(target) != package_of(source)
    )


def external_graph(
    root: Path = ROOT, folders: Iterable[str] = ("experiments", "benchmarks")
) -> dict[str, set[str]]:
    """``path -> amorgp modules it imports`` (anywhere in its body) for the Python files of
    ``folders``, which sit outside the packages."""
    files = module_files(root)
    out: dict[str, set[str]] = {}
    for folder in folders:
        base = root / folder
        for path in sorted(base.rglob("*.py")) if base.is_dir() else []:
            name = str(path.relative_to(root))
            out[name] = imports_of(name, path, files, deferred=True)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", action="store_true", help="print only the cycles")
    parser.add_argument(
        "--deferred",
        action="store_true",
        help="count imports inside functions too (circles hidden by deferring an import)",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = parser.parse_args(argv)
    graph = module_graph(args.root, deferred=args.deferred)
    packages = package_graph(graph)
    module_cycles = cycles(graph)
    package_cycles = cycles(packages)
    if not args.cycles:
        print("## Packages")
        for pkg in sorted(packages):
            print(f"{pkg} -> {', '.join(sorted(packages[pkg])) or '(none)'}")
        for pkg in sorted(packages):
            print(f"\n## Inside {pkg}")
            for module in sorted(m for m in graph if package_of(m) == pkg):
                inner = sorted(t for t in graph[module] if package_of(t) == pkg)
                if inner:
                    print(f"{module} -> {', '.join(inner)}")
        print()
    print(
        f"## Cycles: {len(package_cycles)} between packages, {len(module_cycles)} between modules"
    )
    for component in package_cycles + module_cycles:
        print(" <-> ".join(component))
    private = private_imports(module_graph(args.root, deferred=True))
    private += private_imports(external_graph(args.root))
    print(f"## Imports of another package's private module: {len(private)}")
    for source, target in private:
        print(f"{source} -> {target}")
    return 1 if module_cycles or package_cycles or private else 0


if __name__ == "__main__":
    sys.exit(main())
