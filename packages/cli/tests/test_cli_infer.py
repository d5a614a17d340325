"""Tests of ``amorgp infer`` through ``CliRunner`` (and a subprocess where stdout matters)."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from amorgp.amortizer.api import Amortizer, KernelResult
from amorgp.cli import main
from amorgp.cli._output import json_text, non_finite

REFINE_REFUSED = "neither a non-negative integer (at most 9 ASCII digits), 'auto' nor 'default'"
"""The usage error of a ``--refine`` value that is not ``N``, ``auto`` or ``default``."""


def _run(args: list[str], ckpt: Path | None = None) -> Result:
    full = [*args, "--checkpoint", str(ckpt)] if ckpt is not None else args
    return CliRunner().invoke(main, full)


def test_infer_json_matches_the_api(data_1d: Path, tiny_checkpoint: Path) -> None:
    res = _run(["infer", str(data_1d), "-k", "SE + PER", "-k", "LIN", "--json"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
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
        assert got["network"] == want.network == "tiny"


def test_infer_names_the_winning_network(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """With a candidate network, each kernel's row names the network the API picked."""
    from amorgp.amortizer.networks.config import PRESETS
    from amorgp.amortizer.testing import seeded_checkpoint

    other = seeded_checkpoint(tmp_path / "other", PRESETS["tiny"].network, seed=5)
    ckpt = tmp_path / "main"
    shutil.copytree(tiny_checkpoint, ckpt)
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    (ckpt / "checkpoint.json").write_text(json.dumps({**meta, "candidates": [str(other)]}))
    kernels = ["SE + PER", "LIN", "SE", "PER"]
    res = _run(["infer", str(data_1d), *[a for k in kernels for a in ("-k", k)]], ckpt)
    assert res.exit_code == 0, res.output
    data = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    api = Amortizer.from_pretrained(ckpt).infer_many(data[:, :1], data[:, 1], kernels)
    rows = [line for line in res.output.splitlines() if line.startswith("kernel ")]
    assert [line.rsplit("network ", 1)[1].split()[0] for line in rows] == [r.network for r in api]
    assert {r.network for r in api} <= {"main", "other"}


def test_infer_table(data_2d: Path, tiny_checkpoint: Path) -> None:
    res = _run(
        ["infer", str(data_2d), "-k", "(SE + LIN)@0 * PER@1", "--target", "target"], tiny_checkpoint
    )
    assert res.exit_code == 0, res.output
    text = res.output
    assert "per_period" not in text  # PER alone names its parameter 'period'
    assert "period" in text
    assert "log marginal likelihood" in text
    assert " a " in text
    assert " b " in text  # columns named by the CSV header


