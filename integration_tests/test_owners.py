"""Ownership rules of the repository, read from the sources (``docs/architecture.md``):
one copy of each dataset, one CSV reader, and no import of another subpackage's private
modules or names."""

from __future__ import annotations

import ast
import hashlib
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV_READER = "packages/amortizer/src/amorgp/amortizer/frontends/io.py"
PACKAGE_DATA = "packages/amortizer/src/amorgp/amortizer/data"  # bundled with the package
OTHER_CSV_READERS: set[str] = set()
_PARSES_CSV = re.compile(r"np\.loadtxt|np\.genfromtxt|csv\.reader|csv\.DictReader|pd\.read_csv")


def _sources(*roots: str) -> list[Path]:
    return sorted(p for r in roots for p in (ROOT / r).rglob("*.py") if "tests" not in p.parts)


def test_each_dataset_is_stored_once() -> None:
    by_hash: dict[str, list[str]] = defaultdict(list)
    for path in ROOT.rglob("*.csv"):
        parts = path.relative_to(ROOT).parts
        if parts[0].startswith(".") or "site-packages" in parts or path.is_symlink():
            continue
        if any(p.is_symlink() for p in path.relative_to(ROOT).parents if p != Path(".")):
            continue
        by_hash[hashlib.sha256(path.read_bytes()).hexdigest()].append(str(path))
    assert len(by_hash) >= 5  # the bundled datasets were found
    assert [v for v in by_hash.values() if len(v) > 1] == []
    assert (ROOT / "data").resolve() == ROOT / PACKAGE_DATA  # the repository's data/ is a link


def test_one_csv_reader() -> None:
    readers = {
        str(p.relative_to(ROOT))
        for p in _sources("packages", "experiments", "benchmarks")
        if _PARSES_CSV.search(p.read_text())
    }
    assert CSV_READER in readers  # the pattern finds the reader itself
    assert readers - OTHER_CSV_READERS - {CSV_READER} == set()  # everything else calls io.read_csv


def _package(module: str) -> str:
    return module.split(".")[1]


def test_no_private_import_across_subpackages() -> None:
    bad = []
    for path in _sources("packages", "experiments"):
        rel = path.relative_to(ROOT)
        parts = rel.with_suffix("").parts
        mine = parts[parts.index("amorgp") + 1] if "amorgp" in parts else "experiments"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                mods, names = [a.name for a in node.names], []
            else:
                continue
            for mod in mods:
                if not mod.startswith("amorgp.") or _package(mod) == mine:
                    continue
                private_module = any(
                    p.startswith("_") and not p.startswith("__") for p in mod.split(".")
                )
                private_names = [n for n in names if n.startswith("_") and n != "__version__"]
                if private_module or private_names:
                    bad.append(f"{rel}: {mod} {private_names}")
    assert bad == []
