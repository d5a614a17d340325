"""The cell cache: round trip, resume without recomputation, torn lines, read-only mode,
merging another run's cells."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from amorgp_experiments.paper.cache import CellCache, CellKey, config_hash


def _keys(n: int) -> list[CellKey]:
    return [CellKey("real", "toy", 0, f"K{i}", "amortized", "abc") for i in range(n)]


def test_round_trip_and_resume_computes_only_missing(tmp_path: Path) -> None:
    calls: list[list[int]] = []

    def compute(missing: list[int]) -> list[dict[str, float]]:
        calls.append(list(missing))
        return [{"rmse": 0.1 * i, "nll": math.nan} for i in missing]

    cache = CellCache(tmp_path)
    first = cache.get_many(_keys(2), compute)
    assert calls == [[0, 1]]
    assert cache.computed == 2
    assert first[1] == {"rmse": 0.1, "nll": None}  # NaN stored as null (strict JSON)

    again = CellCache(tmp_path)  # a new run: everything from disk, one more key missing
    values = again.get_many(_keys(3), compute)
    assert calls == [[0, 1], [2]]
    assert again.computed == 1
    assert values[:2] == first
    assert CellCache(tmp_path).get_many(_keys(3), compute) == values
    assert len(calls) == 2


def test_a_torn_last_line_is_recomputed(tmp_path: Path) -> None:
    cache = CellCache(tmp_path)
    cache.get_many(_keys(1), lambda m: [{"v": 1.0}])
    with (tmp_path / "cells" / "real.jsonl").open("a") as f:
        f.write('{"key": ["real", "toy", 0, "K1", "amorti')  # interrupted write
    again = CellCache(tmp_path)
    assert again.get(_keys(2)[0]) == {"v": 1.0}
    assert again.get(_keys(2)[1]) is None


def test_read_only_never_computes(tmp_path: Path) -> None:
    def boom(missing: list[int]) -> list[dict[str, float]]:
        raise AssertionError("computed in read-only mode")

    CellCache(tmp_path).get_many(_keys(1), lambda m: [{"v": 2.0}])
    ro = CellCache(tmp_path, read_only=True)
    assert ro.get_many(_keys(2), boom) == [{"v": 2.0}, None]
    assert ro.computed == 0


def test_cells_lists_one_experiment_latest_value_wins(tmp_path: Path) -> None:
    cache = CellCache(tmp_path)
    key = _keys(1)[0]
    cache.put(key, {"v": 1.0})
    cache.put(key, {"v": 3.0})
    cache.put(CellKey("fig4", "toy", 0, "-", "bma", "x"), {"v": 0.0})
    assert CellCache(tmp_path).cells("real") == [(key, {"v": 3.0})]


def test_merge_adds_only_missing_cells_and_is_idempotent(tmp_path: Path) -> None:
    here, there = CellCache(tmp_path / "here"), CellCache(tmp_path / "there")
    a, b, c = _keys(3)
    fig4 = CellKey("fig4", "toy", 0, "-", "bma", "x")
    here.put(a, {"v": 1.0})
    there.put(a, {"v": 9.0})  # the same cell computed elsewhere: ours is kept
    there.put(b, {"v": 2.0})
    there.put(fig4, {"v": 4.0})
    with (tmp_path / "there" / "cells" / "real.jsonl").open("a") as f:
        f.write('{"key": ["real", "toy", 0, "K2", "amorti')  # a torn line is skipped
    assert here.merge(tmp_path / "there") == 2
    assert here.merge(tmp_path / "there") == 0
    assert here.merge(tmp_path / "here") == 0
    fresh = CellCache(tmp_path / "here")  # what was merged is on disk
    assert [fresh.get(k) for k in (a, b, c, fig4)] == [{"v": 1.0}, {"v": 2.0}, None, {"v": 4.0}]
    assert len((tmp_path / "here" / "cells" / "real.jsonl").read_text().splitlines()) == 2


def test_merge_names_a_folder_without_cells(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no cells/ folder under"):
        CellCache(tmp_path / "here").merge(tmp_path)


def test_config_hash_is_stable_and_order_free() -> None:
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})
    assert len(config_hash({})) == 12
