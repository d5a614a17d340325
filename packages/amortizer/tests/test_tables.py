"""Grouped tables (amorgp.amortizer.frontends.tables.fit_groups) against per-group infer_many."""

from __future__ import annotations

import math
import re
import sys

import numpy as np
import pytest

from amorgp.amortizer.api import Amortizer
from amorgp.core.errors import DataError, MissingExtraError, OptionError

pd = pytest.importorskip("pandas")

from amorgp.amortizer.frontends.tables import FIXED_COLUMNS, fit_groups  # noqa: E402

KERNELS = ["SE + PER", "LIN"]


@pytest.fixture(scope="module")
def long() -> pd.DataFrame:
    rng = np.random.default_rng(2)
    parts = []
    for g, n in (("b", 20), ("a", 20), ("c", 14), ("bad", 2)):
        t = rng.uniform(0, 5, n)
        parts.append(
            pd.DataFrame({"t": t, "id": g, "y": np.sin(2 * t) + 0.1 * rng.standard_normal(n)})
        )
    return pd.concat(parts, ignore_index=True).sample(frac=1.0, random_state=0)


def test_rows_equal_infer_many(amz: Amortizer, long: pd.DataFrame) -> None:
    out = fit_groups(long, "id", KERNELS, amortizer=amz, exact_network=True, predict_at=[1.0, 6.5])
    assert list(out.columns[:7]) == ["id", *FIXED_COLUMNS]
    first = list(dict.fromkeys(long["id"]))  # groups in order of first appearance
    assert list(out["id"]) == [g for g in first for _ in KERNELS]
    for g in ("a", "b", "c"):
        rows = long[long["id"] == g]  # the group's rows in table order
        ref = amz.infer_many(rows[["t"]].to_numpy(), rows["y"].to_numpy(), KERNELS)
        got = out[out["id"] == g]
        for (_, row), r in zip(got.iterrows(), ref, strict=True):
            assert row["kernel"] == r.kernel_text
            assert row["n_points"] == r.n_points
            assert row["log_marginal_likelihood"] == pytest.approx(
                r.log_marginal_likelihood_original, rel=1e-8
            )
            assert row["noise"] == pytest.approx(r.noise_original, rel=1e-8)
            assert row["start"] == r.start
            assert row["error"] is None
            for h in r.table:
                cell = row[f"{h.symbol}@{h.dim}[{h.addend}].{h.name}"]
                if h.original is None:
                    assert math.isnan(cell)
                else:
                    assert cell == pytest.approx(h.original, rel=1e-8)
            mean, var = r.predict(np.array([[1.0], [6.5]]))
            assert [row["mean@1"], row["mean@6.5"]] == pytest.approx(list(mean), rel=1e-8)
            assert [row["sd@1"], row["sd@6.5"]] == pytest.approx(list(np.sqrt(var)), rel=1e-8)
        # a column of the other kernel is empty
        assert math.isnan(got[got["kernel"] == "LIN"]["SE@0[0].lengthscale"].iloc[0])


def test_failed_group_keeps_its_rows(amz: Amortizer, long: pd.DataFrame) -> None:
    out = fit_groups(long, "id", KERNELS, amortizer=amz)
    bad = out[out["id"] == "bad"]
    assert len(bad) == len(KERNELS)
    assert set(bad["error"]) == {"DataError: need at least 3 data points, got 2"}
    assert bad["n_points"].tolist() == [2, 2]
    assert bad["log_marginal_likelihood"].isna().all()
    assert out[out["id"] != "bad"]["error"].isna().all()


def test_columns_and_two_keys(amz: Amortizer, long: pd.DataFrame) -> None:
    df = long.assign(region=np.where(long["id"] == "a", "north", "south"), noise_col=1.0)
    out = fit_groups(df, ["region", "id"], "SE", inputs=["t"], target="y", amortizer=amz)
    assert list(out.columns[:2]) == ["region", "id"]
    assert len(out) == 4
    with pytest.raises(OptionError, match="no group column 'nope'"):
        fit_groups(long, "nope", "SE", amortizer=amz)
    with pytest.raises(OptionError, match="no target column 'z'"):
        fit_groups(long, "id", "SE", target="z", amortizer=amz)
    with pytest.raises(OptionError, match="no input column 'q'"):
        fit_groups(long, "id", "SE", inputs=["q"], amortizer=amz)
    with pytest.raises(OptionError, match="predict_at has 2 input"):
        fit_groups(long, "id", "SE", predict_at=[[1.0, 2.0]], amortizer=amz)
    assert len(fit_groups(long.iloc[:0], "id", "SE", amortizer=amz)) == 0


def test_non_numeric_group_fails_alone(amz: Amortizer, long: pd.DataFrame) -> None:
    df = long.astype({"y": object})
    df.loc[df["id"] == "c", "y"] = "x"
    out = fit_groups(df, "id", "SE", amortizer=amz)
    assert out.set_index("id")["error"]["c"].startswith("DataError")
    assert out.set_index("id")["error"][["a", "b"]].isna().all()


