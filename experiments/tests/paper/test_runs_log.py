"""``runs.jsonl`` of the paper runner survives a run killed mid-append."""

from __future__ import annotations

from pathlib import Path

import pytest
from amorgp_experiments.paper.runner import log_run, read_runs


def test_a_torn_runs_line_is_cut_off_before_the_next_run(tmp_path: Path) -> None:
    log_run(tmp_path, {"cells": 1})
    with (tmp_path / "runs.jsonl").open("a") as fh:
        fh.write('{"date": "2026-')  # killed mid-append
    with pytest.warns(UserWarning, match="dropped a torn last line"):
        log_run(tmp_path, {"cells": 2})
    runs = read_runs(tmp_path)
    assert [r["cells"] for r in runs] == [1, 2]
    assert all(set(r) == {"date", "cells"} for r in runs)
    (tmp_path / "runs.jsonl").write_text('{"cells": 1}\ngarbage\n{"cells": 3}\n')
    with pytest.warns(UserWarning, match=r"skipped 1 corrupted line\(s\)"):
        assert [r["cells"] for r in read_runs(tmp_path)] == [1, 3]
