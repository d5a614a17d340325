"""Distribution metadata: every package and the umbrella ``amorgp`` distribution.

Checks each ``packages/*/pyproject.toml`` and ``distribution/amorgp/pyproject.toml`` for the
MIT license and its file, the classifiers and one torch requirement; that the umbrella
installs exactly the packages of ``packages/`` and that the noxfile's package graph does
not read it.  Where hatchling is installed, the wheels are built and their contents read.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
UMBRELLA = ROOT / "distribution" / "amorgp"
PACKAGE_DIRS = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
ALL_DIRS = [*PACKAGE_DIRS, UMBRELLA]
TORCH = "torch>=2.2"
CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Intended Audience :: Science/Research",
    "Operating System :: OS Independent",
    "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Python :: 3.11",
    "Topic :: Scientific/Engineering :: Artificial Intelligence",
}
NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?")


def _project(folder: Path) -> dict[str, Any]:
    with (folder / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _requirements(project: dict[str, Any]) -> list[str]:
    deps = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        deps.extend(extra)
    return deps


def _name(requirement: str) -> tuple[str, str]:
    m = NAME.match(requirement)
    assert m is not None, requirement
    return re.sub(r"[-_.]+", "-", m.group(1)).lower(), (m.group(2) or "")


def test_eleven_packages_and_the_umbrella() -> None:
    assert [p.name for p in PACKAGE_DIRS] == [
        "amortizer",
        "baselines",
        "cli",
        "core",
        "diff-linalg",
        "ensembles",
        "gpytorch",
        "kernel-grammar",
        "lazy-kernels",
        "simulator",
        "training",
    ]
    assert (UMBRELLA / "pyproject.toml").is_file()


def test_root_license_is_mit() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 the amorgp authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


@pytest.mark.parametrize("folder", ALL_DIRS, ids=lambda p: p.name)
def test_license_classifiers_and_torch_pin(folder: Path) -> None:
    data = _project(folder)
    project = data["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    assert project["requires-python"] == ">=3.11"
    assert set(project["classifiers"]) >= CLASSIFIERS
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]  # PEP 639
    torch = [r for r in _requirements(project) if _name(r)[0] == "torch"]
    assert all(r.replace(" ", "") == TORCH for r in torch), torch
    # PEP 639 license metadata needs hatchling 1.27
    assert data["build-system"]["requires"] == ["hatchling>=1.27"]
    assert "urls" not in project  # no repository URL is named anywhere in the repository


@pytest.mark.parametrize("folder", PACKAGE_DIRS, ids=lambda p: p.name)
def test_every_package_that_needs_torch_pins_it(folder: Path) -> None:
    project = _project(folder)["project"]
    deps = [_name(r)[0] for r in project["dependencies"]]
    if folder.name == "core":  # torch only for the data contract: its "data" extra
        assert project["optional-dependencies"]["data"] == [TORCH]
    elif folder.name != "kernel-grammar":  # numpy and amorgp-core only: it never imports torch
        assert TORCH in project["dependencies"]
    assert len(deps) == len(set(deps))


def test_umbrella_installs_every_package_with_their_extras() -> None:
    project = _project(UMBRELLA)["project"]
    assert project["name"] == "amorgp"
    version = project["version"]
    pins = {}
    for r in project["dependencies"]:
        name, _ = _name(r)
        if name.startswith("amorgp-"):
            pins[name] = r
    packages = {f"amorgp-{p.name}": _project(p)["project"] for p in PACKAGE_DIRS}
    # the base is the runtime and the command line: every package but training and the
    # simulator it needs (the train extra adds them) and the GPyTorch bridge (the gpytorch
    # extra)
    assert set(pins) == set(packages) - {"amorgp-simulator", "amorgp-training", "amorgp-gpytorch"}
    for name, req in pins.items():
        assert packages[name]["version"] == version
        assert req == f"{name}=={version}"
    extras = project["optional-dependencies"]
    assert {"gpytorch", "keops", "train"} <= set(extras)
    for reqs in extras.values():  # every extra of a package it names exists
        for r in reqs:
            name, bracket = _name(r)
            if name in packages:
                for extra in filter(None, bracket.strip("[]").split(",")):
                    assert extra in packages[name].get("optional-dependencies", {}), r
            elif name == "amorgp":
                assert set(bracket.strip("[]").split(",")) <= set(extras)
    assert _name(extras["gpytorch"][0]) == ("amorgp-amortizer", "[gpytorch]")
    assert f"amorgp-gpytorch=={version}" in extras["gpytorch"]
    assert packages["amorgp-amortizer"]["optional-dependencies"]["gpytorch"] == [
        "amorgp-gpytorch>=0.1"
    ]
    assert packages["amorgp-cli"]["scripts"] == {"amorgp": "amorgp.cli:main"}
    assert "scripts" not in packages["amorgp-amortizer"]  # the command is the CLI's
    assert _name(extras["keops"][0]) == ("amorgp-lazy-kernels", "[keops]")
    assert _name(extras["train"][0]) == ("amorgp-training", "")
    assert "amorgp-simulator>=0.1" in packages["amorgp-training"]["dependencies"]
    # amorgp-amortizer[train] pulls the package that trains it, a convenience for users
    assert packages["amorgp-amortizer"]["optional-dependencies"]["train"] == [
        "amorgp-training>=0.1"
    ]
    # no code: the namespace package amorgp must not get an __init__.py from this wheel
    wheel = _project(UMBRELLA)["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel == {"bypass-selection": True}
    assert not list(UMBRELLA.rglob("*.py"))


def test_the_package_graph_does_not_read_the_umbrella(
    script: Callable[[str, str], ModuleType],
) -> None:
    graph = script(".ci/package_graph.py", "package_graph_packaging")
    packages = graph.read_packages(ROOT / "packages")
    assert sorted(packages) == [p.name for p in PACKAGE_DIRS]
    order = graph.topological_order(packages)
    assert order[-4:] == ["amortizer", "training", "cli", "gpytorch"]
    assert graph.closure(packages, ["amortizer"]) == set(packages) - {"cli", "gpytorch", "training"}
    assert graph.closure(packages, ["cli", "gpytorch"]) == set(packages)


@pytest.mark.parametrize(
    "folder", [ROOT / "packages" / "kernel-grammar", UMBRELLA], ids=lambda p: p.name
)
def test_built_wheels_carry_the_license(folder: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling is not installed (pip install 'hatchling>=1.27')")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(folder),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        license_name = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert z.read(license_name) == (ROOT / "LICENSE").read_bytes()
    assert "License-Expression: MIT" in meta
    assert "Classifier: Development Status :: 3 - Alpha" in meta
    assert "amorgp/__init__.py" not in names
    if folder == UMBRELLA:
        assert all(".dist-info/" in n for n in names)  # metadata only
        assert "Provides-Extra: gpytorch" in meta
