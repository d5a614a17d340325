"""Command-line conventions: imports on demand, --version, -v after the command, one
versioned --json schema, every --kernel predicted, standard output as --output,
likelihood units and labels, other libraries' kernel names."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from amorgp.amortizer.api import Amortizer
from amorgp.cli import main
from amorgp.kernel_grammar import DimWiseStructure, base_symbol

HEAVY = ("torch", "sklearn", "matplotlib", "scipy", "gpytorch", "botorch", "pykeops")


def test_importing_the_cli_imports_no_heavy_library() -> None:
    code = f"import sys, amorgp.cli\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_help_and_version_need_no_heavy_library() -> None:
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom amorgp.cli import main\n"
        "for args in (['--help'], ['--version']):\n"
        "    assert CliRunner().invoke(main, args).exit_code == 0\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_version_prints_the_installed_package_versions() -> None:
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0, res.output
    lines = dict(line.split(" ", 1) for line in res.output.strip().splitlines())
    assert lines["amorgp-amortizer"] == importlib.metadata.version("amorgp-amortizer")
    assert lines["torch"] == importlib.metadata.version("torch")


def test_verbose_after_the_command(
    data_2d: Path, tiny_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = ["infer", str(data_2d), "-k", "SE", "--target", "target"]
    with caplog.at_level(logging.INFO, logger="amorgp.cli"):
        res = CliRunner().invoke(main, [*args, "--checkpoint", str(tiny_checkpoint), "-v"])
    assert res.exit_code == 0, res.output
    assert "working on n = 25 points, d = 2, 1 kernel(s) with backend cholesky" in caplog.text


def _json(args: list[str]) -> dict:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_every_command_has_one_versioned_json_schema(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    ck = ["--checkpoint", str(tiny_checkpoint), "--device", "cpu"]
    docs = {
        "infer": _json(["infer", str(data_1d), "-k", "SE", "--json", *ck]),
        "predict": _json(["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--json", *ck]),
        "ensemble": _json(["ensemble", str(data_1d), "-k", "SE", "-k", "PER", "--json", *ck]),
        "search": _json(["search", str(data_1d), "--depth", "0", "--json", *ck]),
        "model-info": _json(["model-info", "--preset", "tiny", "--json"]),
        "train": json.loads(
            CliRunner()
            .invoke(
                main,
                [
                    "train",
                    "--preset",
                    "tiny",
                    "--out",
                    str(tmp_path / "r"),
                    "--max-steps",
                    "1",
                    "--no-progress",
                    "--json",
                    "--set",
                    "batch_size=4",
                    "--set",
                    "n_max=12",
                    "--set",
                    "max_dims=2",
                    "--set",
                    "val_size=4",
                    "--set",
                    "num_workers=0",
                ],
            )
            .stdout.strip()
            .splitlines()[-1]
        ),
    }
    for command, doc in docs.items():
        assert doc["schema_version"] == 1, command
        assert doc["command"] == command
    for name in ("campaign", "demo", "benchmark"):  # the others accept --json too
        command = main.get_command(None, name)  # type: ignore[arg-type]
        if name == "benchmark":
            command = command.commands["paper"]  # type: ignore[union-attr]
        if name != "demo":
            assert any("--json" in p.opts for p in command.params), name  # type: ignore[union-attr]


def test_predict_predicts_every_kernel_as_the_api_does(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    kernels = ["SE + PER", "LIN + SE*PER"]
    test_csv = tmp_path / "test.csv"
    Xt = np.linspace(0.5, 9.5, 7)
    np.savetxt(test_csv, Xt[:, None], delimiter=",", header="time", comments="")
    out = tmp_path / "pred.csv"
    args = ["predict", str(data_1d), "--test", str(test_csv), "--output", str(out)]
    args += [a for k in kernels for a in ("-k", k)] + ["--checkpoint", str(tiny_checkpoint)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert sum(line.startswith("kernel ") for line in res.stdout.splitlines()) == 2
    header = out.read_text().splitlines()[0].split(",")
    assert header == ["time", *[f"{c}[{k}]" for k in kernels for c in ("mean", "std")]]
    table = np.loadtxt(out, delimiter=",", skiprows=1)
    data = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    for i, k in enumerate(kernels):
        mean, var = amz.infer(data[:, :1], data[:, 1], k).predict(Xt[:, None], include_noise=True)
        np.testing.assert_allclose(table[:, 1 + 2 * i], np.asarray(mean), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(table[:, 2 + 2 * i], np.sqrt(np.asarray(var)), rtol=1e-9)


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_output_dash_and_dev_stdout_mean_standard_output(
    data_1d: Path,
    tiny_checkpoint: Path,
    target: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        main,
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--output", target,
         "--checkpoint", str(tiny_checkpoint)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert list(tmp_path.iterdir()) == []  # no file named '-'

    rows = res.stdout.strip().splitlines()
    assert rows[0] == "time,mean,std"
    assert len(rows) == 1 + 6  # the CSV alone: the summary went to stderr
    assert "test RMSE" in res.stderr
    assert np.isfinite(np.array([[float(v) for v in r.split(",")] for r in rows[1:]])).all()


def test_other_libraries_kernel_names(data_1d: Path, tiny_checkpoint: Path) -> None:
    ck = ["--checkpoint", str(tiny_checkpoint)]
    rbf = _json(["infer", str(data_1d), "-k", "RBF + Periodic", "--json", *ck])["results"][0]
    se = _json(["infer", str(data_1d), "-k", "SE + PER", "--json", *ck])["results"][0]
    assert rbf["kernel"] == se["kernel"]
    assert rbf["log_marginal_likelihood"] == se["log_marginal_likelihood"]
    res = CliRunner().invoke(main, ["infer", str(data_1d), "-k", "Matern", *ck])
    assert res.exit_code == 2, res.output
    vocab = Amortizer.from_pretrained(tiny_checkpoint).vocabulary.symbols
    hint = next(line for line in res.output.splitlines() if line.strip().startswith("hint"))
    listed = hint.split(" (the data")[0].split(": ")[-1].split(", ")
    assert "no Matérn kernel" in hint
    assert listed
    assert set(listed) <= set(vocab)


def test_search_and_ensemble_report_likelihoods_in_original_units(
    data_1d: Path, tiny_checkpoint: Path
) -> None:
    ck = ["--checkpoint", str(tiny_checkpoint)]
    data = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    n = data.shape[0]
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    doc = _json(["search", str(data_1d), "--depth", "1", "--json", *ck])
    best = doc["best"]
    s = DimWiseStructure.parse(best["kernel"], 1)
    k = sum(len(base_symbol(sym).params) for dim in s.dims for sym in dim) + 1  # + noise
    ref = amz.infer(data[:, :1], data[:, 1], s).log_marginal_likelihood_original
    assert math.isclose(best["log_marginal_likelihood_original"], ref, rel_tol=1e-9)
    assert math.isclose(best["bic"], -2 * ref + k * math.log(n), rel_tol=1e-9)
    text = CliRunner().invoke(main, ["search", str(data_1d), "--depth", "1", *ck]).stdout
    assert "lower is better" in text
    assert f"BIC {best['bic']:.2f}" in text
    ens = ["ensemble", str(data_1d), "-k", "SE", "-k", "PER", "--split", "0", *ck]
    doc = _json([*ens, "--json"])
    for m in doc["members"]:
        ref = amz.infer(data[:, :1], data[:, 1], m["kernel"]).log_marginal_likelihood_original
        assert math.isclose(m["log_marginal_likelihood_original"], ref, rel_tol=1e-9)
    text = CliRunner().invoke(main, ens)
    assert "original units" in text.stdout
    assert f"{doc['members'][0]['log_marginal_likelihood_original']:.2f}" in text.stdout


def test_large_n_says_the_backend_and_an_estimate_and_logs_every_stage(
    data_1d: Path,
    tiny_checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import amorgp.cli._estimate as common

    monkeypatch.setattr(common, "LARGE_N", 10)  # the 30-point table counts as large here
    args = ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--refine", "2"]
    with caplog.at_level(logging.INFO, logger="amorgp.cli"):
        res = CliRunner().invoke(main, [*args, "--checkpoint", str(tiny_checkpoint), "-v"])
    assert res.exit_code == 0, res.output
    note = next(line for line in res.stderr.splitlines() if line.startswith("Note: n = 24"))
    assert "backend cholesky: roughly" in note
    assert "calibration ~" in note
    assert "refinement ~" in note
    for stage in ("network", "calibration", "refine", "posterior", "likelihood", "prediction"):
        assert f"{stage}" in caplog.text, stage


def test_time_estimate_scales_as_the_flop_counts() -> None:
    from amorgp.amortizer.stages.calibrate import MAX_POINTS
    from amorgp.cli._estimate import estimate_seconds

    units = {"cholesky": 1.0, "eigh": 2.0, "matmul": 4.0}
    small = estimate_seconds(512, [1], "cholesky", True, 3, units)
    big = estimate_seconds(1024, [1, 2], "cholesky", True, 3, units)
    assert small == {"calibration": 2.0, "posterior": 1.0, "refinement": 18.0}
    assert big["posterior"] == 2 * 8 * small["posterior"]  # two kernels, (n x 2)^3
    assert big["refinement"] == 2 * 8 * small["refinement"]
    huge = estimate_seconds(100 * MAX_POINTS, [1], "cg", True, 0, units)
    assert huge["calibration"] == 2.0 * (MAX_POINTS / 512) ** 3  # a bounded subset
    assert "refinement" not in huge
    cg = estimate_seconds(1024, [1, 3], "cg", False, 0, units)
    assert cg == {"posterior": 30 * 20 * 4 * 1024**2 * 4.0 / 512**3}
    # the default above DEFAULT_POINTS refines on a subset: the refinement at its size
    sub = estimate_seconds(1024, [1, 2], "cholesky", True, 3, units, refine_points=512)
    assert sub["refinement"] == 2 * small["refinement"]  # two kernels on 512 points
    assert sub["posterior"] == big["posterior"]  # all points


def test_library_chatter_and_warnings_become_one_line_messages() -> None:
    import warnings

    import click

    from amorgp.cli import AmorgpCommand
    from amorgp.cli._output import emit

    @click.command("noisy", cls=AmorgpCommand)
    def noisy() -> None:
        print(
            "[KeOps] Warning : CUDA libraries not found or could not be loaded; Switching to CPU only."
        )
        print("a library's own line")
        for _ in range(3):
            warnings.warn("one thing went\nsomewhat wrong", UserWarning, stacklevel=1)
        warnings.warn_explicit(
            "`torch.jit.script` is deprecated", DeprecationWarning, "/site-packages/torch/x.py", 1
        )
        emit("result")

    res = CliRunner().invoke(click.Group(commands=[noisy]), ["noisy"])
    assert res.exit_code == 0, res.output
    assert res.stdout == "result\n"
    assert "KeOps" not in res.stderr
    assert "deprecated" not in res.stderr
    assert "a library's own line" in res.stderr
    assert res.stderr.count("Warning: one thing went") == 1
    assert "somewhat wrong" not in res.stderr  # one line
    assert "UserWarning" not in res.stderr
