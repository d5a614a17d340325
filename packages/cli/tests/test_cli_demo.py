"""Tests of ``amorgp demo`` through ``CliRunner``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import amorgp.cli.demo as demo_module
from amorgp.cli import main


def _run(args: list[str], ckpt: Path | None = None) -> Result:
    full = [*args, "--checkpoint", str(ckpt)] if ckpt is not None else args
    return CliRunner().invoke(main, full)


def test_demo_runs_with_baseline_and_plot(tmp_path: Path, tiny_checkpoint: Path) -> None:
    plot = tmp_path / "demo.png"
    res = _run(["demo", "--plot", str(plot), "-k", "SE", "-k", "SE + PER"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    assert "Type-2 ML (L-BFGS, 3 starts)" in res.output  # the peer users run, not Adam
    assert "Adam" not in res.output
    assert "--refine auto" in res.output
    assert "speed-up x" in res.output
    assert plot.stat().st_size > 1000


def test_help_of_every_command() -> None:
    for cmd in ("infer", "predict", "demo"):
        res = CliRunner().invoke(main, [cmd, "--help"])
        assert res.exit_code == 0
        assert "--seed" in res.output
        # --refine takes N, auto or default, and the default refinement is the default
        text = " ".join(res.output.split())
        assert "--refine N|AUTO|DEFAULT" in text
        assert "0: the amortized answer alone). [default: default]" in text


@pytest.mark.parametrize(
    ("name", "message"),
    [("out.txt", "format 'txt' is not supported"), ("tmp", "the file name has no extension")],
)
def test_demo_checks_the_plot_path_before_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, message: str
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("inference ran before the plot path was checked")

    monkeypatch.setattr(demo_module, "run_inference", never)
    res = CliRunner().invoke(main, ["demo", "--plot", str(tmp_path / name)])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_demo_without_plot_writes_nothing(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = _run(["demo", "--no-plot", "--no-baseline", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    assert "Type-2 ML" not in res.output
    assert list(tmp_path.iterdir()) == []


def test_demo_json_is_one_versioned_document_with_original_unit_likelihoods() -> None:
    """``demo --json``: one JSON object (schema_version, command) on stdout; each kernel's
    original-unit log marginal likelihood is its normalised one plus the normalisation's
    offset ``-n log sd(y)`` (a closed form), for the amortized and the Type-2 ML fits."""
    import json

    import numpy as np
    from click.testing import CliRunner

    from amorgp.amortizer.frontends.io import read_csv
    from amorgp.cli import main
    from amorgp.cli.demo import DEMO_DATA

    # --refine 0: the results are the amortized prediction that refine="auto" starts from
    args = ["demo", "--json", "--no-plot", "-k", "SE", "-k", "SE + PER", "--refine", "0"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["schema_version"], doc["command"]) == (1, "demo")
    assert [r["kernel"] for r in doc["results"]] == ["SE", "SE + PER"]
    assert [r["refine_status"] for r in doc["results"]] == ["none", "none"]
    y = read_csv(DEMO_DATA).y
    assert y is not None
    offset = -len(y) * np.log(np.std(y))  # the population standard deviation
    for fit in [*doc["results"], *doc["type2ml"]]:
        got = fit["log_marginal_likelihood_original"] - fit["log_marginal_likelihood"]
        assert got == pytest.approx(offset, rel=1e-6)
    assert doc["type2ml_method"] == {"method": "gp-ml-lbfgs", "restarts": 3, "space": "log"}
    # scikit-learn's 3-restart fit of the same kernels, its likelihood in the same units
    assert [s["kernel"] for s in doc["sklearn"]] == ["SE", "SE + PER"]
    for fit in doc["sklearn"]:
        got = fit["log_marginal_likelihood_original"] - fit["log_marginal_likelihood"]
        assert got == pytest.approx(offset, rel=1e-6)
    # refine="auto" starts at the amortized prediction and only accepts improvements
    for start, auto in zip(doc["results"], doc["refine_auto"], strict=True):
        assert auto["kernel"] == start["kernel"]
        assert auto["log_marginal_likelihood"] >= start["log_marginal_likelihood"] - 1e-6
    for fit in doc["refine_auto"]:
        got = fit["log_marginal_likelihood_original"] - fit["log_marginal_likelihood"]
        assert got == pytest.approx(offset, rel=1e-6)
    best = max(doc["results"], key=lambda r: r["log_marginal_likelihood"])
    assert doc["best"] == best["kernel"]
