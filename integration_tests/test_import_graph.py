"""``tools/import_graph.py``: the repository's import graph has no cycles, every package
declares the amorgp packages it imports (``--deps``), and the tool finds the cycles and
the undeclared imports of a tree built with known ones."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool(script: Callable[[str, str], ModuleType]) -> ModuleType:
    return script("tools/import_graph.py", "import_graph")


def test_the_repository_has_no_import_cycles(tool: ModuleType) -> None:
    graph = tool.module_graph(ROOT)
    assert "amorgp.amortizer.frontends.inference" in graph  # the sources were found
    assert tool.cycles(graph) == []
    assert tool.cycles(tool.package_graph(graph)) == []
    deferred = tool.module_graph(ROOT, deferred=True)
    assert tool.cycles(tool.package_graph(deferred)) == []
    assert tool.cycles(deferred) == []  # not even circles closed by deferred imports


def test_the_runtime_imports_neither_training_nor_the_simulator(tool: ModuleType) -> None:
    """Not even on first use: training is a package that depends on the amortizer."""
    graph = tool.module_graph(ROOT, deferred=True)
    runtime = [m for m in graph if m.startswith("amorgp.amortizer")]
    assert "amorgp.training.train" in graph  # the training package was found
    assert not [m for m in graph if m.startswith("amorgp.amortizer.training")]
    for module in runtime:
        assert not [t for t in graph[module] if "training" in t or "simulator" in t], module
    assert "amortizer" in tool.package_graph(graph)["training"]


def test_no_module_imports_a_private_module_of_another_package(tool: ModuleType) -> None:
    graph = tool.module_graph(ROOT, deferred=True)
    assert "amorgp.cli._output" in graph  # the private modules were found
    assert "amorgp.cli._output" in graph["amorgp.cli.infer"]  # inside its package: fine
    assert tool.private_imports(graph) == []
    external = tool.external_graph(ROOT)
    assert any(p.startswith("experiments/") for p in external)
    assert any(p.startswith("benchmarks/") for p in external)
    assert tool.private_imports(external) == []


def test_the_split_packages_are_apart_from_the_amortizer(tool: ModuleType) -> None:
    """The amortizer imports neither the command line nor the GPyTorch bridge (they
    depend on it); the bridge does not import the command line."""
    packages = tool.package_graph(tool.module_graph(ROOT, deferred=True))
    assert "amortizer" in packages["cli"]
    assert "amortizer" in packages["gpytorch"]
    assert not {"cli", "gpytorch"} & packages["amortizer"]
    assert "cli" not in packages["gpytorch"]


def test_private_imports_found_in_a_tree_with_known_ones(tool: ModuleType, tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "a/src/amorgp/a/__init__.py": "",
            "a/src/amorgp/a/_helpers.py": "",
            "a/src/amorgp/a/x.py": "from amorgp.a import _helpers\nimport amorgp.a.__main__\n",
            "a/src/amorgp/a/__main__.py": "",
            "b/src/amorgp/b/__init__.py": "",
            "b/src/amorgp/b/c.py": "def f():\n    from amorgp.a._helpers import g\n",
        },
    )
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "run.py").write_text("import amorgp.a._helpers\n")
    graph = tool.module_graph(tmp_path, deferred=True)
    assert tool.private_imports(graph) == [("amorgp.b.c", "amorgp.a._helpers")]
    assert tool.private_imports(tool.module_graph(tmp_path)) == []  # deferred only
    external = tool.external_graph(tmp_path, folders=("experiments",))
    assert tool.private_imports(external) == [("experiments/run.py", "amorgp.a._helpers")]
    assert tool.main(["--cycles", "--root", str(tmp_path)]) == 1


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / "packages" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_cycles_found_in_a_tree_with_known_ones(tool: ModuleType, tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "a/src/amorgp/a/__init__.py": "",
            "a/src/amorgp/a/x.py": "from amorgp.a import y\n",
            "a/src/amorgp/a/y.py": "from .z import f\n",
            "a/src/amorgp/a/z.py": "import amorgp.a.x\ndef f():\n    pass\n",
            "a/src/amorgp/a/w.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import amorgp.a.v\n"
                "def g():\n    from amorgp.b import c\n"
            ),
            "a/src/amorgp/a/v.py": "import amorgp.a.w\n",
            "b/src/amorgp/b/__init__.py": "",
            "b/src/amorgp/b/c.py": (
                "def __getattr__(name):\n    from amorgp.a import w\n"
                "def h():\n    import amorgp.a.w\n"
            ),
        },
    )
    graph = tool.module_graph(tmp_path)
    assert graph["amorgp.a.y"] == {"amorgp.a.z"}  # relative import, name in a module
    assert tool.cycles(graph) == [["amorgp.a.x", "amorgp.a.y", "amorgp.a.z"]]
    assert tool.cycles(tool.package_graph(graph)) == []
    deferred = tool.module_graph(tmp_path, deferred=True)
    assert "amorgp.a.v" not in deferred["amorgp.a.w"]  # TYPE_CHECKING never counts
    assert deferred["amorgp.b.c"] == {"amorgp.a.w"}  # __getattr__ aliases do not count
    assert tool.cycles(deferred) == [
        ["amorgp.a.w", "amorgp.b.c"],
        ["amorgp.a.x", "amorgp.a.y", "amorgp.a.z"],
    ]
    assert tool.cycles(tool.package_graph(deferred)) == [["a", "b"]]
    assert tool.main(["--cycles", "--root", str(tmp_path)]) == 1


def test_only_the_experiment_commands_import_the_experiments() -> None:
    allowed = {"extras.py", "benchmark.py", "campaign.py"}  # require_experiments
    for path in (ROOT / "packages").glob("*/src/**/*.py"):
        text = path.read_text(encoding="utf-8")
        if "import amorgp_experiments" in text or "from amorgp_experiments" in text:
            assert path.name in allowed, path
            assert path.parent.name in ("amortizer", "cli"), path


def test_declared_dependencies_equal_the_imports(tool: ModuleType) -> None:
    assert tool.dependency_mismatches(ROOT) == []
    assert tool.main(["--deps"]) == 0


def _pyproject(root: Path, folder: str, deps: list[str], extras: dict[str, list[str]]) -> None:
    lines = [
        "[project]",
        f'name = "amorgp-{folder}"',
        f"dependencies = {deps!r}".replace("'", '"'),
        "[project.optional-dependencies]",
        *(f"{k} = {v!r}".replace("'", '"') for k, v in extras.items()),
    ]
    (root / "packages" / folder / "pyproject.toml").write_text("\n".join(lines) + "\n")


def test_dependency_mismatches_found_in_a_tree_with_known_ones(
    tool: ModuleType, tmp_path: Path
) -> None:
    _tree(
        tmp_path,
        {
            "a/src/amorgp/a/__init__.py": "",
            "b/src/amorgp/b/__init__.py": "from amorgp.a import x\n",  # declared: fine
            "b/src/amorgp/b/opt.py": (
                "try:\n    import amorgp.c\nexcept ImportError:\n    pass\n"  # extra: fine
                "def f():\n    from amorgp.d import y\n"  # declared nowhere
            ),
            "b/src/amorgp/b/hard.py": "import amorgp.c\n",  # only in an extra
            "b/src/amorgp/b/typed.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import amorgp.e\n"
            ),
            "b/tests/test_b.py": "import amorgp.e\nimport amorgp.c\n",
            "c/src/amorgp/c/__init__.py": "",
            "d/src/amorgp/d/__init__.py": "",
            "e/src/amorgp/e/__init__.py": "",
        },
    )
    _pyproject(tmp_path, "a", [], {})
    _pyproject(tmp_path, "b", ["amorgp-a>=0.1", "amorgp-e"], {"opt": ["amorgp-c"], "test": []})
    for folder in "cde":
        _pyproject(tmp_path, folder, [], {})
    assert tool.dependency_mismatches(tmp_path) == [
        "packages/b: src/amorgp/b/hard.py imports amorgp.c at module level, but amorgp-c "
        "is not in its dependencies (only in extras: opt)",
        "packages/b: src/amorgp/b/opt.py imports amorgp.d on first use, but amorgp-d is "
        "neither in its dependencies nor in an extra",
        "packages/b: declares amorgp-e in its dependencies but never imports it",
    ]
    (tmp_path / "packages/b/tests/test_b.py").write_text("import amorgp.d\n")
    assert tool.dependency_mismatches(tmp_path)[-1] == (
        "packages/b: tests/test_b.py imports amorgp.d, but amorgp-d is neither in its "
        "dependencies nor in an extra"
    )
    assert tool.main(["--deps", "--root", str(tmp_path)]) == 1
