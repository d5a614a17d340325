"""``amorgp ensemble`` and ``amorgp search`` through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from amorgp.amortizer.networks.bundled import DATA_DIR
from amorgp.cli import main

AIRLINE = DATA_DIR / "airline.csv"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_ensemble_table_and_json(runner: CliRunner, tmp_path: Path) -> None:
    args = [
        "ensemble",
        str(AIRLINE),
        "-k",
        "SE",
        "-k",
        "SE + PER",
        "-k",
        "LIN + SE*PER",
        "--device",
        "cpu",
    ]
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "3 kernels, bma weights" in res.output
    assert "ensemble: test RMSE" in res.output
    res = runner.invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    weights = [m["weight"] for m in out["members"]]
    assert abs(sum(weights) - 1.0) < 1e-9
    # BMA: weights are the softmax of the members' log marginal likelihoods
    lml = np.array([m["log_marginal_likelihood"] for m in out["members"]])
    np.testing.assert_allclose(
        weights, np.exp(lml - lml.max()) / np.exp(lml - lml.max()).sum(), rtol=1e-9
    )
    assert out["n_test"] == round(0.2 * 144)
    assert np.isfinite(out["ensemble"]["test_rmse"])


def test_ensemble_plot_and_errors(runner: CliRunner, tmp_path: Path) -> None:
    plot = tmp_path / "ens.png"
    res = runner.invoke(
        main,
        ["ensemble", str(AIRLINE), "-k", "SE", "-k", "PER", "--plot", str(plot), "--device", "cpu"],
    )
    assert res.exit_code == 0, res.output
    assert plot.stat().st_size > 1000
    bad_plot = runner.invoke(
        main, ["ensemble", str(AIRLINE), "-k", "SE", "--plot", str(tmp_path / "x.txt")]
    )
    assert bad_plot.exit_code == 2
    assert "Traceback" not in bad_plot.output
    bad_kernel = runner.invoke(main, ["ensemble", str(AIRLINE), "-k", "SE +* PER"])
    assert bad_kernel.exit_code == 2
    assert "--kernel" in bad_kernel.output
    missing = runner.invoke(main, ["ensemble", str(tmp_path / "none.csv"), "-k", "SE"])
    assert missing.exit_code == 1
    bad_split = runner.invoke(main, ["ensemble", str(AIRLINE), "-k", "SE", "--split", "1.5"])
    assert bad_split.exit_code == 2


def test_search_finds_a_structure(runner: CliRunner) -> None:
    res = runner.invoke(
        main, ["search", str(AIRLINE), "--depth", "1", "--beam", "2", "--json", "--device", "cpu"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_scored"] > 6
    best = out["best"]
    # the levels score the amortized answers; the best --top are then refitted by the
    # default refinement, which starts there and never lowers the likelihood
    assert best["score"] >= max(
        c["score"] for lvl in out["levels"] for c in lvl if c["score"] is not None
    )
    assert abs(sum(t["variance_share"] for t in best["terms"]) - 1.0) < 1e-9
    text = runner.invoke(main, ["search", str(AIRLINE), "--depth", "1", "--device", "cpu"])
    assert text.exit_code == 0, text.output
    assert "best structure" in text.output
    assert "dimension 0 (year)" in text.output
    assert runner.invoke(main, ["search", str(AIRLINE), "--depth", "-1"]).exit_code == 2


def test_ensemble_members_are_calibrated_unless_told(runner: CliRunner) -> None:
    """The members are calibrated by default (their likelihoods never lower than the
    network's own), and ``--no-calibrate`` averages the network's predictions
    (``--refine 0``: the amortized members, no Type-2 ML after the calibration)."""
    args = ["ensemble", str(AIRLINE), "-k", "SE", "-k", "SE + PER", "--device", "cpu", "--json"]
    args += ["--refine", "0"]
    lml = {}
    for flag in ("--calibrate", "--no-calibrate"):
        res = runner.invoke(main, [*args, flag])
        assert res.exit_code == 0, res.output
        members = json.loads(res.stdout)["members"]
        lml[flag] = np.array([m["log_marginal_likelihood"] for m in members])
    assert (lml["--calibrate"] >= lml["--no-calibrate"] - 1e-9).all()
    assert (lml["--calibrate"] > lml["--no-calibrate"] + 1e-6).any()
    default = json.loads(runner.invoke(main, args).stdout)["members"]
    np.testing.assert_allclose(
        [m["log_marginal_likelihood"] for m in default], lml["--calibrate"], rtol=1e-12
    )