def _rows(text: str) -> list[list[str]]:
    """The parameter rows of a table: ``[dim, symbol, parameter, normalised, original]``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["dim"]) + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    return rows


def test_infer_table_shows_one_output_scale_in_target_units(
    data_2d: Path, tiny_checkpoint: Path
) -> None:
    """An ARD SE: one variance (the product of the columns', times var(y) in original
    units) and every lengthscale in input units, as AmortizedGPRegressor.kernel_."""
    res = _run(["infer", str(data_2d), "-k", "SE", "--target", "target"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    rows = _rows(res.output)
    assert [r[:3] for r in rows] == [
        ["a", "SE", "variance"],
        ["a", "SE", "lengthscale"],
        ["b", "SE", "lengthscale"],
    ]
    data = np.loadtxt(data_2d, delimiter=",", skiprows=1)
    X, y = data[:, 1:], data[:, 0]
    api = Amortizer.from_pretrained(tiny_checkpoint).infer(X, y, "SE")
    h = api.hyperparameters
    scale = h[(0, 0, "variance")] * h[(1, 0, "variance")]
    expect = [
        (scale, scale * y.var()),
        *((h[(d, 0, "lengthscale")], h[(d, 0, "lengthscale")] * np.ptp(X[:, d])) for d in (0, 1)),
    ]
    for row, (normalised, original) in zip(rows, expect, strict=True):
        assert float(row[3]) == pytest.approx(normalised, rel=1e-3)
        assert float(row[4]) == pytest.approx(original, rel=1e-3)
    assert "output scales of the product" in res.output


def test_infer_table_folds_sums_in_later_columns(data_2d: Path, tiny_checkpoint: Path) -> None:
    kernel = "(SE + LIN)@0 * (SE + PER)@1"
    res = _run(["infer", str(data_2d), "-k", kernel, "--target", "target"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    rows = _rows(res.output)
    assert [r[:3] for r in rows] == [
        ["a", "SE", "variance"],
        ["a", "SE", "lengthscale"],
        ["a", "LIN", "variance"],
        ["a", "LIN", "offset"],
        ["b", "SE", "lengthscale"],
        ["b", "PER", "weight"],
        ["b", "PER", "lengthscale"],
        ["b", "PER", "period"],
    ]
    data = np.loadtxt(data_2d, delimiter=",", skiprows=1)
    X, y = data[:, 1:], data[:, 0]
    h = Amortizer.from_pretrained(tiny_checkpoint).infer(X, y, kernel).hyperparameters
    first = h[(1, 0, "variance")]
    assert float(rows[0][4]) == pytest.approx(h[(0, 0, "variance")] * first * y.var(), rel=1e-3)
    assert rows[2][4] == rows[3][4] == "-"  # LIN: no exact original-unit value
    weight = h[(1, 1, "variance")] / first  # unit-free: the same in both columns
    assert float(rows[5][3]) == float(rows[5][4]) == pytest.approx(weight, rel=1e-3)


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
        ("t,v\n1,2\n2,3\n4,5\n", ["-k", "RQ"], 2, "not in vocabulary"),
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
    assert res.exit_code == code, res.output
    assert message in res.output
    assert "Traceback" not in res.output
    assert not isinstance(res.exception, ValueError)


def test_missing_file_and_corrupted_checkpoint(
    tmp_path: Path, data_1d: Path, tiny_checkpoint: Path
) -> None:
    res = _run(["infer", str(tmp_path / "none.csv"), "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1
    assert "cannot read" in res.output
    res = _run(["infer", str(data_1d), "-k", "SE"], tmp_path / "no-ckpt")
    assert res.exit_code == 1
    assert "no checkpoint at" in res.output


def test_dtype_choice_is_validated(data_1d: Path) -> None:
    res = CliRunner().invoke(main, ["infer", str(data_1d), "-k", "SE", "--dtype", "float16"])
    assert res.exit_code == 2


_CHATTY = """
import os, sys
from amorgp.amortizer.api import Amortizer
from amorgp.cli import main

infer_many = Amortizer.infer_many

def chatty(self, *args, **kwargs):
    print("[KeOps] Warning : CUDA libraries not found (python print)")
    sys.stdout.flush()
    os.write(1, b"[KeOps] compiler output on file descriptor 1\\n")
    return infer_many(self, *args, **kwargs)

gp_backend = Amortizer.gp_backend

def chatty_backend(self, *args, **kwargs):  # KeOps' first import, at the -v log line
    os.write(1, b"[KeOps] Warning : CUDA libraries not found (backend choice)\\n")
    return gp_backend(self, *args, **kwargs)

