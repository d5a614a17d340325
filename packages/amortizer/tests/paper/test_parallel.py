"""Sharding of the real-data cells (``amorgp benchmark paper --jobs``)."""

from __future__ import annotations

import dataclasses

from amorgp.amortizer.paper import PaperConfig
from amorgp.amortizer.paper.fig11 import METHODS as FIG11_METHODS
from amorgp.amortizer.paper.parallel import prefetch_real_cells, real_shards


def test_shards_cover_fig3_and_fig11_methods_once_each() -> None:
    config = PaperConfig.full()
    shards = real_shards(config)
    expected = {(d, m) for d in config.datasets for m in config.methods}
    assert set(shards) == expected
    assert len(shards) == len(expected)
    # the most expensive first: multi-start Type-2 ML on concrete; amortized last
    assert shards[0] == ("concrete", "gp-ml-multistart")
    assert shards[-1][1] == "amortized"


def test_shards_of_fig11_alone_and_of_other_experiments() -> None:
    only11 = dataclasses.replace(PaperConfig.full(), experiments=("fig11",), datasets=("yacht",))
    assert sorted(m for _, m in real_shards(only11)) == sorted(FIG11_METHODS)
    other = dataclasses.replace(PaperConfig.full(), experiments=("fig2b", "table1"))
    assert real_shards(other) == []


def test_one_job_or_no_shards_runs_nothing(tmp_path) -> None:
    config = dataclasses.replace(PaperConfig.quick_config(), experiments=("fig2b",))
    assert prefetch_real_cells(config, tmp_path, jobs=4) == 0
    assert prefetch_real_cells(PaperConfig.quick_config(), tmp_path, jobs=1) == 0
    assert not (tmp_path / "cells").exists()
