"""``amorgp benchmark paper --quick`` end to end: files, JSON structure, figures, resume.

Narrowed to airline and two kernels (``--datasets``, ``--kernels``) to stay short on a
busy CPU; the full ``--quick`` run is what ``docs/benchmarks/paper/`` holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from amorgp.cli import main
from amorgp.diff_linalg.testing import torch_settings


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with torch_settings(num_threads=1):
        yield


def _run(out: Path, *extra: str) -> dict:
    args = ["benchmark", "paper", "--quick", "--datasets", "airline", "--kernels", "3,10"]
    res = CliRunner().invoke(main, [*args, "--out", str(out), "--no-progress", *extra])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.stdout
    return json.loads((out / "results.json").read_text())


def test_quick_paper_run_writes_the_report_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "paper"
    first = _run(out)
    assert first["config"]["quick"] is True
    assert first["cells_computed"] > 0
    env = first["environment"]
    assert {"torch", "scipy", "scikit-learn"} <= set(env["versions"])
    assert env["hardware"]["torch_threads"] == 1
    exps = first["experiments"]
    assert set(exps) == set(first["config"]["experiments"])
    fig3 = exps["fig3"]["summary"]["airline"]
    assert {"amortized", "gp-ml-lbfgs", "sklearn", "svgp"} <= set(fig3)
    assert fig3["amortized"]["time_ratio"] == pytest.approx(1.0)
    for r in fig3.values():
        assert 0 < r["rmse"]["median"] < 2
    readme = (out / "README.md").read_text()
    assert "QUICK" in readme
    for name in exps:
        if f"![{name}]({name}.png)" in readme:
            assert (out / f"{name}.png").stat().st_size > 1000
    for name in ("fig2b", "fig3", "fig4", "fig9", "fig11"):
        assert (out / f"{name}.png").exists(), name
    assert set(exps) == {"fig2b", "fig3", "table1", "fig4", "fig9", "fig10", "fig11"}
    assert exps["table1"]["datasets"]["airline"]["paper_amortized_se_ard"] == 0.2866
    assert {r["method"] for r in exps["fig4"]["bma"]} == {
        "amortized BMA",
        "amortized+calibrate BMA",
        "Type-2 ML BMA",
    }
    assert set(exps["fig2b"]["summary"]) == {
        "amortized",
        "amortized+calibrate",
        "type2ml",
        "ground truth",
    }
    assert (out / "cells" / "real.jsonl").exists()

    second = _run(out)  # resume: everything read back from cells/
    assert second["cells_computed"] == 0
    assert second["experiments"]["fig3"]["cells"] == exps["fig3"]["cells"]


def test_bad_user_csv_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,x\n")
    res = CliRunner().invoke(
        main, ["benchmark", "paper", "--quick", "--data", str(bad), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 1
    assert "bad.csv" in res.output
    assert "Traceback" not in res.output


def test_parallel_real_cells_equal_the_sequential_run(tmp_path: Path) -> None:
    """``--jobs 2`` computes the Fig. 3 cells in worker processes: the same cells as a
    sequential run, and a rerun computes nothing."""
    common = ["--experiments", "fig3", "--methods", "amortized,gp-ml-lbfgs"]
    seq = _run(tmp_path / "seq", *common)
    par = _run(tmp_path / "par", *common, "--jobs", "2")
    assert par["cells_computed"] == seq["cells_computed"] > 0

    def cells(folder: Path) -> dict:
        lines = (folder / "cells" / "real.jsonl").read_text().splitlines()
        out = {}
        for line in lines:
            rec = json.loads(line)
            out[json.dumps(rec["key"])] = {k: v for k, v in rec["value"].items() if k != "time_s"}
        return out

    a, b = cells(tmp_path / "seq"), cells(tmp_path / "par")
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert b[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    again = _run(tmp_path / "par", *common, "--jobs", "2")
    assert again["cells_computed"] == 0
