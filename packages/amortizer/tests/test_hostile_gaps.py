"""Regression tests of the hostile-input gaps met through the library: edited checkpoint
shard names, complex data, a training run refused while starting (the command-line ones
are in ``packages/cli/tests/test_hostile_gaps.py``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.testing import edited_checkpoint
from amorgp.core.errors import CheckpointError, DataError


@pytest.mark.parametrize(
    "name", ["../escaped.safetensors", "/tmp/abs.safetensors", "sub/x.safetensors", ".."]
)
def test_shard_names_must_be_plain_file_names(
    tmp_path: Path, tiny_checkpoint: Path, name: str
) -> None:
    from amorgp.amortizer.networks.bundled import ship_model

    ckpt = edited_checkpoint(tiny_checkpoint, tmp_path / "ck", {"shards": {"model": [name]}})
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    meta["sha256"] = {name: next(iter(meta["sha256"].values()))}
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))
    for verify in (True, False):
        with pytest.raises(CheckpointError, match="not a plain file name"):
            load_checkpoint(ckpt, verify=verify)
    root = tmp_path / "root" / "pretrained"
    root.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="not a plain file name"):
        ship_model(ckpt, "x", provenance="p", reproduce="r", hardware="h", root=root)
    assert sorted(p.name for p in (tmp_path / "root").rglob("*")) == ["pretrained"]


def test_complex_inputs_are_refused_by_the_api(tiny_checkpoint: Path) -> None:
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    X = np.linspace(0, 1, 12)[:, None] * (1 + 1j)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match="complex"):
            amz.infer(X, np.sin(np.arange(12.0)), "SE")
