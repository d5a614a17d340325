"""Tests of the ``amorgp`` click group: commands, help, the error-to-exit-code mapping."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from amorgp.cli import AmorgpCommand, main
from amorgp.cli._errors import as_click_exception
from amorgp.core.errors import CheckpointError, DataError, OptionError, TrainingError
from amorgp.kernel_grammar import KernelSyntaxError

COMMANDS = (
    "train",
    "campaign",
    "model-info",
    "infer",
    "predict",
    "demo",
    "ensemble",
    "search",
    "benchmark",
)
SUBCOMMANDS = (("benchmark", "paper"),)


def test_every_command_maps_errors() -> None:
    assert set(main.commands) == set(COMMANDS)
    for name, command in main.commands.items():
        if isinstance(command, click.Group):  # a group of commands: each one maps errors
            assert command.commands, name
            for sub, c in command.commands.items():
                assert isinstance(c, AmorgpCommand), f"{name} {sub}"
        else:
            assert isinstance(command, AmorgpCommand), name


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (OptionError("bad option"), 2),
        (KernelSyntaxError("bad kernel", "SE +", 4), 2),
        (DataError("bad data"), 1),
        (CheckpointError("bad checkpoint"), 1),
        (TrainingError("diverged"), 1),
        (ValueError("older code"), 1),
        (PermissionError(13, "Permission denied", "/x/y"), 1),
    ],
)
def test_typed_errors_become_exit_codes_without_traceback(error: Exception, code: int) -> None:
    @click.command("boom", cls=AmorgpCommand)
    def boom() -> None:
        raise error

    group = click.Group(commands=[boom])
    res = CliRunner().invoke(group, ["boom"])
    assert res.exit_code == code
    shown = error.strerror if isinstance(error, OSError) else str(error).splitlines()[0]
    assert shown in res.output
    assert "Traceback" not in res.output
    assert isinstance(res.exception, SystemExit)  # handled, not escaped
    if code == 2:
        assert "Usage:" in res.output


def test_a_bug_keeps_its_traceback() -> None:
    @click.command("bug", cls=AmorgpCommand)
    def bug() -> None:
        raise KeyError("a bug")

    res = CliRunner().invoke(click.Group(commands=[bug]), ["bug"])
    assert isinstance(res.exception, KeyError)
    with pytest.raises(TypeError):
        as_click_exception(KeyError("x"), None)


def test_help_on_every_command() -> None:
    for cmd in ([], *([c] for c in COMMANDS), *(list(s) for s in SUBCOMMANDS)):
        result = CliRunner().invoke(main, [*cmd, "--help"])
        assert result.exit_code == 0, cmd
        assert "Usage" in result.output


def test_python_dash_m_runs_the_group() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "amorgp.cli", "model-info", "--preset", "tiny"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "tiny (structured)" in res.stdout


def test_a_reader_that_goes_away_stops_the_command_quietly() -> None:
    """``amorgp model-info | head -0``: no traceback, no message, exit 1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "amorgp.cli", "model-info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first write
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert err.decode().strip() == ""


@pytest.mark.skipif(os.name != "posix", reason="closes descriptor 1 in the child")
def test_a_closed_stdout_is_not_an_error() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "amorgp.cli", "model-info", "--preset", "tiny"],
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


def test_the_command_tunes_the_allocator_unless_the_user_chose(monkeypatch) -> None:
    """The command line's process keeps freed memory for reuse (``amorgp.core.memory``),
    except where glibc's own variables are set."""
    import amorgp.core.memory as memory

    calls: list[int] = []
    monkeypatch.setattr(memory, "tune_malloc", lambda *a: calls.append(1) or True)
    for name in memory.MALLOC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    assert runner.invoke(main, ["model-info"]).exit_code == 0
    assert calls == [1]
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    assert runner.invoke(main, ["model-info"]).exit_code == 0
    assert calls == [1]
