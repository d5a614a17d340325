"""``amorgp infer TABLE --group-by COLUMN``: grouped tables in and out."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from amorgp.amortizer.api import Amortizer
from amorgp.cli import main

pd = pytest.importorskip("pandas")

from amorgp.amortizer.frontends.tables import fit_groups  # noqa: E402


def _run(args: list[str], ckpt: Path) -> Result:
    return CliRunner().invoke(main, [*args, "--checkpoint", str(ckpt)])


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    parts = []
    for g, n in (("north", 20), ("south", 20), ("tiny", 2)):
        t = rng.uniform(0, 5, n)
        parts.append(
            pd.DataFrame({"store": g, "t": t, "sales": np.sin(t) + 0.1 * rng.standard_normal(n)})
        )
    path = tmp_path_factory.mktemp("g") / "long.csv"
    pd.concat(parts).to_csv(path, index=False)
    return path


def _expected(table: Path, ckpt: Path, **kw) -> pd.DataFrame:
    amz = Amortizer.from_pretrained(ckpt, device="cpu")
    return fit_groups(pd.read_csv(table), "store", ["SE + PER", "LIN"], amortizer=amz, **kw)


def test_csv_to_stdout_matches_fit_groups(table: Path, tiny_checkpoint: Path) -> None:
    res = _run(
        [
            "infer",
            str(table),
            "--group-by",
            "store",
            "-k",
            "SE + PER",
            "-k",
            "LIN",
            "--predict-at",
            "6",
        ],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output
    out = pd.read_csv(io.StringIO(res.stdout))
    want = _expected(table, tiny_checkpoint, predict_at=[6.0])
    assert list(out.columns) == list(want.columns)
    assert out["store"].tolist() == want["store"].tolist()
    num = [c for c in want.columns if want[c].dtype == np.float64]
    np.testing.assert_allclose(out[num].to_numpy(), want[num].to_numpy(), rtol=1e-9)
    assert out["error"].iloc[-1].startswith("DataError: need at least 3")
    assert "1 group(s) failed" in res.stderr


def test_parquet_in_parquet_and_jsonl_out(
    table: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    pq = tmp_path / "long.parquet"
    pd.read_csv(table).to_parquet(pq)
    out = tmp_path / "fits.parquet"
    res = _run(
        ["infer", str(pq), "--group-by", "store", "-k", "SE + PER", "-k", "LIN", "-o", str(out)],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output
    got = pd.read_parquet(out)
    want = _expected(table, tiny_checkpoint)
    np.testing.assert_allclose(
        got["log_marginal_likelihood"].to_numpy(),
        want["log_marginal_likelihood"].to_numpy(),
        rtol=1e-9,
    )
    jl = tmp_path / "fits.jsonl"
    res = _run(
        ["infer", str(pq), "--group-by", "store", "-k", "SE + PER", "-k", "LIN", "-o", str(jl)],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in jl.read_text().splitlines()]
    assert [x["store"] for x in lines] == want["store"].tolist()
    assert lines[-1]["log_marginal_likelihood"] is None  # the failed group: null, not NaN
    res = _run(["infer", str(table), "--group-by", "store", "-k", "SE", "--json"], tiny_checkpoint)
    assert [json.loads(x)["store"] for x in res.stdout.splitlines()] == ["north", "south", "tiny"]


def test_bad_usage(table: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    res = _run(["infer", str(table), "--group-by", "nope", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 2
    assert "no group column 'nope'" in res.output
    res = _run(["infer", str(table), "-k", "SE", "-o", str(tmp_path / "x.csv")], tiny_checkpoint)
    assert res.exit_code == 2
    assert "--output needs --group-by" in res.output
    res = _run(
        ["infer", str(table), "--group-by", "store", "-k", "SE", "-o", str(tmp_path / "x.xlsx")],
        tiny_checkpoint,
    )
    assert res.exit_code == 2
    assert "unknown output format" in res.output
    res = _run(
        ["infer", str(tmp_path / "none.csv"), "--group-by", "store", "-k", "SE"], tiny_checkpoint
    )
    assert res.exit_code == 1
    assert "no such file" in res.output


def test_constraints_with_group_by(table: Path, tiny_checkpoint: Path) -> None:
    """``--fixed`` and ``--noise-floor`` apply to every group, as ``fit_groups``'s."""
    flags = ["--fixed", "noise=0.05", "--noise-floor", "1e-8", "--refine", "1"]
    res = _run(["infer", str(table), "--group-by", "store", "-k", "SE + PER", "-k", "LIN",
                *flags], tiny_checkpoint)  # fmt: skip
    assert res.exit_code == 0, res.output
    out = pd.read_csv(io.StringIO(res.stdout))
    want = _expected(table, tiny_checkpoint, fixed={"noise": 0.05}, noise_floor=1e-8, refine=1)
    num = [c for c in want.columns if want[c].dtype == np.float64]
    np.testing.assert_allclose(out[num].to_numpy(), want[num].to_numpy(), rtol=1e-9)
    ok = out[out["error"].isna()]
    sales = pd.read_csv(table).groupby("store")["sales"].var(ddof=0)
    np.testing.assert_allclose(ok["noise"], 0.05 * sales.loc[ok["store"]].to_numpy(), rtol=1e-9)


