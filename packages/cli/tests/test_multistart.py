"""``amorgp infer --starts``: the command's multi-start is the library's
(:mod:`amorgp.amortizer.stages.multistart`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer import Amortizer
from amorgp.amortizer.testing import planted_period_1d


@pytest.fixture(scope="module")
def amz() -> Amortizer:
    return Amortizer.from_pretrained(device="cpu")


def test_cli_starts_option(tmp_path: Path, amz: Amortizer) -> None:
    """``amorgp infer --starts`` is ``infer_many``'s ``starts``; ``--starts 0`` is refused."""
    from click.testing import CliRunner

    from amorgp.cli import main

    x, y = planted_period_1d(n=80, seed=12)
    path = tmp_path / "p.csv"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="x,y", comments="")
    for starts, want in (
        (None, amz.infer(x, y, "SE + PER")),
        (1, amz.infer(x, y, "SE + PER", starts=1)),
    ):
        args = ["infer", str(path), "-k", "SE + PER", "--json", "--device", "cpu"]
        res = CliRunner().invoke(main, args + ([] if starts is None else ["--starts", str(starts)]))
        assert res.exit_code == 0, res.output
        (got,) = json.loads(res.stdout)["results"]
        assert got["start"] == want.start
        assert got["log_marginal_likelihood"] == pytest.approx(want.log_marginal_likelihood)
    bad = CliRunner().invoke(main, ["infer", str(path), "-k", "SE + PER", "--starts", "0"])
    assert bad.exit_code == 2
