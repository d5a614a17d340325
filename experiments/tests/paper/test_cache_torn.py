"""A torn last line of the cell cache (a run killed mid-append) is dropped loudly and
never swallows the next cell."""

from __future__ import annotations

from pathlib import Path

import pytest
from amorgp_experiments.paper.cache import CellCache, CellKey


def _key(i: int) -> CellKey:
    return CellKey("real", "toy", 0, f"K{i}", "amortized", "cfg")


def test_the_cell_after_a_torn_line_survives_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "cells" / "real.jsonl"
    CellCache(tmp_path).put(_key(0), {"v": 0.0})
    with path.open("a") as f:
        f.write('{"key": ["real", "toy", 0, "K1", "amorti')  # killed mid-append
    rerun = CellCache(tmp_path)
    with pytest.warns(UserWarning, match="dropped a torn last line"):
        values = rerun.get_many([_key(0), _key(1)], lambda missing: [{"v": 1.0}] * len(missing))
    assert values == [{"v": 0.0}, {"v": 1.0}]
    assert rerun.computed == 1
    # the third run reads every cell back: the recomputed one was not glued to the torn line
    third = CellCache(tmp_path)
    assert [third.get(_key(i)) for i in range(2)] == [{"v": 0.0}, {"v": 1.0}]
    assert path.read_text().endswith("\n")
    assert len(path.read_text().splitlines()) == 2


def test_a_read_only_reader_warns_and_leaves_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cells" / "real.jsonl"
    CellCache(tmp_path).put(_key(0), {"v": 0.0})
    with path.open("a") as f:
        f.write('{"key": ["real"')
    before = path.read_bytes()
    with pytest.warns(UserWarning, match="torn last line"):
        assert CellCache(tmp_path, read_only=True).get(_key(0)) == {"v": 0.0}
    assert path.read_bytes() == before


def test_an_unreadable_whole_line_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "cells" / "real.jsonl"
    CellCache(tmp_path).put(_key(0), {"v": 0.0})
    with path.open("a") as f:
        f.write("not json\n")
    with pytest.warns(UserWarning, match="skipped 1 unreadable line"):
        assert CellCache(tmp_path).get(_key(0)) == {"v": 0.0}
