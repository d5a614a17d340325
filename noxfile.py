"""Developer sessions for the amorgp monorepo.

Every package is tested in its own virtual environment that holds only the
package, its declared ``amorgp-*`` siblings (installed editable from this
repository, in dependency order) and its test extra.  A guard fails the session
if any ``amorgp-*`` distribution was installed from an index instead of the
repository.

Environment variables:
    AMORGP_TORCH_SPEC: pip requirement(s) used to install PyTorch
        (default ``torch==2.13.0``; e.g. add ``--index-url`` for CUDA wheels).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests", "integration"]

ROOT = Path(__file__).parent
PYTHON = "3.11"
TORCH_SPEC = os.environ.get("AMORGP_TORCH_SPEC", "torch==2.13.0")

# Package directory -> (declared amorgp siblings in dependency order, needs torch).
# The dict itself is in topological order (ARCHITECTURE §2).
PACKAGES: dict[str, tuple[list[str], bool]] = {
    "kernel-grammar": ([], False),
    "diff-linalg": ([], True),
    "lazy-kernels": (["kernel-grammar", "diff-linalg"], True),
    "simulator": (["kernel-grammar", "diff-linalg", "lazy-kernels"], True),
    "baselines": (["kernel-grammar", "diff-linalg", "lazy-kernels"], True),
    "ensembles": (["kernel-grammar", "diff-linalg", "lazy-kernels"], True),
    "amortizer": (
        ["kernel-grammar", "diff-linalg", "lazy-kernels", "simulator", "baselines"],
        True,
    ),
}
EXISTING = [name for name in PACKAGES if (ROOT / "packages" / name / "pyproject.toml").exists()]


def _install_torch(session: nox.Session) -> None:
    session.install(*shlex.split(TORCH_SPEC))


def _install_packages(session: nox.Session, names: list[str], extra: str | None = None) -> None:
    """Install ``names`` (and their siblings) editable, in dependency order."""
    order = [n for n in EXISTING if n in names or any(n in PACKAGES[m][0] for m in names)]
    if any(PACKAGES[n][1] for n in order):
        _install_torch(session)
    for name in order:
        target = f"packages/{name}"
        if extra and name in names:
            target += f"[{extra}]"
        session.install("-e", target)
    session.run("python", str(ROOT / ".ci" / "check_sources.py"), *order)


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "pytest", *args, *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("package", EXISTING)
def tests(session: nox.Session, package: str) -> None:
    """Unit tests of one package on CPU (slow and cuda tests deselected)."""
    _install_packages(session, [package], extra="test")
    session.chdir(ROOT / "packages" / package)
    _pytest(session, "tests", "-m", "not cuda and not slow")


@nox.session(python=PYTHON)
@nox.parametrize("package", EXISTING)
def tests_slow(session: nox.Session, package: str) -> None:
    """Tests marked ``slow`` of one package."""
    _install_packages(session, [package], extra="test")
    session.chdir(ROOT / "packages" / package)
    session.run(
        "python",
        "-m",
        "pytest",
        "tests",
        "-m",
        "slow and not cuda",
        *session.posargs,
        success_codes=[0, 5],
    )


@nox.session(python=PYTHON)
@nox.parametrize("package", [n for n in EXISTING if PACKAGES[n][1]])
def tests_cuda(session: nox.Session, package: str) -> None:
    """Tests marked ``cuda``; skipped where no CUDA device is visible."""
    _install_packages(session, [package], extra="test")
    has_cuda = session.run(
        "python",
        "-c",
        "import torch, sys; sys.stdout.write(str(int(torch.cuda.is_available())))",
        silent=True,
    )
    if not has_cuda or has_cuda.strip() != "1":
        session.skip("torch.cuda.is_available() is False")
    session.chdir(ROOT / "packages" / package)
    session.run(
        "python", "-m", "pytest", "tests", "-m", "cuda", *session.posargs, success_codes=[0, 5]
    )


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """End-to-end scenarios across all packages."""
    _install_packages(session, EXISTING, extra="test")
    _pytest(session, "integration_tests", "-m", "not cuda and not slow")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over every package's sources."""
    _install_packages(session, EXISTING, extra="test")
    session.install("mypy>=1.10")
    session.run("mypy", *[f"packages/{n}/src" for n in EXISTING])


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The main job on a bundled default: amortized inference on the airline data."""
    _install_packages(session, ["amortizer"])
    out = ROOT / "runs" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    session.run("amorgp", "demo", "--plot", str(out / "amorgp-demo.png"), *session.posargs)


BENCHMARKS = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py"))


@nox.session(python=PYTHON)
@nox.parametrize("name", BENCHMARKS)
def benchmark(session: nox.Session, name: str) -> None:
    """One benchmark script; writes a Markdown table (and figure) under docs/benchmarks/.

    ``nox -s benchmark`` runs them all; ``nox -s "benchmark(name='simulator')" -- --quick``
    runs one as a smoke test (every script accepts ``--quick``).
    """
    _install_packages(session, EXISTING, extra="bench")
    session.run("python", str(ROOT / "benchmarks" / f"bench_{name}.py"), *session.posargs)
