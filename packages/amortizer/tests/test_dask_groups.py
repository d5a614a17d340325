"""The grouped fit on a Dask cluster (LocalCluster of 2 workers, in-process, loopback)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from amorgp.amortizer.api import Amortizer  # noqa: E402
from amorgp.amortizer.frontends import dask_groups  # noqa: E402
from amorgp.amortizer.frontends.dask_groups import fit_groups_dask, worker_amortizer  # noqa: E402
from amorgp.amortizer.frontends.tables import fit_groups  # noqa: E402
from amorgp.core.errors import DataError, OptionError  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def long() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    parts = []
    for g in range(8):
        n = 18 if g % 3 else 12
        t = np.sort(rng.uniform(0, 5, n))
        y = np.cos(3 * t) + 0.1 * rng.standard_normal(n)
        parts.append(pd.DataFrame({"key": g, "t": t, "y": y}))
    parts.append(pd.DataFrame({"key": [99, 99], "t": [0.0, 1.0], "y": [1.0, 2.0]}))
    return pd.concat(parts, ignore_index=True)


def test_dask_equals_pandas(client, long: pd.DataFrame, tiny_checkpoint: Path) -> None:
    dask_groups._CACHE.clear()
    ddf = dd.from_pandas(long, npartitions=3)  # groups split across partitions: shuffled
    got = fit_groups_dask(
        ddf,
        "key",
        ["SE + PER", "SE"],
        client=client,
        checkpoint=tiny_checkpoint,
        amortizer_options={"device": "cpu"},
        exact_network=True,
    )
    amz = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    want = fit_groups(long, "key", ["SE + PER", "SE"], amortizer=amz, exact_network=True)
    got = got.sort_values(["key", "kernel"]).reset_index(drop=True)
    want = want.sort_values(["key", "kernel"]).reset_index(drop=True)
    assert list(got.columns) == list(want.columns)
    assert got["key"].tolist() == want["key"].tolist()
    assert got["start"].tolist() == want["start"].tolist()
    assert got["error"].tolist() == want["error"].tolist()
    num = [c for c in want.columns if want[c].dtype == np.float64]
    np.testing.assert_allclose(got[num].to_numpy(), want[num].to_numpy(), rtol=1e-8)
    assert got.set_index("key")["error"].loc[99].iloc[0].startswith("DataError")
    # one network per process (the two in-process workers share it), not one per partition
    assert len(dask_groups._CACHE) == 1


def test_pandas_input_and_lazy(client, long: pd.DataFrame, tiny_checkpoint: Path) -> None:
    lazy = fit_groups_dask(
        long, "key", "SE", client=client, npartitions=2, checkpoint=tiny_checkpoint, compute=False
    )
    assert isinstance(lazy, dd.DataFrame)
    out = lazy.compute()
    assert sorted(out["key"].tolist()) == sorted(long["key"].unique().tolist())


def test_tune_malloc() -> None:
    import platform

    assert dask_groups.tune_malloc() is (platform.libc_ver()[0] == "glibc")


def test_worker_amortizer_is_cached(tiny_checkpoint: Path) -> None:
    a = worker_amortizer(tiny_checkpoint, {"device": "cpu"})
    assert worker_amortizer(tiny_checkpoint, {"device": "cpu"}) is a


def test_constraints_travel_to_the_workers(
    client, long: pd.DataFrame, tiny_checkpoint: Path
) -> None:
    """``fixed`` reaches each worker's fit: every group's noise is the fixed one, in
    original units (the group's target variance times it), as the pandas fit gives."""
    opts = {"fixed": {"noise": 0.05}, "refine": 1}
    got = fit_groups_dask(
        long, "key", "SE", client=client, npartitions=2, checkpoint=tiny_checkpoint,
        amortizer_options={"device": "cpu"}, **opts,
    )  # fmt: skip
    ok = got[got["error"].isna()].sort_values("key")
    variance = long.groupby("key")["y"].var(ddof=0)
    np.testing.assert_allclose(ok["noise"], 0.05 * variance.loc[ok["key"]].to_numpy(), rtol=1e-9)
    amz = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    want = fit_groups(long, "key", "SE", amortizer=amz, **opts).sort_values("key")
    np.testing.assert_allclose(ok["log_marginal_likelihood"],
                               want[want["error"].isna()]["log_marginal_likelihood"], rtol=1e-8)  # fmt: skip


def test_options(long: pd.DataFrame) -> None:
    with pytest.raises(OptionError, match="priors=True acts through the refinement"):
        fit_groups_dask(long, "key", "SE", client=object(), priors=True, refine=0)
    with pytest.raises(OptionError, match="low < high"):
        fit_groups_dask(long, "key", "SE", client=object(), bounds={"noise": (1.0, 0.5)})
    with pytest.raises(OptionError, match="compute=False needs a client"):
        fit_groups_dask(long, "key", "SE", compute=False)
    with pytest.raises(OptionError, match="no group column"):
        fit_groups_dask(long, "nope", "SE", client=object())
    with pytest.raises(OptionError, match="dask or pandas DataFrame"):
        fit_groups_dask([1, 2], "key", "SE", client=object())


def test_partitioned_data_split_across_partitions_is_an_error(
    client, long: pd.DataFrame, tiny_checkpoint: Path
) -> None:
    """``partitioned=True`` on data not partitioned by group used to fit each piece as its
    own group (duplicate keys, silently)."""
    ddf = dd.from_pandas(long, npartitions=2)  # rows 0-63 and 64-127: group 4 in both
    keys = ddf.map_partitions(lambda p: p[["key"]].drop_duplicates()).compute()["key"]
    assert keys.duplicated().any()  # the premise: a group in two partitions
    opts = {"client": client, "checkpoint": tiny_checkpoint, "amortizer_options": {"device": "cpu"}}
    with pytest.raises(DataError, match=r"^the group key=4 spans 2 partitions \(1 group\(s\) split\): "
                       "partitioned=True, but the data are not partitioned"):  # fmt: skip
        fit_groups_dask(ddf, "key", "SE", partitioned=True, **opts)
    whole = dd.from_pandas(long.set_index("key"), npartitions=3, sort=True).reset_index()
    out = fit_groups_dask(whole, "key", "SE", partitioned=True, **opts)  # whole groups: fine
    assert sorted(out["key"]) == sorted(long["key"].unique())


@pytest.mark.parametrize("n_workers", [0, -1, True, 1.5, "2"])
def test_n_workers_is_checked_before_any_work(long: pd.DataFrame, n_workers) -> None:
    """``n_workers=0`` used to hang (a cluster without workers)."""
    with pytest.raises(OptionError, match=r"^n_workers must be a positive integer, got "):
        fit_groups_dask(long, "key", "SE", n_workers=n_workers)


@pytest.mark.parametrize(
    ("kernels", "words"),
    [(["SE", "FOO"], "unknown kernel 'FOO'"), (["SE@3"], "dimension index 3 out of range")],
)
def test_kernels_are_checked_before_any_work(long: pd.DataFrame, kernels, words: str) -> None:
    """``["SE", "FOO"]`` used to fail every group on the workers (SE's results lost)."""
    with pytest.raises(OptionError, match=re.escape(words)):
        fit_groups_dask(long, "key", kernels, client=object())
    with pytest.raises(OptionError, match="the group column 'noise' has the name"):
        fit_groups_dask(long.rename(columns={"key": "noise"}), "noise", "SE", client=object())
