"""The package graph of the monorepo, read from each package's ``pyproject.toml``.

A package's siblings are the ``amorgp-*`` requirements of its ``[project]
dependencies`` and of its optional dependencies (extras such as ``train``: a session
that installs an extra installs those siblings from the repository first); it needs
PyTorch if it or any sibling requires ``torch``.  An extra that names a package which
itself depends on this one (``amorgp-amortizer[gpytorch]`` pulls ``amorgp-gpytorch``,
which requires ``amorgp-amortizer``) is a convenience for users, not a sibling: it is
left out of the graph, which would otherwise hold a cycle.
Used by ``noxfile.py``; no dependency beyond the standard library.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = [
    "PREFIX",
    "Package",
    "closure",
    "has_marker",
    "needs_torch",
    "read_package",
    "read_packages",
    "topological_order",
]

PREFIX = "amorgp-"
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class Package:
    """One package of ``packages/`` as declared by its ``pyproject.toml``.

    Attributes:
        name: directory name under ``packages/`` (the distribution name without ``amorgp-``).
        siblings: the ``amorgp-*`` packages it declares directly.
        requires_torch: whether its own dependencies name ``torch``.
        extra_siblings: the siblings named only by its extras (a subset of ``siblings``).
        extra_torch: whether one of its extras names ``torch`` (``amorgp-core[data]``): its
            own tests need it, the packages that depend on it do not.
    """

    name: str
    siblings: tuple[str, ...]
    requires_torch: bool
    extra_siblings: tuple[str, ...] = ()
    extra_torch: bool = False


def _requirement_name(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement string."""
    match = _REQUIREMENT_NAME.match(requirement)
    if match is None:
        raise ValueError(f"cannot read a distribution name from requirement {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def read_package(pyproject: Path) -> Package:
    """Read one package's name, ``amorgp-*`` siblings and torch requirement."""
    with pyproject.open("rb") as f:
        project = tomllib.load(f).get("project", {})
    dist = _requirement_name(project.get("name", ""))
    name = pyproject.parent.name
    if dist != PREFIX + name:
        raise ValueError(f"{pyproject}: project name {dist!r} should be {PREFIX + name!r}")
    deps = [_requirement_name(r) for r in project.get("dependencies", [])]
    extras = [
        _requirement_name(r)
        for group in project.get("optional-dependencies", {}).values()
        for r in group
    ]
    siblings = tuple(
        dict.fromkeys(
            d.removeprefix(PREFIX) for d in deps + extras if d.startswith(PREFIX) and d != dist
        )
    )
    hard = {d.removeprefix(PREFIX) for d in deps}
    return Package(
        name,
        siblings,
        "torch" in deps,
        tuple(s for s in siblings if s not in hard),
        "torch" in extras,
    )


def topological_order(packages: dict[str, Package]) -> list[str]:
    """Package names so that every package comes after the siblings it declares.

    Ties are broken alphabetically, so the order is reproducible.

    Raises:
        ValueError: if a package declares a sibling that is not under ``packages/``,
            or the declarations form a cycle (the cycle is named).
    """
    for pkg in packages.values():
        unknown = [s for s in pkg.siblings if s not in packages]
        if unknown:
            raise ValueError(
                f"packages/{pkg.name} declares {', '.join(PREFIX + u for u in unknown)}, "
                "which is not a package of this repository"
            )
    order: list[str] = []
    state: dict[str, str] = {}  # "visiting" or "done"

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = [*path[path.index(name) :], name]
            raise ValueError(f"dependency cycle between packages: {' -> '.join(cycle)}")
        state[name] = "visiting"
        for sibling in sorted(packages[name].siblings):
            visit(sibling, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in sorted(packages):
        visit(name, [])
    return order


def closure(packages: dict[str, Package], names: list[str]) -> set[str]:
    """``names`` and every sibling they declare, transitively."""
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(packages[name].siblings)
    return seen


def read_packages(packages_dir: Path) -> dict[str, Package]:
    """Every ``packages_dir/<name>/pyproject.toml``, keyed by directory name.

    An extra's sibling that requires the package itself (through its ``[project]
    dependencies``, transitively) is dropped from the package's siblings.
    """
    packages = {
        p.parent.name: read_package(p) for p in sorted(packages_dir.glob("*/pyproject.toml"))
    }
    hard = {
        name: Package(name, tuple(s for s in pkg.siblings if s not in pkg.extra_siblings), False)
        for name, pkg in packages.items()
    }
    out = {}
    for name, pkg in packages.items():
        upward = {s for s in pkg.extra_siblings if s in hard and name in closure(hard, [s]) - {s}}
        out[name] = replace(
            pkg,
            siblings=tuple(s for s in pkg.siblings if s not in upward),
            extra_siblings=tuple(s for s in pkg.extra_siblings if s not in upward),
        )
    return out


def needs_torch(packages: dict[str, Package], name: str) -> bool:
    """Whether ``name``'s tests need ``torch``: it or any sibling it needs, transitively,
    requires it, or one of its own extras names it."""
    own = packages[name].extra_torch
    return own or any(packages[m].requires_torch for m in closure(packages, [name]))


def has_marker(tests: Path, marker: str) -> bool:
    """Whether any test source under ``tests`` applies ``pytest.mark.<marker>``."""
    pattern = re.compile(rf"\bmark\.{marker}\b")
    return any(pattern.search(f.read_text()) for f in tests.rglob("*.py"))