# -- float precision, labels, paths, usage errors, headers ---------------------------------------
EXACT = [8.46e-13, 7.6e-10, 1 / 3, 1e300, -2.5e-308, 123456789.12345679]


@pytest.mark.parametrize("name", ["x.csv", "x.jsonl", "x.parquet", "-"])
def test_every_output_format_round_trips_floats_exactly(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON Lines used to go through pandas' ``to_json`` (10 decimals: 8.46e-13 -> 0.0)."""
    from amorgp.cli._groups import _write, output_format

    frame = pd.DataFrame({"g": ["a", "b", "c", "d", "e", "f"], "noise": EXACT, "error": [None] * 6})
    frame.loc[5, "noise"] = float("nan")
    path = Path(name)
    if name != "-":
        path = tmp_path / name
    fmt = "jsonl" if name == "-" else output_format(path, False)
    _write(frame, fmt, path)
    if name == "-":
        text = capsys.readouterr().out
        got = [json.loads(x)["noise"] for x in text.splitlines()]
    elif fmt == "jsonl":
        got = [json.loads(x)["noise"] for x in path.read_text().splitlines()]
    elif fmt == "csv":
        with path.open(newline="") as fh:  # Python's float(): exact
            got = [float(r["noise"]) if r["noise"] else None for r in csv.DictReader(fh)]
    else:
        got = pd.read_parquet(path)["noise"].tolist()
    assert got[:5] == EXACT[:5]  # bit for bit (== on floats)
    assert got[5] is None or np.isnan(got[5])  # NaN: null in JSON, empty in CSV


def test_jsonl_keeps_key_types(tmp_path: Path) -> None:
    from amorgp.cli._groups import jsonl_text

    frame = pd.DataFrame(
        {
            "day": pd.to_datetime(["2024-01-02", "2024-01-03"]),
            "k": np.array([3, 4], dtype=np.int32),
            "x": np.array([0.1, np.inf], dtype=np.float64),
            "ok": [True, False],
        }
    )
    rows = [json.loads(x) for x in jsonl_text(frame).splitlines()]
    assert rows == [
        {"day": "2024-01-02T00:00:00", "k": 3, "x": 0.1, "ok": True},
        {"day": "2024-01-03T00:00:00", "k": 4, "x": None, "ok": False},
    ]


def test_predict_at_labels_are_exact_and_repeats_refused(
    table: Path, tiny_checkpoint: Path
) -> None:
    """``%g`` labels made 1000001 and 1000004 both ``mean@1e+06`` (one overwrote the other)."""
    base = ["infer", str(table), "--group-by", "store", "-k", "SE"]
    res = _run([*base, "--predict-at", "1000001", "--predict-at", "1000004"], tiny_checkpoint)
    assert res.exit_code == 0, res.output
    out = pd.read_csv(io.StringIO(res.stdout))
    assert [c for c in out.columns if "@1" in c and c[0] in "ms"] == [
        "mean@1000001",
        "sd@1000001",
        "mean@1000004",
        "sd@1000004",
    ]
    res = _run([*base, "--predict-at", "6", "--predict-at", "6.0"], tiny_checkpoint)
    assert res.exit_code == 2
    assert "predict_at repeats the point 6" in res.output
    assert res.stdout == ""


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_output_onto_the_input_table_is_refused(
    table: Path, tiny_checkpoint: Path, tmp_path: Path, suffix: str
) -> None:
    src = tmp_path / f"t{suffix}"
    frame = pd.read_csv(table)
    frame.to_csv(src, index=False) if suffix == ".csv" else frame.to_parquet(src, index=False)
    before = src.read_bytes()
    link = tmp_path / f"link{suffix}"
    link.symlink_to(src)
    for out in (src, link):
        res = _run(["infer", str(src), "--group-by", "store", "-k", "SE", "-o", str(out)],
                   tiny_checkpoint)  # fmt: skip
        assert res.exit_code == 2, res.output
        assert "is an input file" in res.output
        assert src.read_bytes() == before


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["-k", "FOO"], "unknown kernel 'FOO'"),
        (["-k", "SE@3"], "dimension index 3 out of range"),
        (["-k", "SE", "--fixed", "0.1.lengthscale=1"], "a hyperparameter of none of the kernels"),
    ],
)
def test_usage_errors_exit_2_before_any_work(
    table: Path, tiny_checkpoint: Path, flags: list[str], words: str
) -> None:
    """They used to become an error in every row, exit 0."""
    res = _run(["infer", str(table), "--group-by", "store", *flags], tiny_checkpoint)
    assert res.exit_code == 2, res.output
    assert words in res.output
    assert res.stdout == ""


