"""The noxfile's package graph (``.ci/package_graph.py``), read from the pyproject files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def graph(script: Callable[[str, str], ModuleType]) -> ModuleType:
    return script(".ci/package_graph.py", "package_graph")


def _write(root: Path, name: str, deps: list[str], dist: str | None = None) -> None:
    (root / name).mkdir(parents=True)
    listed = ", ".join(f'"{d}"' for d in deps)
    (root / name / "pyproject.toml").write_text(
        f'[project]\nname = "{dist or "amorgp-" + name}"\ndependencies = [{listed}]\n'
    )


def test_repository_graph_is_the_documented_one(graph: ModuleType) -> None:
    packages = graph.read_packages(ROOT / "packages")
    order = graph.topological_order(packages)
    assert sorted(order) == sorted(
        p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml")
    )
    for name, pkg in packages.items():
        assert all(order.index(s) < order.index(name) for s in pkg.siblings), name
    assert packages["core"].siblings == ()  # the bottom: errors, warnings, data contract
    assert packages["kernel-grammar"].siblings == ("core",)
    # every package but diff-linalg (numerics that raise no amorgp error) builds on core
    assert {n for n in packages if "core" not in graph.closure(packages, [n])} == {"diff-linalg"}
    # torch is core's extra (its data contract): core's tests install it, the grammar,
    # which never imports torch, does not
    assert not packages["core"].requires_torch
    assert graph.needs_torch(packages, "core")
    assert not graph.needs_torch(packages, "kernel-grammar")
    assert graph.needs_torch(packages, "diff-linalg")
    assert {"simulator", "baselines"} <= graph.closure(packages, ["amortizer"])
    # amortizer[gpytorch] pulls amorgp-gpytorch, which requires the amortizer: not a sibling
    assert "gpytorch" not in packages["amortizer"].siblings
    # likewise amortizer[train] and amorgp-training
    assert "training" not in packages["amortizer"].siblings
    assert "amortizer" in packages["training"].siblings
    assert "amortizer" in packages["gpytorch"].siblings
    assert "amortizer" in packages["cli"].siblings


def test_order_torch_and_closure_from_pyproject(graph: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "top", ["amorgp-mid>=0.1", "numpy"])
    _write(tmp_path, "mid", ["amorgp_Low >= 0.1 ; python_version >= '3.11'"])
    _write(tmp_path, "low", ["torch>=2.2"])
    _write(tmp_path, "alone", ["numpy"])
    packages = graph.read_packages(tmp_path)
    assert packages["mid"].siblings == ("low",)
    order = graph.topological_order(packages)
    assert order.index("low") < order.index("mid") < order.index("top")
    assert graph.closure(packages, ["top"]) == {"top", "mid", "low"}
    assert graph.needs_torch(packages, "top")
    assert not graph.needs_torch(packages, "alone")


def test_torch_in_an_extra_is_for_the_package_own_tests(graph: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "pyproject.toml").write_text(
        '[project]\nname = "amorgp-base"\ndependencies = ["numpy"]\n'
        '[project.optional-dependencies]\ndata = ["torch>=2.2"]\n'
    )
    _write(tmp_path, "user", ["amorgp-base"])
    packages = graph.read_packages(tmp_path)
    assert graph.needs_torch(packages, "base")
    assert not graph.needs_torch(packages, "user")


def test_an_extra_naming_a_dependent_package_is_not_a_sibling(
    graph: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "pyproject.toml").write_text(
        '[project]\nname = "amorgp-core"\ndependencies = ["amorgp-low"]\n'
        '[project.optional-dependencies]\nplug = ["amorgp-plug>=0.1"]\n'
        'train = ["amorgp-tool"]\n'
    )
    _write(tmp_path, "plug", ["amorgp-core>=0.1"])
    _write(tmp_path, "tool", ["amorgp-low"])
    _write(tmp_path, "low", [])
    packages = graph.read_packages(tmp_path)
    assert packages["core"].siblings == ("low", "tool")  # plug requires core: left out
    assert graph.topological_order(packages) == ["low", "tool", "core", "plug"]
    assert graph.closure(packages, ["plug"]) == {"plug", "core", "low", "tool"}


def test_cycle_is_named(graph: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "a", ["amorgp-b"])
    _write(tmp_path, "b", ["amorgp-c"])
    _write(tmp_path, "c", ["amorgp-a"])
    with pytest.raises(ValueError, match=r"dependency cycle between packages: a -> b -> c -> a"):
        graph.topological_order(graph.read_packages(tmp_path))


def test_unknown_sibling_and_wrong_name_are_errors(graph: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "a", ["amorgp-missing>=0.1"])
    with pytest.raises(ValueError, match="declares amorgp-missing, which is not a package"):
        graph.topological_order(graph.read_packages(tmp_path))
    _write(tmp_path / "other", "b", [], dist="amorgp-c")
    with pytest.raises(ValueError, match="project name 'amorgp-c' should be 'amorgp-b'"):
        graph.read_packages(tmp_path / "other")


def test_has_marker(graph: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("import pytest\n\npytestmark = pytest.mark.slow\n")
    assert graph.has_marker(tmp_path, "slow")
    assert not graph.has_marker(tmp_path, "cuda")
    assert not graph.has_marker(tmp_path, "slo")