Amortizer.infer_many = chatty
Amortizer.gp_backend = chatty_backend
main()
"""


def test_json_stdout_is_only_json_and_library_chatter_goes_to_stderr(
    data_1d: Path, tiny_checkpoint: Path
) -> None:
    res = subprocess.run(
        [sys.executable, "-c", _CHATTY, "-v", "infer", str(data_1d), "-k", "SE", "--json",
         "--checkpoint", str(tiny_checkpoint)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)  # the whole of stdout parses
    assert out["results"][0]["kernel"] == "SE"
    assert "python print" in res.stderr
    assert "file descriptor 1" in res.stderr
    assert "backend choice" in res.stderr
    assert "working on n = 30 points, d = 1, 1 kernel(s) with backend cholesky" in res.stderr
    assert "%|" not in res.stderr  # no progress bar when stderr is not a terminal


def test_non_finite_results_are_refused_never_printed(
    data_1d: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    to_dict = KernelResult.to_dict

    def overflowing(self: KernelResult, **kwargs: bool) -> dict[str, object]:
        return {**to_dict(self, **kwargs), "noise_original": math.inf}

    monkeypatch.setattr(KernelResult, "to_dict", overflowing)
    for extra in (["--json"], []):
        res = _run(["infer", str(data_1d), "-k", "SE", *extra], tiny_checkpoint)
        assert res.exit_code == 1, res.output
        assert "noise_original = inf" in res.output
        assert "Infinity" not in res.stdout
        assert "Traceback" not in res.output


def test_json_never_holds_non_json_tokens() -> None:
    text = json_text({"a": [1.0, math.nan], "b": {"c": -math.inf}, "d": None})
    assert json.loads(text) == {"a": [1.0, None], "b": {"c": None}, "d": None}
    assert non_finite({"a": [1.0, math.nan], "b": {"c": -math.inf}}) == [
        "a[1] = nan",
        "b.c = -inf",
    ]


def test_verbose_logs_size_and_backend(
    data_2d: Path, tiny_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="amorgp.cli"):
        res = _run(
            ["-v", "infer", str(data_2d), "-k", "SE", "-k", "SE + PER", "--target", "target"],
            tiny_checkpoint,
        )
    assert res.exit_code == 0, res.output
    assert "working on n = 25 points, d = 2, 2 kernel(s) with backend cholesky" in caplog.text


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bars_on_a_terminal_stderr(data_2d: Path, tiny_checkpoint: Path) -> None:
    termios = pytest.importorskip("termios")
    fcntl = pytest.importorskip("fcntl")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    proc = subprocess.Popen(
        [sys.executable, "-m", "amorgp.cli", "infer", str(data_2d), "-k", "SE",
         "-k", "SE + PER", "--target", "target", "--refine", "2", "--json",
         "--checkpoint", str(tiny_checkpoint)],
        stdout=subprocess.PIPE, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    stdout, _ = proc.communicate(timeout=300)
    os.close(master)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, terminal
    assert "network" in terminal
    assert "refine" in terminal
    assert "likelihood" in terminal
    assert len(json.loads(stdout)["results"]) == 2  # stdout stays pure JSON


@pytest.mark.parametrize(
    ("value", "code"), [("auto", 0), ("3", 0), ("default", 0), ("-1", 2), ("abc", 2)]
)
def test_refine_takes_a_count_or_auto(
    data_1d: Path, tiny_checkpoint: Path, value: str, code: int
) -> None:
    res = _run(["infer", str(data_1d), "-k", "SE", "--json", "--refine", value], tiny_checkpoint)
    assert res.exit_code == code, res.output
    if code == 0:
        got = json.loads(res.stdout)["results"][0]
        assert got["refine_status"] in ("converged", "max_iters")
        # no step where the calibrated start is already at its optimum (Fisher scoring)
        assert 0 <= got["refine_steps"] <= (3 if value == "3" else 10**6)
        assert got["refine_gain"] >= 0.0
        if got["refine_status"] == "converged":
            assert got["refine_gain"] < 0.01
    else:
        assert REFINE_REFUSED in res.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--device", "meta"], 2, "use cpu, cuda or mps"),
        (["-k", ""], 2, "empty kernel expression"),
        (["--checkpoint", "FILE"], 1, "cannot load the model"),
        (["--checkpoint", "GARBAGE"], 1, "corrupted"),
        (["--checkpoint", "NOSUMS"], 1, "checksum"),
    ],
)
def test_bad_options_and_checkpoints(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "checkpoint.json").write_text("not json")
    nosums = tmp_path / "nosums"
    shutil.copytree(tiny_checkpoint, nosums)
    meta = json.loads((nosums / "checkpoint.json").read_text())
    meta.pop("sha256")
    (nosums / "checkpoint.json").write_text(json.dumps(meta))
    subst = {"FILE": tmp_path / "file", "GARBAGE": tmp_path / "garbage", "NOSUMS": nosums}
    args = [str(subst.get(a, a)) for a in args]
    if "-k" not in args:
        args += ["-k", "SE"]
    if "--checkpoint" in args:
        res = CliRunner().invoke(main, ["infer", str(data_1d), *args])
    else:
        res = _run(["infer", str(data_1d), *args], tiny_checkpoint)
    assert res.exit_code == code, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_library_warnings_are_one_line_each_on_stderr(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    path = tmp_path / "const.csv"
    path.write_text("c,t,y\n" + "".join(f"5,{i},{(i * 7) % 5}\n" for i in range(12)))
    res = _run(["infer", str(path), "-k", "SE", "--json"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)
    assert "Warning: " in res.stderr
    assert "constant" in res.stderr


@pytest.mark.parametrize(("edge", "code"), [(1.7e307, 0), (1e308, 1)])
def test_huge_input_ranges_give_finite_results_or_a_clean_error(
    tiny_checkpoint: Path, tmp_path: Path, edge: float, code: int
) -> None:
    path = tmp_path / "wide.csv"
    path.write_text(f"x,y\n{-edge!r},1\n0,3\n{edge!r},2\n1,5\n")
    res = _run(["infer", str(path), "-k", "SE", "--json"], tiny_checkpoint)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    if code == 0:
        got = json.loads(res.stdout)["results"][0]
        assert np.isfinite(got["log_marginal_likelihood"])
    else:
        assert set(json.loads(res.stdout)) == {"schema_version", "command", "error"}


@pytest.mark.parametrize("flag", [[], ["--calibrate"], ["--no-calibrate"]])
def test_calibrate_flag_matches_the_api(
    data_1d: Path, tiny_checkpoint: Path, flag: list[str]
) -> None:
    """Calibration is on by default, as in the API; ``--no-calibrate`` is the network alone."""
    args = ["infer", str(data_1d), "-k", "SE + PER", "--json", "--refine", "0", *flag]
    res = _run(args, tiny_checkpoint)
    assert res.exit_code == 0, res.output
    (got,) = json.loads(res.output)["results"]
    data = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    calibrated = flag != ["--no-calibrate"]
    want = amz.infer(data[:, :1], data[:, 1], "SE + PER", calibrate=calibrated, refine=0)
    plain = amz.infer(data[:, :1], data[:, 1], "SE + PER", calibrate=False, refine=0)
    assert got["calibrated"] is calibrated
    assert got["log_marginal_likelihood"] == pytest.approx(want.log_marginal_likelihood, rel=1e-9)
    assert want.log_marginal_likelihood >= plain.log_marginal_likelihood
    table = _run(["infer", str(data_1d), "-k", "SE", *flag], tiny_checkpoint)
    assert ("scale and noise calibrated" in table.output) is calibrated


def test_noise_floor_flag(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--noise-floor`` lowers the floor as the API's ``noise_floor=``; a fit at the floor
    prints one warning line naming the option; a floor float64 cannot factor is a usage
    error (exit 2)."""
    x = np.linspace(0.0, 1.0, 30)
    csv = tmp_path / "sine.csv"
    np.savetxt(csv, np.c_[x, np.sin(6 * x)], delimiter=",", header="x,y", comments="")
    res = _run(["infer", str(csv), "-k", "SE", "--json", "--noise-floor", "1e-10"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    start = res.output.index("{")
    got = json.loads(res.output[start:])["results"][0]
    assert got["noise_floor"] == 1e-10
    assert 1e-10 <= got["noise"] < 1e-8
    assert "noise_floor=" in res.output[:start]  # the warning line, on stderr
    bad = _run(["infer", str(csv), "-k", "SE", "--noise-floor", "1e-14"], tiny_checkpoint)
    assert bad.exit_code == 2
    assert "float64" in bad.output


def test_backend_and_memory_budget_options(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--backend`` and ``--memory-budget`` reach the amortizer's solver plan: CG gives
    the dense Cholesky's likelihood (the float64 oracle) to CG's tolerance; an unknown
    backend is a usage error naming the choices."""
    from amorgp.amortizer.frontends import inference

    seen: list[tuple[str, float]] = []
    real = inference.Amortizer.solver_plan

    def spy(self: inference.Amortizer, *args: object, **kwargs: object) -> object:
        seen.append((str(self.backend), self.memory_budget))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inference.Amortizer, "solver_plan", spy)
    x = np.linspace(0.0, 1.0, 40)
    csv = tmp_path / "sine.csv"
    y = np.sin(6 * x) + 0.1 * np.random.default_rng(0).standard_normal(40)
    np.savetxt(csv, np.c_[x, y], delimiter=",", header="x,y", comments="")
    out = {}
    for backend in ("cholesky", "cg"):
        # --refine 0: both backends evaluate the same (amortized) hyperparameters
        args = ["infer", str(csv), "-k", "SE", "--json", "--backend", backend, "--refine", "0"]
        res = _run([*args, "--memory-budget", "0.5"], tiny_checkpoint)
        assert res.exit_code == 0, res.output
        got = json.loads(res.output[res.output.index("{") :])["results"][0]
        out[backend] = got["log_marginal_likelihood"]
    assert ("cg", 0.5 * 2**30) in seen
    assert out["cg"] == pytest.approx(out["cholesky"], rel=1e-4)
    bad = _run(["infer", str(csv), "-k", "SE", "--backend", "fast"], tiny_checkpoint)
    assert bad.exit_code == 2
    assert "'cholesky'" in bad.output


def test_backend_choices_are_the_library_s() -> None:
    from amorgp.cli._common import BACKEND_NAMES
    from amorgp.lazy_kernels.backends import BACKENDS

    assert tuple(BACKEND_NAMES) == tuple(BACKENDS)


def test_fixed_and_bounds_flags(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--fixed NAME=VALUE`` and ``--bounds NAME=LOW:HIGH`` reach ``infer_many``'s
    ``fixed`` and ``bounds`` (the API run with the same values is the oracle; the fixed
    value comes back exactly, the bounded one inside); malformed ones are usage errors
    naming the option."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 4.0, 40)
    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.c_[x, np.sin(2 * x) + 0.1 * rng.standard_normal(40)], delimiter=",",
               header="x,y", comments="")  # fmt: skip
    args = ["infer", str(csv), "-k", "SE", "--json", "--refine", "3"]
    flags = ["--fixed", "noise=0.02", "--bounds", "0.0.lengthscale=0.05:0.1"]
    res = _run([*args, *flags], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    got = json.loads(res.output[res.output.index("{") :])["results"][0]
    assert got["noise"] == 0.02
    (ls,) = [h["normalised"] for h in got["hyperparameters"] if h["name"] == "lengthscale"]
    assert 0.05 <= ls <= 0.1
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    want = amz.infer(x, np.loadtxt(csv, delimiter=",", skiprows=1)[:, 1], "SE", refine=3,
                     fixed={"noise": 0.02}, bounds={(0, 0, "lengthscale"): (0.05, 0.1)})  # fmt: skip
    assert ls == pytest.approx(want.hyperparameters[(0, 0, "lengthscale")], rel=1e-9)
    for bad, words in (
        (["--fixed", "noise"], "is not NAME=VALUE"),
        (["--fixed", "lengthscale=0.1"], "DIM.ADDEND.NAME"),
        (["--fixed", "noise=abc"], "not a number"),
        (["--bounds", "noise=0.1"], "is not NAME=LOW:HIGH"),
        (["--bounds", "noise=0.2:0.1"], "low < high"),
        (["--fixed", "3.0.lengthscale=0.1"], "none of the kernels"),
    ):
        res = _run([*args, *bad], tiny_checkpoint)
        assert res.exit_code == 2, (bad, res.output)
        assert words in res.output, (bad, res.output)


@pytest.mark.parametrize("value", ["²", "١", "9" * 5000])
def test_refine_refuses_non_ascii_digits_and_huge_counts(tmp_path, value: str) -> None:
    """``str.isdigit`` accepts superscripts and other scripts' digits, and a 5,000-digit
    count overflowed later: both are one usage line, exit 2, the value cut short."""
    data = tmp_path / "d.csv"
    data.write_text("x,y\n" + "".join(f"{i},{(i * 7) % 5}\n" for i in range(12)))
    res = CliRunner().invoke(main, ["infer", str(data), "-k", "SE", "--refine", value])
    assert res.exit_code == 2, res.output
    assert REFINE_REFUSED in res.output
    assert len(res.output) < 600
