"""Sharding of the real-data cells (``amorgp benchmark paper --jobs``)."""

from __future__ import annotations

import dataclasses

import pytest
from amorgp_experiments.paper import PaperConfig
from amorgp_experiments.paper.cache import CellCache
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.fig11 import METHODS as FIG11_METHODS
from amorgp_experiments.paper.parallel import prefetch_real_cells, real_shards
from amorgp_experiments.paper.real import kernel_templates, real_cells


def test_shards_cover_fig3_and_fig11_methods_once_each() -> None:
    config = PaperConfig.full()
    shards = real_shards(config)
    expected = {
        (d, s, m) for d in config.datasets for s in range(config.splits) for m in config.methods
    }
    assert set(shards) == expected
    assert len(shards) == len(expected)
    # the most expensive first: multi-start Type-2 ML on concrete; amortized last
    assert shards[0] == ("concrete", 0, "gp-ml-multistart")
    assert shards[-1][2] == "amortized"


def test_shards_of_fig11_alone_and_of_other_experiments() -> None:
    only11 = dataclasses.replace(PaperConfig.full(), experiments=("fig11",), datasets=("yacht",))
    shards11 = real_shards(only11)
    assert sorted({m for _, _, m in shards11}) == sorted(FIG11_METHODS)
    assert len(shards11) == len(FIG11_METHODS) * only11.splits
    other = dataclasses.replace(PaperConfig.full(), experiments=("fig2b", "table1"))
    assert real_shards(other) == []


def test_one_job_or_no_shards_runs_nothing(tmp_path) -> None:
    config = dataclasses.replace(PaperConfig.quick_config(), experiments=("fig2b",))
    assert prefetch_real_cells(config, tmp_path, jobs=4) == 0
    assert prefetch_real_cells(PaperConfig.quick_config(), tmp_path, jobs=1) == 0
    assert not (tmp_path / "cells").exists()


def test_a_split_shard_computes_that_split_only_and_equals_a_full_run(
    tmp_path, tiny_checkpoint
) -> None:
    """A (dataset, split, method) shard's cells are those of a sequential run of all splits."""
    config = PaperConfig(
        experiments=("fig3",),
        datasets=("yacht",),
        splits=2,
        kernel_ids=(0, 5),
        methods=("amortized",),
        model=str(tiny_checkpoint),
    )
    kernels = kernel_templates(config.kernel_ids)
    full_dir, shard_dir = tmp_path / "full", tmp_path / "shard"
    ctx = RunContext(config, full_dir, CellCache(full_dir), progress=False)
    full = real_cells(ctx, ["amortized"], kernels, "fig3")
    shard_cache = CellCache(shard_dir)
    ctx = RunContext(config, shard_dir, shard_cache, progress=False)
    shard = real_cells(ctx, ["amortized"], kernels, "fig3", splits=[1])
    assert {r["split"] for r in full} == {0, 1}
    assert {r["split"] for r in shard} == {1}
    assert shard_cache.computed == len(kernels)  # split 0 was never computed
    by_kernel = {r["kernel"]: r for r in full if r["split"] == 1}
    assert len(shard) == len(by_kernel) == len(kernels)
    for r in shard:
        assert r["rmse"] == pytest.approx(by_kernel[r["kernel"]]["rmse"], rel=1e-6)
        assert r["nll"] == pytest.approx(by_kernel[r["kernel"]]["nll"], rel=1e-6)
