"""``amorgp benchmark paper``: option errors before any work (exit codes 2 and 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from amorgp.cli import main


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--experiments", "fig99"], 2, "unknown experiment(s) fig99"),
        (["--kernels", "a,b"], 2, "give comma-separated integers"),
        (["--kernels", "30"], 2, "kernel ids must be in 0..23"),
        (["--methods", "magic"], 2, "unknown method(s) magic"),
        (["--splits", "0"], 2, "--splits"),
        (["--model", "no-such-model"], 1, "no checkpoint at no-such-model"),
        (["--datasets", "mars"], 1, "neither a bundled dataset"),
        (["--merge", "."], 2, "no cells/ folder under ."),
        (["--merge", "no-such-folder"], 2, "does not exist"),
    ],
)
def test_bad_options_fail_before_any_work(
    args: list[str], code: int, message: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["benchmark", "paper", *args, "--out", str(out)])
    assert res.exit_code == code, res.output
    assert message in res.output
    assert "Traceback" not in res.output
    assert not (out / "cells").exists()


def test_merge_adds_another_runs_cells_before_the_report(tmp_path: Path) -> None:
    from amorgp_experiments.paper.cache import CellCache, CellKey

    other = tmp_path / "other"
    key = CellKey("fig4", "toy", 0, "-", "bma", "x")
    CellCache(other).put(key, {"v": 1.5})
    out = tmp_path / "out"
    args = ["benchmark", "paper", "--quick", "--report-only", "--no-progress", "--out", str(out)]
    res = CliRunner().invoke(main, [*args, "--merge", str(other)])
    assert res.exit_code == 0, res.output
    assert "merged 1 cells from" in res.output
    assert CellCache(out).get(key) == {"v": 1.5}
    assert (out / "README.md").exists()
    again = CliRunner().invoke(main, [*args, "--merge", str(other)])
    assert "merged 0 cells from" in again.output
