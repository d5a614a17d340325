"""Regression tests of the hostile-input gaps met through the command line: deep kernels,
a full disk during a checkpoint, unbounded training options, edited checkpoint
architectures."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors import SafetensorError

import amorgp.amortizer.networks.checkpoint as checkpoint_module
from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.testing import edited_checkpoint
from amorgp.cli import main
from amorgp.core.errors import CheckpointError

TINY_SETS = [
    "--set", "batch_size=4", "--set", "n_max=12", "--set", "max_dims=2",
    "--set", "val_size=4", "--set", "val_every=2", "--set", "num_workers=0",
]  # fmt: skip


def test_deep_parentheses_are_a_usage_error(data_1d: Path, tiny_checkpoint: Path) -> None:
    kernel = "(" * 400 + "SE" + ")" * 400
    res = CliRunner().invoke(
        main, ["infer", str(data_1d), "-k", kernel, "--checkpoint", str(tiny_checkpoint)]
    )
    assert res.exit_code == 2, res.output
    assert "nested deeper than" in res.output
    assert "Traceback" not in res.output
    assert not isinstance(res.exception, RecursionError)


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
            'space left on device" })'
        ),
    ],
)
def test_a_full_disk_during_a_checkpoint_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    out = tmp_path / "run"
    base = ["train", "--out", str(out), "--no-progress"]
    res = CliRunner().invoke(main, [*base, "--preset", "tiny", "--max-steps", "1", *TINY_SETS])
    assert res.exit_code == 0, res.output

    def full_disk(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr(checkpoint_module, "save_file", full_disk)
    res = CliRunner().invoke(main, [*base, "--resume", "--max-steps", "2"])
    assert res.exit_code == 1, res.output
    assert "no space left on device" in res.output.lower()
    assert "Traceback" not in res.output
    assert not isinstance(res.exception, SafetensorError | OSError)
    monkeypatch.undo()
    # nothing is lost: the earlier checkpoint loads, and no partial copy is left
    assert json.loads((out / "last" / "checkpoint.json").read_text())["progress"]["step"] == 1
    load_checkpoint(out / "last")
    assert not [p.name for p in out.iterdir() if p.name.startswith(".step-")]


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("batch_size=100000000", "batch_size must lie in [1, 4096]"),
        ("batch_size=99999999999999999999", "batch_size must lie in"),
        ("seed=99999999999999999999999", "seed must lie in [0, 9223372036854775807]"),
        ("n_max=10000000", "n_max must lie in"),
        ("inputs=gaussian", "inputs must be one of uniform"),
        (
            "prior=seasonal",
            "prior must be one of paper, realdata, realdata-series, realdata-irrelevant, realdata-ard",
        ),
    ],
)
def test_training_options_are_bounded_before_anything_is_created(
    refused_set: Callable[[str, str], None], item: str, words: str
) -> None:
    refused_set(item, words)


def test_set_on_top_of_from_is_validated_before_the_run_folder(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    out = tmp_path / "p2"
    stored = json.loads((tiny_checkpoint / "checkpoint.json").read_text())["train"]
    res = CliRunner().invoke(
        main,
        ["train", "--phase", "2", "--from", str(tiny_checkpoint), "--out", str(out),
         "--max-steps", "1", "--set", f"n_min={stored['n_max'] + 1}"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "exceeds n_max" in res.output
    assert not out.exists()


def test_an_oversized_architecture_is_refused_from_the_headers(
    tmp_path: Path, tiny_checkpoint: Path, data_1d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8192 is the largest width NetworkConfig admits (test_hostile_input.py: beyond it the
    # config itself is refused); within it the build is refused before it passes the
    # number of weights the headers list
    ckpt = edited_checkpoint(tiny_checkpoint, tmp_path / "huge", {"network.d_data": 8192})
    built: list[str] = []
    real_build = checkpoint_module.build_model

    def spy(network: object) -> torch.nn.Module:
        model = real_build(network)  # type: ignore[arg-type]
        built.append(str(next(model.parameters()).device))
        return model

    monkeypatch.setattr(checkpoint_module, "build_model", spy)
    with pytest.raises(CheckpointError, match=r"needs more than the [\d,]+ weights") as info:
        load_checkpoint(ckpt)
    assert "8192" in str(info.value)  # names the first tensor past the limit
    assert built == []  # refused part-way: never more memory than the stored weights
    monkeypatch.undo()
    for args in (
        ["model-info", str(ckpt)],
        ["infer", str(data_1d), "-k", "SE", "--checkpoint", str(ckpt)],
    ):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1, res.output
        assert "needs more than the" in res.output
