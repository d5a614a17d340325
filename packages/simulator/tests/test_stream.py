"""Streams: reproducible, per-worker independent, no duplicates across workers."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from amorgp.simulator import SimulatedBatch, SimulatorConfig, SimulatorStream, stream_seed

CFG = SimulatorConfig(n_min=3, n_max=8, d_max=2)


def _fingerprints(batches: list[SimulatedBatch]) -> list[tuple[float, ...]]:
    # one fingerprint per dataset: its first inputs and target (continuous: no ties)
    out = []
    for b in batches:
        for i in range(len(b)):
            out.append((float(b.X[i, 0, 0]), float(b.y[i, 0]), float(b.noise[i])))
    return out


def test_dataloader_workers_do_not_duplicate_data() -> None:
    stream = SimulatorStream(CFG, batch_size=4, seed=11, batches_per_epoch=6)
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    batches = list(loader)
    assert len(batches) == 6
    assert all(isinstance(b, SimulatedBatch) for b in batches)
    prints = _fingerprints(batches)
    assert len(set(prints)) == len(prints) == 24
    # the same data as two in-process "workers" would produce, in interleaved order
    single = [list(_worker_batches(stream, w, 2)) for w in range(2)]
    expected = [single[i % 2][i // 2] for i in range(6)]
    assert _fingerprints(expected) == prints


def _worker_batches(stream: SimulatorStream, worker: int, n_workers: int):
    g = stream.generator(worker)
    for _ in range(worker, stream.batches_per_epoch or 0, n_workers):
        yield stream.simulator.sample(stream.batch_size, g)


def test_epochs_and_seeds_change_the_data_and_runs_repeat() -> None:
    stream = SimulatorStream(CFG, batch_size=3, seed=5, batches_per_epoch=2)
    first = _fingerprints(list(stream))
    again = _fingerprints(list(stream))
    stream.set_epoch(1)
    second = _fingerprints(list(stream))
    other = _fingerprints(list(SimulatorStream(CFG, batch_size=3, seed=6, batches_per_epoch=2)))
    assert first == again
    assert not set(first) & set(second)
    assert not set(first) & set(other)


def test_infinite_stream_keeps_going_and_has_no_length() -> None:
    stream = SimulatorStream(CFG, batch_size=2, seed=0)
    it = iter(stream)
    batches = [next(it) for _ in range(5)]
    assert len(set(_fingerprints(batches))) == 10
    with pytest.raises(TypeError):
        len(stream)
    assert len(SimulatorStream(CFG, batch_size=2, seed=0, batches_per_epoch=3)) == 3


def test_stream_seed_is_injective_on_a_grid_and_validated() -> None:
    seeds = {stream_seed(s, e, w) for s in range(4) for e in range(4) for w in range(4)}
    assert len(seeds) == 64
    assert all(0 <= s < 2**63 for s in seeds)
    with pytest.raises(ValueError, match="worker"):
        stream_seed(0, 0, -1)
    with pytest.raises(ValueError, match="batch_size"):
        SimulatorStream(CFG, batch_size=0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        SimulatorStream(CFG, batch_size=2, seed=-4)


def test_pin_memory_and_to_keep_the_batch() -> None:
    batch = next(iter(SimulatorStream(CFG, batch_size=2, seed=3)))
    moved = batch.to("cpu")
    for name, value in batch.tensors().items():
        assert torch.equal(value, moved.tensors()[name])