def test_without_pandas(monkeypatch: pytest.MonkeyPatch, amz: Amortizer) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingExtraError, match=r"fit_groups needs pandas: pip install"):
        fit_groups(None, "id", "SE", amortizer=amz)  # type: ignore[arg-type]


def test_read_table(tmp_path) -> None:
    from amorgp.amortizer.frontends.io import read_table
    from amorgp.core.errors import DataError

    path = tmp_path / "semi.csv"
    path.write_bytes("\ufeffid;t;y\na;1.5;2\na;2.5;3\n".encode())
    df = read_table(path)
    assert list(df.columns) == ["id", "t", "y"]
    assert df["t"].tolist() == [1.5, 2.5]
    pq = tmp_path / "t.parquet"
    df.to_parquet(pq)
    assert read_table(pq).equals(df)
    with pytest.raises(DataError, match="no such file"):
        read_table(tmp_path / "none.csv")
    (tmp_path / "empty.csv").write_text("\n\n")
    with pytest.raises(DataError, match="is empty"):
        read_table(tmp_path / "empty.csv")


# -- checks before any work ------------------------------------------------------------------
def _small() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    t = rng.uniform(0, 5, 24)
    y = np.sin(2 * t) + 0.1 * rng.standard_normal(24)
    return pd.DataFrame({"id": ["a"] * 12 + ["b"] * 12, "t": t, "y": y})


def test_predict_at_labels_are_distinct_and_repeats_refused(amz: Amortizer) -> None:
    """``%g`` labels made 1000001 and 1000004 one column (``mean@1e+06``)."""
    points = [1000001.0, 1000004.0, 0.1, 1e-300]
    out = fit_groups(_small(), "id", "SE", amortizer=amz, predict_at=points)
    labels = ["1000001", "1000004", "0.1", "1e-300"]
    assert [c for c in out.columns if c.startswith("mean@")] == [f"mean@{x}" for x in labels]
    ref = amz.infer(_small()[lambda f: f["id"] == "a"][["t"]].to_numpy(),
                    _small()[lambda f: f["id"] == "a"]["y"].to_numpy(), "SE")  # fmt: skip
    mean, _ = ref.predict(np.array(points)[:, None])
    np.testing.assert_allclose(out.loc[0, [f"mean@{x}" for x in labels]].to_numpy(float), mean,
                               rtol=1e-4)  # fmt: skip
    two = fit_groups(_small().assign(u=1.0), "id", "SE", amortizer=amz, predict_at=[[0.5, 2.0]])
    assert "sd@0.5;2" in two.columns
    with pytest.raises(OptionError, match=r"predict_at repeats the point 1000001$"):
        fit_groups(_small(), "id", "SE", amortizer=amz, predict_at=[1000001.0, 1000001])


@pytest.mark.parametrize("name", ["kernel", "noise", "n_points", "error", "SE@0[0].variance"])
def test_group_column_named_like_a_result_column_is_refused(amz: Amortizer, name: str) -> None:
    df = _small().rename(columns={"id": name})
    with pytest.raises(OptionError, match=f"the group column '{re.escape(name)}' has the name"):
        fit_groups(df, name, "SE", amortizer=amz)


def test_predict_label_clash_is_refused(amz: Amortizer) -> None:
    df = _small().rename(columns={"id": "mean@6"})
    with pytest.raises(OptionError, match="the group column 'mean@6'"):
        fit_groups(df, "mean@6", "SE", amortizer=amz, predict_at=[6.0])


@pytest.mark.parametrize(
    ("kernels", "words"),
    [
        (["SE", "FOO"], "unknown kernel 'FOO'"),
        (["SE@3"], "dimension index 3 out of range"),
        ([3], "a kernel is an expression"),
    ],
)
def test_kernels_checked_once_before_any_fit(
    amz: Amortizer, kernels: list, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``["SE", "FOO"]`` used to fail every group, SE's results lost."""
    from amorgp.amortizer.frontends import many

    def no_fit(*a, **k):
        raise AssertionError("fitted before the checks")

    monkeypatch.setattr(many, "iter_datasets", no_fit)
    with pytest.raises(OptionError, match=re.escape(words)):
        fit_groups(_small(), "id", kernels, amortizer=amz)
    with pytest.raises(OptionError, match="a hyperparameter of none of the kernels"):
        fit_groups(_small(), "id", "SE", amortizer=amz, fixed={(0, 1, "lengthscale"): 1.0})


def test_bad_arguments_are_one_line_errors(amz: Amortizer) -> None:
    with pytest.raises(OptionError, match=r"^df must be a pandas DataFrame, got list$"):
        fit_groups([[1, 2]], "id", "SE", amortizer=amz)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=r"^by must be a column name or a list .* got 0 \(int\)$"):
        fit_groups(_small(), 0, "SE", amortizer=amz)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="by names a column twice"):
        fit_groups(_small(), ["id", "id"], "SE", amortizer=amz)
    df = _small()
    df.columns = ["id", "t", "t"]
    with pytest.raises(DataError, match="duplicate column names: \\['t'\\]"):
        fit_groups(df, "id", "SE", amortizer=amz)
