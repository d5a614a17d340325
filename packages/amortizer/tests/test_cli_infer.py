"""Tests of ``amorgp infer``, ``amorgp predict`` and ``amorgp demo`` through ``CliRunner``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.cli import main


@pytest.fixture(scope="module")
def data_1d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 10, 30))
    y = np.sin(x) + 0.1 * rng.normal(size=30) + 5
    path = tmp_path_factory.mktemp("d") / "one.csv"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="time,value", comments="")
    return path


@pytest.fixture(scope="module")
def data_2d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (25, 2))
    y = X[:, 0] * 3 + np.cos(4 * X[:, 1])
    path = tmp_path_factory.mktemp("d") / "two.csv"
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", header="target,a,b", comments="")
    return path


def _run(args: list[str], ckpt: Path | None = None) -> object:
    full = [*args, "--checkpoint", str(ckpt)] if ckpt is not None else args
    return CliRunner().invoke(main, full)


def test_infer_json_matches_the_api(data_1d: Path, tiny_checkpoint: Path) -> None:
    res = _run(["infer", str(data_1d), "-k", "SE + PER", "-k", "LIN", "--json"], tiny_checkpoint)
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    out = json.loads(res.output)  # type: ignore[attr-defined]
    assert out["target"] == "value"
    assert out["features"] == ["time"]
    data = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    api = Amortizer.from_pretrained(tiny_checkpoint).infer_many(
        data[:, :1], data[:, 1], ["SE + PER", "LIN"]
    )
    for got, want in zip(out["results"], api, strict=True):
        assert got["kernel"] == want.kernel_text
        assert got["log_marginal_likelihood"] == pytest.approx(
            want.log_marginal_likelihood, rel=1e-9
        )
        assert [h["normalised"] for h in got["hyperparameters"]] == pytest.approx(
            [h.value for h in want.table]
        )


def test_infer_table(data_2d: Path, tiny_checkpoint: Path) -> None:
    res = _run(
        ["infer", str(data_2d), "-k", "(SE + LIN)@0 * PER@1", "--target", "target"], tiny_checkpoint
    )
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    text = res.output  # type: ignore[attr-defined]
    assert "per_period" not in text  # PER alone names its parameter 'period'
    assert "period" in text
    assert "log marginal likelihood" in text
    assert " a " in text
    assert " b " in text  # columns named by the CSV header


def test_predict_split_reports_rmse_nll_against_numpy(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out_csv, plot = tmp_path / "pred.csv", tmp_path / "p.png"
    res = _run(
        [
            "predict",
            str(data_1d),
            "-k",
            "SE",
            "--split",
            "0.2",
            "--output",
            str(out_csv),
            "--plot",
            str(plot),
        ],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert plot.stat().st_size > 1000
    pred = np.loadtxt(out_csv, delimiter=",", skiprows=1)
    data = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    nearest = np.abs(data[:, 0][None, :] - pred[:, :1]).argmin(1)  # CSV keeps 10 digits
    y_test = data[nearest, 1]
    assert len(y_test) == 6
    rmse = np.sqrt(np.mean((y_test - pred[:, 1]) ** 2))
    nll = np.mean(
        0.5 * np.log(2 * np.pi * pred[:, 2] ** 2) + 0.5 * ((y_test - pred[:, 1]) / pred[:, 2]) ** 2
    )
    line = next(ln for ln in res.output.splitlines() if ln.startswith("test RMSE"))  # type: ignore[attr-defined]
    assert float(line.split()[2]) == pytest.approx(rmse, rel=1e-3)
    assert float(line.split()[5]) == pytest.approx(nll, rel=1e-3, abs=1e-3)


def test_predict_test_file_without_targets_and_2d_plot(
    data_2d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    test = tmp_path / "test.csv"
    test.write_text("b,a\n0.5,0.5\n0.1,0.9\n")
    plot = tmp_path / "slices.png"
    res = _run(
        [
            "predict",
            str(data_2d),
            "-k",
            "SE",
            "--target",
            "target",
            "--test",
            str(test),
            "--plot",
            str(plot),
            "--refine",
            "2",
        ],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert "RMSE" not in res.output  # type: ignore[attr-defined]
    assert "refined with 2" in res.output  # type: ignore[attr-defined]
    assert plot.exists()


@pytest.mark.parametrize(
    ("content", "args", "code", "message"),
    [
        ("t,v\n1,2\nx,3\n4,5\n", [], 1, "column 't' is not numeric"),
        ("t,v\n1,2\n2,nan\n4,5\n", [], 1, "NaN or infinite"),
        ("t,v\n1,2\n2,2\n4,2\n", [], 1, "y is constant"),
        ("t,v\n1,2\n2,3\n", [], 1, "at least 3 data points"),
        ("t,v\n1,2\n2,3\n4,5\n", ["--target", "w"], 2, "unknown target column 'w'"),
        (
            "t,v\n1,2\n2,3\n4,5\n",
            ["-k", "SE@0 * SE@1"],
            2,
            "out of range for data with 1 input dimension",
        ),
        ("t,v\n1,2\n2,3\n4,5\n", ["-k", "SE + "], 2, "--kernel"),
        ("t,v\n1,2\n2,3\n4,5\n", ["-k", "MAT52"], 2, "not in vocabulary"),
    ],
)
def test_infer_errors(
    tmp_path: Path, tiny_checkpoint: Path, content: str, args: list[str], code: int, message: str
) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(content)
    if not any(a == "-k" for a in args):
        args = [*args, "-k", "SE"]
    res = _run(["infer", str(f), *args], tiny_checkpoint)
    assert res.exit_code == code, res.output  # type: ignore[attr-defined]
    assert message in res.output  # type: ignore[attr-defined]
    assert "Traceback" not in res.output  # type: ignore[attr-defined]
    assert not isinstance(res.exception, ValueError)  # type: ignore[attr-defined]


def test_missing_file_and_corrupted_checkpoint(
    tmp_path: Path, data_1d: Path, tiny_checkpoint: Path
) -> None:
    res = _run(["infer", str(tmp_path / "none.csv"), "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1  # type: ignore[attr-defined]
    assert "cannot read" in res.output  # type: ignore[attr-defined]
    res = _run(["infer", str(data_1d), "-k", "SE"], tmp_path / "no-ckpt")
    assert res.exit_code == 1  # type: ignore[attr-defined]
    assert "no checkpoint at" in res.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of --test"),
        (["--split", "0.2", "--test", "x.csv"], "exactly one of --test"),
        (["--split", "1.5"], "strictly between 0 and 1"),
        (["--split", "0.99"], "need at least 3 training rows"),
        (["--split", "0.2", "--device", "nonsense"], "--device"),
    ],
)
def test_predict_usage_errors(
    data_1d: Path, tiny_checkpoint: Path, args: list[str], message: str
) -> None:
    res = _run(["predict", str(data_1d), "-k", "SE", *args], tiny_checkpoint)
    assert res.exit_code == 2, res.output  # type: ignore[attr-defined]
    assert message in res.output  # type: ignore[attr-defined]


def test_predict_test_file_with_wrong_columns(
    data_2d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    test = tmp_path / "test.csv"
    test.write_text("a,c\n0.5,0.5\n")
    res = _run(
        ["predict", str(data_2d), "-k", "SE", "--target", "target", "--test", str(test)],
        tiny_checkpoint,
    )
    assert res.exit_code == 1, res.output  # type: ignore[attr-defined]
    assert "missing input column(s) ['b']" in res.output  # type: ignore[attr-defined]


def test_dtype_choice_is_validated(data_1d: Path) -> None:
    res = CliRunner().invoke(main, ["infer", str(data_1d), "-k", "SE", "--dtype", "float16"])
    assert res.exit_code == 2


def test_demo_runs_with_baseline_and_plot(tmp_path: Path, tiny_checkpoint: Path) -> None:
    plot = tmp_path / "demo.png"
    res = _run(["demo", "--plot", str(plot), "-k", "SE", "-k", "SE + PER"], tiny_checkpoint)
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert "Type-2 ML" in res.output  # type: ignore[attr-defined]
    assert "speed-up x" in res.output  # type: ignore[attr-defined]
    assert plot.stat().st_size > 1000


def test_help_of_every_command() -> None:
    for cmd in ("infer", "predict", "demo"):
        res = CliRunner().invoke(main, [cmd, "--help"])
        assert res.exit_code == 0
        assert "--seed" in res.output
