"""End to end: the kernel-grammar demo command in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

from amorgp.kernel_grammar import DimWiseStructure


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amorgp.kernel_grammar", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_command_prints_structure_parameters_and_encoding() -> None:
    proc = _run("SE + PER", "--dims", "3")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    s = DimWiseStructure.parse("SE + PER", 3)
    assert f"canonical form   : {s}" in out
    assert "(SE + PER)@0 * (SE + PER)@1 * (SE + PER)@2" in out
    table = [
        line.split()
        for line in out.splitlines()
        if line.startswith("  ") and len(line.split()) >= 7
    ]
    names = [(r[0], r[1], r[2], r[3]) for r in table if r[0].isdigit()]
    assert names == [(str(n.dim), str(n.addend), n.symbol, n.param) for n in s.param_names()]
    assert any(r[3] == "noise" for r in table)
    assert "symbols[0] =" in out
    assert "[[1 3]" in out  # SE = id 1, PER = id 3 in the paper vocabulary


def test_per_dimension_expression() -> None:
    proc = _run("(SE x LIN + SE)@0 * (SE + PER)@1", "--vocabulary", "extended")
    assert proc.returncode == 0, proc.stderr
    assert "canonical form   : (SE + SE*LIN)@0 * (SE + PER)@1" in proc.stdout
    assert "lin_offset" in proc.stdout


def test_error_exit_code_and_caret_message() -> None:
    proc = _run("SE + PRE", "--dims", "2")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "error: unknown kernel 'PRE' at position 5"
    assert lines[1:3] == ["  SE + PRE", "       ^^^"]
    assert "did you mean 'PER'?" in lines[3]


def test_console_script_help() -> None:
    proc = _run("--help")
    assert proc.returncode == 0
    assert "--vocabulary" in proc.stdout
    assert "--dims" in proc.stdout
