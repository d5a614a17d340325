"""``amorgp infer`` says how each result got there: the start, the refinement, whether
it is at an optimum, and which hyperparameters are a start's constant (JSON, table and
grouped output)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from amorgp.amortizer.api import Amortizer, KernelResult
from amorgp.cli import main
from amorgp.cli.infer import UNTOUCHED_NOTE


def _run(args: list[str], ckpt: Path) -> Result:
    return CliRunner().invoke(main, [*args, "--checkpoint", str(ckpt)])


@pytest.fixture(scope="module")
def smooth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CSV ``t,y``: 80 points of a sine plus small noise (the periodogram start wins
    ``SE + PER`` on the tiny network, its constants kept without refinement)."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0.0, 10.0, 80))
    y = np.sin(x) + 0.05 * rng.standard_normal(80)
    path = tmp_path_factory.mktemp("d") / "smooth.csv"
    np.savetxt(path, np.c_[x, y], delimiter=",", header="t,y", comments="")
    return path


def _api(path: Path, ckpt: Path, kernel: str, **kw: Any) -> KernelResult:
    data = np.loadtxt(path, delimiter=",", skiprows=1)
    return Amortizer.from_pretrained(ckpt).infer(data[:, :1], data[:, 1], kernel, **kw)


def test_json_carries_the_diagnostics(smooth: Path, tiny_checkpoint: Path) -> None:
    res = _run(["infer", str(smooth), "-k", "SE + PER", "--json", "--refine", "0"],
               tiny_checkpoint)  # fmt: skip
    assert res.exit_code == 0, res.output
    (got,) = json.loads(res.stdout)["results"]
    amortized = got["log_marginal_likelihood"]
    want = _api(smooth, tiny_checkpoint, "SE + PER", refine=0)
    assert got["start"] == want.start == "periodogram"
    assert got["refine_steps"] == 0
    assert got["refine_status"] == "none"
    assert got["at_optimum"] is False
    assert got["refine_gain"] == pytest.approx(want.optimality().gain, rel=1e-9)
    assert got["refine_gain"] > 0.01
    assert got["grad_norm"] == pytest.approx(want.optimality().grad_norm, rel=1e-9)
    assert got["optimality"] == "evaluated"
    # SE's lengthscale raised to half the input range, PER's set to 1.0: not fitted
    assert got["untouched"] == ["d0.0.lengthscale", "d0.1.lengthscale"]
    values = {(h["addend"], h["name"]): h["normalised"] for h in got["hyperparameters"]}
    assert values[(0, "lengthscale")] == pytest.approx(0.5, rel=1e-7)
    assert values[(1, "lengthscale")] == pytest.approx(1.0, rel=1e-7)

    res = _run(["infer", str(smooth), "-k", "SE + PER", "--json", "--refine", "auto"],
               tiny_checkpoint)  # fmt: skip
    assert res.exit_code == 0, res.output
    (got,) = json.loads(res.stdout)["results"]
    assert got["at_optimum"] is True
    assert got["refine_gain"] < 0.01
    assert got["optimality"] == "refinement"
    assert got["refine_steps"] > 0
    assert got["untouched"] == []

    # the default (80 float64 points: Fisher scoring applies) refines to the optimum too
    res = _run(["infer", str(smooth), "-k", "SE + PER", "--json"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    (got,) = json.loads(res.stdout)["results"]
    assert got["refine_status"] == "converged"
    assert got["refine_steps"] > 0
    assert got["at_optimum"] is True
    assert got["refine_gain"] < 0.01
    assert got["optimality"] == "refinement"
    assert got["untouched"] == []
    assert got["log_marginal_likelihood"] >= amortized


def _block(text: str, kernel: str) -> list[str]:
    """The lines of one kernel's block in the table."""
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"kernel {kernel}   "))
    out = [lines[i]]
    for ln in lines[i + 1 :]:
        if not ln.startswith("  "):
            break
        out.append(ln)
    return out


