"""The DIWP benchmark's quick mode (CI's smoke run of the UCI protocol), on yacht."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from amorgp.diff_linalg.testing import torch_settings


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with torch_settings(num_threads=1):
        yield


def test_quick_uci_protocol_on_yacht(
    tmp_path: Path, benchmark_script: Callable[[str], ModuleType]
) -> None:
    bench = benchmark_script("bench_diwp")
    out = tmp_path / "diwp.md"
    # two worker processes share the 6 cells (2 splits x 3 methods) and the cache
    bench.main(["--quick", "--datasets", "yacht", "--out", str(out), "--jobs", "2"])
    text = out.read_text()
    rows = {
        m: line
        for line in text.splitlines()
        for m in ("diwp", "gp-ml-lbfgs", "svgp")
        if f"| yacht | {m} |" in line
    }
    assert set(rows) == {"diwp", "gp-ml-lbfgs", "svgp"}
    loglik = {m: float(re.search(r"\| (-?\d+\.\d+) ±", line).group(1)) for m, line in rows.items()}  # type: ignore[union-attr]
    # every method is far better than the constant predictor (test log-lik about -4 on yacht)
    assert all(v > -3.0 for v in loglik.values()), loglik
    assert "| yacht | diwp | 2 |" in text  # the number of splits of each row
    # the cell cache: one line per (split, method); a rerun computes nothing and renders
    # the same table
    cache = tmp_path / "diwp-cells" / "cells.jsonl"
    lines = cache.read_text().splitlines()
    assert len(lines) == 6
    keys = sorted((c["split"], c["method"]) for c in map(json.loads, lines))
    assert keys == sorted((k, m) for k in (0, 1) for m in ("diwp", "gp-ml-lbfgs", "svgp"))
    bench.main(["--quick", "--datasets", "yacht", "--out", str(out)])
    assert cache.read_text().splitlines() == lines
    assert out.read_text() == text