def test_nothing_fitted_exits_1_and_writes_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("g,t,y\na,0,1\na,1,2\nb,0,1\n")  # every group too small
    out = tmp_path / "fits.csv"
    res = _run(["infer", str(tiny), "--group-by", "g", "-k", "SE", "-o", str(out)],
               tiny_checkpoint)  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "no group was fitted: all 2 group(s) failed, e.g. DataError: need at least 3" in (
        res.output
    )
    assert not out.exists()
    empty = tmp_path / "empty.csv"
    empty.write_text("g,t,y\n")
    res = _run(["infer", str(empty), "--group-by", "g", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert "has a header but no data rows" in res.output
    assert res.stdout == ""


@pytest.mark.parametrize("name", ["kernel", "noise", "n_points", "error", "SE@0[0].variance"])
def test_group_column_named_like_a_result_column(
    table: Path, tiny_checkpoint: Path, tmp_path: Path, name: str
) -> None:
    src = tmp_path / "t.csv"
    pd.read_csv(table).rename(columns={"store": name}).to_csv(src, index=False)
    res = _run(["infer", str(src), "--group-by", name, "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 2, res.output
    assert f"the group column {name!r} has the name of a result column" in res.output
    assert res.stdout == ""


def test_group_by_header_checks_as_the_plain_path(tiny_checkpoint: Path, tmp_path: Path) -> None:
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(f"c{i}" for i in range(5000)) + "\n" + ",".join(["1"] * 5000) + "\n")
    res = _run(["infer", str(wide), "--group-by", "c0", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert "5000 columns; at most 1024 are supported" in res.output
    twice = tmp_path / "twice.csv"
    twice.write_text("g,t,t,y\na,1,2,3\n")
    res = _run(["infer", str(twice), "--group-by", "g", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert "duplicate column names in the header" in res.output
    assert "'t'" in res.output
    pq = tmp_path / "wide.parquet"
    pd.DataFrame(np.ones((2, 1100)), columns=[f"c{i}" for i in range(1100)]).to_parquet(pq)
    res = _run(["infer", str(pq), "--group-by", "c0", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert "1100 columns" in res.output
