"""Bundled models by name: the default, earlier defaults, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.amortizer import Amortizer, pretrained_names, resolve_checkpoint
from amorgp.amortizer.networks.bundled import PRETRAINED_DIR, PRETRAINED_ROOT
from amorgp.core.errors import CheckpointError


def test_every_bundled_name_loads_and_default_is_the_default() -> None:
    names = pretrained_names()
    assert "default" in names
    assert resolve_checkpoint(None) == PRETRAINED_DIR
    for name in names:
        assert resolve_checkpoint(name) == PRETRAINED_ROOT / name
        amz = Amortizer.from_pretrained(name, device="cpu")
        assert amz.model is not None


def test_a_path_wins_and_unknown_names_list_the_bundled_ones(tmp_path: Path) -> None:
    assert resolve_checkpoint(str(PRETRAINED_DIR)) == PRETRAINED_DIR
    with pytest.raises(CheckpointError, match=r"name of a bundled model.*default"):
        resolve_checkpoint("no-such-model")
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        Amortizer.from_pretrained(tmp_path / "missing")


def test_ship_model_copies_weights_and_records_provenance(tmp_path: Path) -> None:
    import json

    from amorgp.amortizer.networks.bundled import ship_model
    from amorgp.amortizer.networks.checkpoint import load_checkpoint

    target = ship_model(
        PRETRAINED_DIR,
        "shipped",
        provenance="test copy",
        reproduce="amorgp train ...",
        hardware="none",
        extra={"note": 1},
        root=tmp_path,
    )
    assert (target / "model.safetensors").read_bytes() == (
        PRETRAINED_DIR / "model.safetensors"
    ).read_bytes()
    meta = json.loads((target / "checkpoint.json").read_text())
    assert (meta["provenance"], meta["reproduce"], meta["note"]) == (
        "test copy",
        "amorgp train ...",
        1,
    )
    assert load_checkpoint(target).network == load_checkpoint(PRETRAINED_DIR).network
    assert not list(tmp_path.glob(".shipped*"))  # no temporary left


def test_ship_model_copies_every_shard_of_a_sharded_checkpoint(tmp_path: Path) -> None:
    """A run checkpoint whose weights (and optimiser state) are sharded ships as its
    model shards only, and loads to the same weights."""
    import json

    import torch

    from amorgp.amortizer.networks.bundled import ship_model
    from amorgp.amortizer.networks.checkpoint import load_checkpoint, save_checkpoint

    src = load_checkpoint(PRETRAINED_DIR)
    opt = torch.optim.RAdam(src.model.parameters())
    for p in src.model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    sharded = save_checkpoint(
        tmp_path / "run", src.model, src.network, optimizer=opt, max_shard_bytes=2**19
    )
    target = ship_model(
        sharded, "from-run", provenance="p", reproduce="r", hardware="h", root=tmp_path
    )
    meta = json.loads((target / "checkpoint.json").read_text())
    shards = meta["shards"]["model"]
    assert len(shards) > 1
    assert "optimizer" not in meta["shards"]
    assert sorted(p.name for p in target.glob("*.safetensors")) == sorted(shards)
    assert set(meta["sha256"]) == set(shards)
    shipped = load_checkpoint(target)
    for a, b in zip(shipped.model.state_dict().values(), src.model.state_dict().values()):
        assert torch.equal(a, b)
