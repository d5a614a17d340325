"""Amortized method names of the paper run: calibration and refinement."""

from __future__ import annotations

from pathlib import Path

import pytest
from amorgp_experiments.paper import PaperConfig
from amorgp_experiments.paper.cache import CellCache
from amorgp_experiments.paper.config import amortized_settings, is_method
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.real import method_config

from amorgp.core.errors import OptionError


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("amortized", (False, 0)),
        ("amortized+calibrate", (True, 0)),
        ("amortized+refine5", (False, 5)),
        ("amortized+calibrate+refine20", (True, 20)),
        ("amortized+calibrate@small-d4-v1", (True, 0)),
    ],
)
def test_amortized_names_parse(name: str, want: tuple[bool, int]) -> None:
    assert is_method(name)
    assert amortized_settings(name) == want


@pytest.mark.parametrize(
    "name", ["amortized+refine5+calibrate", "amortized+calibrated", "amortized+", "gp-ml@x"]
)
def test_malformed_names_are_refused(name: str) -> None:
    assert not is_method(name)
    with pytest.raises(OptionError, match="unknown method"):
        PaperConfig(methods=(name,))


def test_calibrated_cells_are_their_own(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The calibrated row never reuses the plain row's cached cells (distinct config)."""
    config = PaperConfig(experiments=("fig3",), model=str(tiny_checkpoint))
    ctx = RunContext(config, tmp_path, CellCache(tmp_path), progress=False)
    plain = method_config(ctx, "amortized")
    calibrated = method_config(ctx, "amortized+calibrate")
    assert plain is not None
    assert calibrated is not None
    assert plain != calibrated
    assert method_config(ctx, "amortized+calibrate+refine5") not in (plain, calibrated)
