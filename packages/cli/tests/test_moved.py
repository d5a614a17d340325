"""The command line's old import paths (``amorgp.amortizer.cli``, ``.plotting``) are this
package's modules, with a DeprecationWarning naming the new path; the commands that need
an absent extra fail with one line naming what to install."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import amorgp.cli
import amorgp.cli.infer
import amorgp.cli.plotting
from amorgp.amortizer.testing import python_without as _python


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("amorgp.amortizer.cli", amorgp.cli),
        ("amorgp.amortizer.cli.infer", amorgp.cli.infer),
        ("amorgp.amortizer.plotting", amorgp.cli.plotting),
    ],
)
def test_old_module_paths_are_the_moved_modules_with_a_warning(old: str, new: object) -> None:
    import amorgp.amortizer  # noqa: F401  (installs the finder of moved modules)

    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        sys.modules.pop(name)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new.__name__}"):  # type: ignore[attr-defined]
        module = importlib.import_module(old)
    assert module is new


def test_old_names_are_the_new_objects() -> None:
    sys.modules.pop("amorgp.amortizer.cli", None)
    with pytest.warns(DeprecationWarning, match="amorgp.cli"):
        from amorgp.amortizer.cli import AmorgpCommand, main
    assert main is amorgp.cli.main
    assert AmorgpCommand is amorgp.cli.AmorgpCommand
    import amorgp.amortizer as amortizer

    sys.modules.pop("amorgp.amortizer.cli", None)
    with pytest.warns(DeprecationWarning, match="amorgp.cli"):
        assert amortizer.cli is amorgp.cli  # type: ignore[attr-defined]


def test_python_dash_m_on_the_old_path_runs_the_group() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amorgp.amortizer.cli", "model-info", "--preset", "tiny"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "always::DeprecationWarning"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("tiny (structured): 20,377 parameters")
    assert "amorgp.amortizer.cli moved to amorgp.cli" in out.stderr


@pytest.mark.parametrize(
    ("args", "blocked", "names"),
    [
        (["train", "--preset", "tiny", "--out", "{tmp}/run"], ("amorgp.simulator",), "[train]"),
        (["campaign", "--export", "{tmp}/x"], ("amorgp.simulator",), "[train]"),
        (["benchmark", "paper", "--quick"], ("amorgp_experiments",), "pip install -e experiments"),
    ],
)
def test_commands_needing_an_absent_extra_fail_in_one_line(
    args: list[str], blocked: tuple[str, ...], names: str, tmp_path: object
) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    code = f"""
from amorgp.cli import main
main({argv!r}, prog_name="amorgp")
"""
    out = _python(code, blocked=blocked)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("Error: ")
    assert names in lines[0]
