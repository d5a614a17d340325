"""``amorgp infer TABLE --group-by COLUMN``: grouped tables in and out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from amorgp.amortizer.api import Amortizer
from amorgp.cli import main

pd = pytest.importorskip("pandas")

from amorgp.amortizer.tables import fit_groups  # noqa: E402


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
