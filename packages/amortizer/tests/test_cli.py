"""Tests of the ``amorgp`` click group (train, model-info)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from amorgp.amortizer.cli import main
from amorgp.amortizer.config import PRESETS
from amorgp.amortizer.model import build_model, count_parameters

TINY_SETS = [
    "--set", "batch_size=4", "--set", "n_max=12", "--set", "max_dims=2",
    "--set", "val_size=4", "--set", "val_every=2", "--set", "num_workers=0",
]  # fmt: skip


def test_model_info_counts_match_the_model() -> None:
    result = CliRunner().invoke(main, ["model-info", "--preset", "small"])
    assert result.exit_code == 0, result.output
    n = count_parameters(build_model(PRESETS["small"].network))
    assert f"{n:,d} parameters" in result.output


def test_train_resume_phase2_and_model_info(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--no-progress",
        *TINY_SETS,
    ]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["step"] == 2
    result = runner.invoke(
        main, ["train", "--out", str(out), "--resume", "--max-steps", "3", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["step"] == 3
    result = runner.invoke(
        main,
        [
            "train",
            "--phase",
            "2",
            "--from",
            str(out / "last"),
            "--out",
            str(tmp_path / "p2"),
            "--max-steps",
            "1",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["model-info", str(tmp_path / "p2" / "last")])
    assert result.exit_code == 0, result.output
    assert '"phase": 2' in result.output


def test_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["train", "--phase", "2", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "--from" in result.output
    result = runner.invoke(
        main, ["train", "--out", str(tmp_path / "x"), "--set", "bogus=1", "--max-steps", "1"]
    )
    assert result.exit_code == 2
    assert "unknown training option" in result.output
    result = runner.invoke(
        main, ["train", "--out", str(tmp_path / "x"), "--resume", "--max-steps", "1"]
    )
    assert result.exit_code == 1
    assert "nothing to resume" in result.output
    (tmp_path / "bad").mkdir()
    result = runner.invoke(main, ["model-info", str(tmp_path / "bad")])
    assert result.exit_code == 1
    assert "not an amorgp checkpoint" in result.output


def test_help_on_every_command() -> None:
    for cmd in ([], ["train"], ["model-info"]):
        result = CliRunner().invoke(main, [*cmd, "--help"])
        assert result.exit_code == 0
        assert "Usage" in result.output
