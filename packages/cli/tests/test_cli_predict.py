"""Tests of ``amorgp predict`` through ``CliRunner``."""

from __future__ import annotations

import os
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner, Result

import amorgp.cli.predict as predict_module
from amorgp.amortizer.api import Amortizer
from amorgp.cli import main
from amorgp.cli._output import atomic_write, check_output_path
from amorgp.cli.predict import holdout_scores, write_predictions


def _run(args: list[str], ckpt: Path | None = None) -> Result:
    full = [*args, "--checkpoint", str(ckpt)] if ckpt is not None else args
    return CliRunner().invoke(main, full)


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
    assert res.exit_code == 0, res.output
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
    line = next(ln for ln in res.output.splitlines() if ln.startswith("test RMSE"))
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
    assert res.exit_code == 0, res.output
    assert "RMSE" not in res.output
    data = np.loadtxt(data_2d, delimiter=",", skiprows=1)
    api = Amortizer.from_pretrained(tiny_checkpoint).infer(data[:, 1:], data[:, 0], "SE", refine=2)
    assert 1 <= api.refine_steps <= 2  # the iterations actually run, not the budget
    assert f"refined: {api.refine_steps} steps ({api.refine_status})" in res.output
    assert plot.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of --test"),
        (["--split", "0.2", "--test", "x.csv"], "exactly one of --test"),
        (["--split", "1.5"], "strictly between 0 and 1"),
        (["--split", "nan"], "strictly between 0 and 1"),
        (
            ["--split", "0.2", "--output", "same.png", "--plot", "same.png"],
            "the same file as --output",
        ),
        (["--split", "0.99"], "need at least 3 training rows"),
        (["--split", "0.2", "--device", "nonsense"], "--device"),
    ],
)
def test_predict_usage_errors(
    data_1d: Path, tiny_checkpoint: Path, args: list[str], message: str
) -> None:
    res = _run(["predict", str(data_1d), "-k", "SE", *args], tiny_checkpoint)
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_predict_test_file_with_wrong_columns(
    data_2d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    test = tmp_path / "test.csv"
    test.write_text("a,c\n0.5,0.5\n")
    res = _run(
        ["predict", str(data_2d), "-k", "SE", "--target", "target", "--test", str(test)],
        tiny_checkpoint,
    )
    assert res.exit_code == 1, res.output
    assert "missing input column(s) ['b']" in res.output


def test_output_has_full_float_precision(tiny_checkpoint: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 10, 20)) + 1e9  # inputs with 17 significant digits
    y = 1e15 + 1e3 * np.sin(x - 1e9)  # targets like 1e15 + signal
    train = tmp_path / "train.csv"
    train.write_text(
        "x,y\n" + "".join(f"{a!r},{b!r}\n" for a, b in zip(x.tolist(), y.tolist(), strict=True))
    )
    xt = x[:5] + 0.123456789012345
    test = tmp_path / "test.csv"
    test.write_text("x\n" + "".join(f"{a!r}\n" for a in xt.tolist()))
    out = tmp_path / "pred.csv"
    res = _run(
        ["predict", str(train), "-k", "SE", "--test", str(test), "--output", str(out)],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    np.testing.assert_array_equal(got[:, 0], xt)  # inputs read back bit for bit
    mean, var = Amortizer.from_pretrained(tiny_checkpoint).infer(x[:, None], y, "SE").predict(xt)
    np.testing.assert_allclose(got[:, 1], np.asarray(mean), rtol=1e-15, atol=0)
    np.testing.assert_allclose(got[:, 2], np.sqrt(np.asarray(var)), rtol=1e-15, atol=0)
    assert len(set(got[:, 1])) == 5  # %.10g made every mean 1e+15


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("out.txt", "format 'txt' is not supported"),
        ("tmp", "the file name has no extension"),
        ("missing/out.png", "does not exist"),
    ],
)
def test_plot_path_is_checked_before_the_work(
    data_1d: Path,
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    message: str,
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("inference ran before the plot path was checked")

    monkeypatch.setattr(predict_module, "run_inference", never)
    res = _run(
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--plot", str(tmp_path / name)],
        tiny_checkpoint,
    )
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "--plot" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("DIR", "is a directory"),
        ("FILE/out.csv", "is not a folder"),
        ("DATA", "is an input file"),
    ],
)
def test_output_path_is_checked_before_the_work(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path, target: str, message: str
) -> None:
    (tmp_path / "file").write_text("x")
    path = (
        target.replace("DIR", str(tmp_path))
        .replace("FILE", str(tmp_path / "file"))
        .replace("DATA", str(data_1d))
    )
    before = data_1d.read_bytes()
    res = _run(
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--output", path], tiny_checkpoint
    )
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert data_1d.read_bytes() == before


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_output_folder(data_1d: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        res = _run(
            ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--output", str(ro / "p.csv")],
            tiny_checkpoint,
        )
    finally:
        ro.chmod(0o700)
    assert res.exit_code == 2, res.output
    assert "cannot write in" in res.output


def test_unwritable_folder_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", denied)
    with pytest.raises(click.BadParameter, match=r"cannot write in .*Permission denied"):
        check_output_path(tmp_path / "p.csv", "--output")


def test_interrupted_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "pred.csv"
    out.write_text("old\n")

    def dies(tmp: Path) -> None:
        tmp.write_text("half a fi")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(out, dies)
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.csv"]


def test_concurrent_writers_leave_one_whole_file(tmp_path: Path) -> None:
    out = tmp_path / "pred.csv"
    X = np.arange(2000.0)[:, None]
    columns = [np.full(2000, float(k)) for k in range(8)]

    def write(k: int) -> None:
        write_predictions(out, ("x",), X, columns[k], columns[k] + 1)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    assert got.shape == (2000, 3)
    assert len(set(got[:, 1])) == 1  # all rows from one writer
    np.testing.assert_array_equal(got[:, 2], got[:, 1] + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.csv"]
    assert stat.S_IMODE(out.stat().st_mode) & 0o044  # readable as any other new file


def test_holdout_scores_do_not_overflow_near_the_float64_limit() -> None:
    y = np.array([3e200, -3e200, 3e200, -3e200])
    mean = np.zeros(4)
    var = np.full(4, 4e300)  # std 2e150: (y - m)^2 / var overflows if formed naively
    rmse, nll = holdout_scores(y, mean, var)
    assert rmse == pytest.approx(3e200, rel=1e-15)  # closed form: |y - m| = 3e200
    z2 = (3e200 / np.sqrt(4e300)) ** 2
    assert nll == pytest.approx(0.5 * np.log(2 * np.pi * 4e300) + 0.5 * z2, rel=1e-12)


def test_predict_takes_the_constraint_flags(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--fixed`` and ``--noise-floor`` reach the fit behind the predictions: the
    likelihood reported equals the API's fit of the same training rows with the same
    constraints (``--split-mode last``: the first 80 % train)."""
    import json

    rng = np.random.default_rng(5)
    x = np.sort(rng.uniform(0.0, 4.0, 50))
    y = np.sin(2 * x) + 0.1 * rng.standard_normal(50)
    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.c_[x, y], delimiter=",", header="x,y", comments="")
    flags = ["--fixed", "noise=0.02", "--noise-floor", "1e-8", "--refine", "2"]
    res = _run(["predict", str(csv), "-k", "SE", "--split", "0.2", "--split-mode", "last",
                "--json", *flags], tiny_checkpoint)  # fmt: skip
    assert res.exit_code == 0, res.output
    got = json.loads(res.output[res.output.index("{") :])["results"][0]
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    want = amz.infer(x[:40], y[:40], "SE", refine=2, fixed={"noise": 0.02}, noise_floor=1e-8)
    assert want.noise == 0.02
    assert got["log_marginal_likelihood"] == pytest.approx(
        want.log_marginal_likelihood_original, rel=1e-9
    )


def test_predict_test_file_prints_the_predictions_by_default(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """``--test`` without ``--output``: the predictions CSV on standard output (the same
    as ``--output -``), the summary on standard error; ``--split`` without ``--output``
    says how to get them."""
    test = tmp_path / "test.csv"
    test.write_text("time\n0.25\n0.75\n")
    res = _run(["predict", str(data_1d), "-k", "SE", "--test", str(test)], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    explicit = _run(
        ["predict", str(data_1d), "-k", "SE", "--test", str(test), "--output", "-"],
        tiny_checkpoint,
    )
    assert res.stdout == explicit.stdout
    rows = res.stdout.strip().splitlines()
    assert len(rows) == 3  # header and one row per test point
    assert "kernel SE" in res.stderr
    split = _run(["predict", str(data_1d), "-k", "SE", "--split", "0.2"], tiny_checkpoint)
    assert split.exit_code == 0, split.output
    assert "predictions not written: --output FILE" in split.stdout
