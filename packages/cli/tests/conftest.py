"""Shared fixtures: a small random-weight checkpoint for fast inference tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from amorgp.amortizer import testing
from amorgp.cli import main


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`amorgp.amortizer.testing.tiny_checkpoint`, one a session."""
    return testing.tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def data_1d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CSV ``time,value``: 30 noisy sine points (for the command-line tests)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 10, 30))
    y = np.sin(x) + 0.1 * rng.normal(size=30) + 5
    path = tmp_path_factory.mktemp("d") / "one.csv"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="time,value", comments="")
    return path


@pytest.fixture(scope="session")
def data_2d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CSV ``target,a,b``: 25 points of a smooth 2-D function (for the command-line tests)."""
    import numpy as np

    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (25, 2))
    y = X[:, 0] * 3 + np.cos(4 * X[:, 1])
    path = tmp_path_factory.mktemp("d") / "two.csv"
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", header="target,a,b", comments="")
    return path


@pytest.fixture
def refused_set(tmp_path: Path) -> Callable[[str, str], None]:
    """``check(item, words)``: ``amorgp train --set ITEM`` is a usage error that names
    ``--set`` and says ``words``, with no traceback and no run folder created."""

    def check(item: str, words: str) -> None:
        out = tmp_path / "run"
        args = ["train", "--preset", "tiny", "--out", str(out), "--max-steps", "1", "--set", item]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, res.output
        assert words in res.output
        assert "--set" in res.output
        assert "Traceback" not in res.output
        assert not out.exists()  # no .lock, no validation/

    return check