def test_table_marks_untouched_constants_and_says_whether_at_an_optimum(
    smooth: Path, tiny_checkpoint: Path
) -> None:
    two = ["infer", str(smooth), "-k", "SE + PER", "-k", "SE"]
    res = _run([*two, "--refine", "0"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    block = _block(res.stdout, "SE + PER")
    want = _api(smooth, tiny_checkpoint, "SE + PER", refine=0)
    gain = want.optimality().gain
    assert block[1].split() == [
        "start", "periodogram", "refinement", "none", "(0", "steps)", "optimum:", "no",
        "(gain", f"{gain:.3g}", "nats)",
    ]  # fmt: skip
    rows = {tuple(ln.split()[1:3]): ln.split() for ln in block[3:]}
    assert rows[("SE", "lengthscale")][-1] == "*"
    assert rows[("PER", "lengthscale")][-1] == "*"
    for key in [("SE", "variance"), ("PER", "variance"), ("PER", "period")]:
        assert rows[key][-1] != "*"
    assert UNTOUCHED_NOTE in res.stdout.splitlines()
    se = _block(res.stdout, "SE")
    # its winner is the network's lengthscales stretched (or the median heuristic's):
    # no constant of a start, nothing marked
    want_se = _api(smooth, tiny_checkpoint, "SE", refine=0)
    assert want_se.start != "prior-mean"
    assert f"start {want_se.start}   " in se[1]
    assert not any(ln.endswith("*") for ln in se)

    res = _run(["infer", str(smooth), "-k", "SE + PER", "--refine", "auto"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    block = _block(res.stdout, "SE + PER")
    assert "refinement converged" in block[1]
    assert "optimum: yes (gain" in block[1]
    assert not any(ln.endswith("*") for ln in block)
    assert UNTOUCHED_NOTE not in res.stdout

    # the default refines both kernels here (80 float64 points): no start's constant left
    res = _run(two, tiny_checkpoint)
    assert res.exit_code == 0, res.output
    for kernel in ("SE + PER", "SE"):
        block = _block(res.stdout, kernel)
        assert "refinement converged" in block[1]
        assert "optimum: yes (gain" in block[1]
        assert not any(ln.endswith("*") for ln in block)
    assert UNTOUCHED_NOTE not in res.stdout


def test_group_by_output_has_the_diagnostic_columns(smooth: Path, tiny_checkpoint: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.read_csv(smooth)
    long = pd.concat([frame.assign(series="s1"), frame.iloc[:40].assign(series="s2")])
    path = smooth.parent / "long.csv"
    long.to_csv(path, index=False)
    grouped = ["infer", str(path), "--group-by", "series", "-k", "SE + PER"]
    res = _run([*grouped, "--refine", "0"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    out = pd.read_csv(io.StringIO(res.stdout), keep_default_na=False)
    cols = list(out.columns)
    i = cols.index("error")
    assert cols[i + 1 : i + 6] == [
        "refine_steps",
        "refine_status",
        "at_optimum",
        "refine_gain",
        "untouched",
    ]
    s1 = out[out["series"] == "s1"].iloc[0]
    assert s1["start"] == "periodogram"
    assert str(s1["at_optimum"]) == "False"
    assert s1["untouched"] == "SE@0[0].lengthscale;PER@0[1].lengthscale"
    res = _run([*grouped, "--json", "--refine", "0"], tiny_checkpoint)
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert lines[0]["at_optimum"] is False
    assert lines[0]["refine_steps"] == 0
    assert lines[0]["untouched"] == "SE@0[0].lengthscale;PER@0[1].lengthscale"
    amortized = [line["log_marginal_likelihood"] for line in lines]
    # the default refines every group (80 and 40 float64 points) to its optimum
    res = _run([*grouped, "--json"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [line["series"] for line in lines] == ["s1", "s2"]
    for line, before in zip(lines, amortized, strict=True):
        assert line["refine_status"] == "converged"
        assert line["refine_steps"] > 0
        assert line["at_optimum"] is True
        assert line["untouched"] == ""
        assert line["log_marginal_likelihood"] >= before
