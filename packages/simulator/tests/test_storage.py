"""Fixed sets on disk: safetensors + JSON index + config, atomic, verified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from amorgp.simulator import (
    Simulator,
    SimulatorConfig,
    generate_fixed_set,
    read_fixed_set,
    write_fixed_set,
)

CFG = SimulatorConfig(n_min=3, n_max=9, n_test=2, d_max=3)


def _assert_same(a, b) -> None:
    ta, tb = a.tensors(), b.tensors()
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].dtype == tb[name].dtype, name
        assert torch.equal(ta[name], tb[name]), name
    assert a.counters() == b.counters()


def test_round_trip(tmp_path: Path, gen: torch.Generator) -> None:
    sim = Simulator(CFG)
    batches = [sim.sample(4, gen), sim.sample(3, gen)]
    path = write_fixed_set(tmp_path / "val", batches, CFG, metadata={"seed": 1})
    assert sorted(p.name for p in path.iterdir()) == [
        "batches.safetensors",
        "config.json",
        "index.json",
    ]
    fixed = read_fixed_set(path)
    assert fixed.config == CFG
    assert fixed.metadata == {"seed": 1}
    assert len(fixed) == 2
    assert fixed.n_datasets == 7
    for a, b in zip(batches, fixed):
        _assert_same(a, b)
    # plain safetensors, readable without this package
    raw = load_file(str(path / "batches.safetensors"))
    assert torch.equal(raw["00001/X"], batches[1].X)


def test_generate_is_reproducible(tmp_path: Path) -> None:
    a = generate_fixed_set(tmp_path / "a", CFG, n_batches=2, batch_size=3, seed=9)
    b = generate_fixed_set(tmp_path / "b", CFG, n_batches=2, batch_size=3, seed=9)
    for x, y in zip(read_fixed_set(tmp_path / "a"), b):
        _assert_same(x, y)
    for x, y in zip(a, b):
        _assert_same(x, y)


def test_refuses_to_overwrite_unless_asked(tmp_path: Path, gen: torch.Generator) -> None:
    sim = Simulator(CFG)
    first = [sim.sample(2, gen)]
    write_fixed_set(tmp_path / "s", first, CFG)
    second = [sim.sample(2, gen)]
    with pytest.raises(ValueError, match="exists"):
        write_fixed_set(tmp_path / "s", second, CFG)
    write_fixed_set(tmp_path / "s", second, CFG, overwrite=True)
    _assert_same(read_fixed_set(tmp_path / "s")[0], second[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no temporary leftovers


def test_corruption_and_missing_files_are_detected(tmp_path: Path, gen: torch.Generator) -> None:
    path = write_fixed_set(tmp_path / "s", [Simulator(CFG).sample(2, gen)], CFG)
    blob = (path / "batches.safetensors").read_bytes()
    (path / "batches.safetensors").write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(ValueError, match="checksum"):
        read_fixed_set(path)
    (path / "batches.safetensors").write_bytes(blob)
    index = json.loads((path / "index.json").read_text())
    (path / "index.json").write_text(json.dumps({**index, "format": "v0"}))
    with pytest.raises(ValueError, match="unknown format"):
        read_fixed_set(path)
    (path / "config.json").unlink()
    with pytest.raises(ValueError, match=r"no config\.json"):
        read_fixed_set(path)


def test_bad_writes(tmp_path: Path, gen: torch.Generator) -> None:
    with pytest.raises(ValueError, match="no batches"):
        write_fixed_set(tmp_path / "x", [], CFG)
    batch = Simulator(CFG).sample(2, gen)
    with pytest.raises(ValueError, match="JSON"):
        write_fixed_set(tmp_path / "x", [batch], CFG, metadata={"f": object()})
    with pytest.raises(ValueError, match="SimulatedBatch"):
        write_fixed_set(tmp_path / "x", [batch.tensors()], CFG)  # type: ignore[list-item]
    assert not (tmp_path / "x").exists()
