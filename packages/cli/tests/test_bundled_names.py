"""The command line's ``--checkpoint`` takes every name the amortizer can resolve: the
wheel's bundled models and the repository's ``models/`` folder."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from amorgp.amortizer.networks.bundled import (
    PRETRAINED_ROOT,
    pretrained_names,
    repository_model_names,
)
from amorgp.cli import main

AIRLINE = PRETRAINED_ROOT.parent / "data" / "airline.csv"


def test_cli_checkpoint_accepts_every_name_its_error_lists(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["infer", str(AIRLINE), "--kernel", "SE", "--checkpoint", "nope"])
    assert bad.exit_code == 1
    listed = bad.output.split("(", 1)[1]
    for name in [*pretrained_names(), *repository_model_names()]:
        assert name in listed
    for name in ("ahgp-se-ard-d4-v1", "small-d8-c640k"):
        ok = runner.invoke(
            main, ["infer", str(AIRLINE), "--kernel", "SE", "--checkpoint", name, "--json"]
        )
        assert ok.exit_code == 0, ok.output
