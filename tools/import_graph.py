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

Declared dependencies (``--deps``): every package's ``amorgp-*`` requirements equal the
amorgp packages its code imports.  Every import counts here (module level, inside
functions, in a module's ``__getattr__``), except one under ``if TYPE_CHECKING:``.

* An import at module level, outside a ``try`` that catches ``ImportError`` (or
  ``ModuleNotFoundError``), is *required*: its package is in ``[project] dependencies``.
* An import inside a function or class method, or in such a ``try``, is *optional*: its
  package is in ``dependencies`` or in an extra other than ``test`` (the code that needs
  an extra imports it on first use, or falls back when it is absent).
* Every ``amorgp-*`` entry of ``dependencies`` is imported somewhere in the package's
  code.  An extra may name a sibling the code does not import (``amorgp-amortizer[gpytorch]``
  pulls the bridge that builds on the amortizer, a convenience for users).
* A module under the package's ``tests/`` imports only the package itself and siblings
  named in ``dependencies`` or an extra (``test`` included).

Each mismatch is one line; the check exits 1 if there is one::

    python tools/import_graph.py --deps
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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
        out |= _targets(node, name, is_package, known)
    return out


def _targets(
    node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known: set[str]
) -> set[str]:
    """The ``amorgp`` modules one import statement of module ``name`` names."""
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
    out: set[str] = set()
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


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for kind in kinds:
            if isinstance(kind, ast.Name) and kind.id in _IMPORT_ERRORS:
                return True
    return False


def _classified_imports(
    body: list[ast.stmt], optional: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """``(import, optional)`` for every import of ``body`` but those under
    ``TYPE_CHECKING``; ``optional``: inside a function or a ``try`` that catches
    ``ImportError``."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, optional
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _classified_imports(node.orelse, optional)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _classified_imports(node.body, True)
        elif isinstance(node, ast.Try) and _catches_import_error(node):
            yield from _classified_imports(node.body, True)
            for handler in node.handlers:
                yield from _classified_imports(handler.body, optional)
            yield from _classified_imports(node.orelse, True)
            yield from _classified_imports(node.finalbody, optional)
        else:
            for _field, value in ast.iter_fields(node):
                if isinstance(value, list):
                    stmts = [v for v in value if isinstance(v, ast.stmt)]
                    for case in (v for v in value if isinstance(v, ast.match_case)):
                        stmts.extend(case.body)
                    yield from _classified_imports(stmts, optional)


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else requirement


@dataclass(frozen=True)
class Declared:
    """A package's ``amorgp-*`` requirements: ``dependencies`` and each extra's."""

    folder: str
    dependencies: frozenset[str]
    extras: dict[str, frozenset[str]]


def declared(root: Path = ROOT) -> dict[str, Declared]:
    """Import package name (``lazy_kernels``) -> what ``packages/<folder>/pyproject.toml``
    declares, as import package names."""
    dist_to_pkg: dict[str, str] = {}
    folders: dict[str, Path] = {}
    for src in sorted((root / "packages").glob("*/src")):
        for pkg_dir in sorted(p for p in (src / "amorgp").glob("*") if p.is_dir()):
            if (pkg_dir / "__init__.py").exists():
                folders[pkg_dir.name] = src.parent
                dist_to_pkg["amorgp-" + src.parent.name] = pkg_dir.name

    def amorgp(requirements: Iterable[str]) -> frozenset[str]:
        names = (_requirement_name(r) for r in requirements)
        return frozenset(dist_to_pkg.get(n, n) for n in names if n.startswith("amorgp-"))

    out: dict[str, Declared] = {}
    for pkg, folder in folders.items():
        with (folder / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f).get("project", {})
        extras = project.get("optional-dependencies", {})
        out[pkg] = Declared(
            folder.name,
            amorgp(project.get("dependencies", [])),
            {k: amorgp(v) for k, v in extras.items()},
        )
    return out


def dependency_mismatches(root: Path = ROOT) -> list[str]:
    """One line per difference between a package's imports and its declared ``amorgp-*``
    dependencies (the rule is in the module's docstring); empty if they agree."""
    files = module_files(root)
    known = set(files)
    decl = declared(root)
    required: dict[str, dict[str, str]] = {pkg: {} for pkg in decl}  # pkg -> sibling -> file
    optional: dict[str, dict[str, str]] = {pkg: {} for pkg in decl}
    for name, path in files.items():
        pkg = package_of(name)
        if pkg not in decl:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = str(path.relative_to(root / "packages" / decl[pkg].folder))
        for node, is_optional in _classified_imports(tree.body):
            for target in _targets(node, name, path.name == "__init__.py", known):
                other = package_of(target)
                if other != pkg and other in decl:
                    (optional if is_optional else required)[pkg].setdefault(other, rel)
    out: list[str] = []
    for pkg, d in sorted(decl.items()):
        where = f"packages/{d.folder}"
        runtime_extras = {k: v for k, v in d.extras.items() if k != "test"}
        for other, rel in sorted(required[pkg].items()):
            if other not in d.dependencies:
                in_extras = sorted(k for k, v in runtime_extras.items() if other in v)
                hint = f" (only in extras: {', '.join(in_extras)})" if in_extras else ""
                out.append(
                    f"{where}: {rel} imports amorgp.{other} at module level, but "
                    f"amorgp-{decl[other].folder} is not in its dependencies{hint}"
                )
        for other, rel in sorted(optional[pkg].items()):
            if other in required[pkg] or other in d.dependencies:
                continue
            if not any(other in v for v in runtime_extras.values()):
                out.append(
                    f"{where}: {rel} imports amorgp.{other} on first use, but "
                    f"amorgp-{decl[other].folder} is neither in its dependencies nor in an extra"
                )
        for other in sorted(d.dependencies - set(required[pkg]) - set(optional[pkg])):
            name = f"amorgp-{decl[other].folder}" if other in decl else other
            out.append(f"{where}: declares {name} in its dependencies but never imports it")
        allowed = {pkg} | d.dependencies | {s for v in d.extras.values() for s in v}
        tests = root / "packages" / d.folder / "tests"
        for path in sorted(tests.rglob("*.py")) if tests.is_dir() else []:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            seen: set[str] = set()
            for node, _ in _classified_imports(tree.body):
                for target in _targets(node, "tests", False, known):
                    other = package_of(target)
                    if other in decl and other not in allowed and other not in seen:
                        seen.add(other)
                        out.append(
                            f"{where}: {path.relative_to(tests.parent)} imports amorgp.{other}, but "
                            f"amorgp-{decl[other].folder} is neither in its dependencies "
                            "nor in an extra"
                        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", action="store_true", help="print only the cycles")
    parser.add_argument(
        "--deferred",
        action="store_true",
        help="count imports inside functions too (circles hidden by deferring an import)",
    )
    parser.add_argument(
        "--deps",
        action="store_true",
        help="only compare each package's declared amorgp-* dependencies with its imports",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = parser.parse_args(argv)
    if args.deps:
        mismatches = dependency_mismatches(args.root)
        for line in mismatches:
            print(line)
        if not mismatches:
            print("## Declared dependencies equal the imports")
        return 1 if mismatches else 0
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
