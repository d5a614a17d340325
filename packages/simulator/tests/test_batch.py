"""SimulatedBatch: tensor round trip, selection, errors."""

from __future__ import annotations

import pytest
import torch

from amorgp.simulator import SimulatedBatch, Simulator, SimulatorConfig

CFG = SimulatorConfig(n_min=3, n_max=7, n_test=1, d_max=2)


def test_from_tensors_round_trip_and_errors(gen: torch.Generator) -> None:
    batch = Simulator(CFG).sample(5, gen)
    back = SimulatedBatch.from_tensors(batch.tensors(), batch.counters())
    for name, value in batch.tensors().items():
        assert torch.equal(value, back.tensors()[name])
    assert back.counters() == batch.counters()
    tensors = batch.tensors()
    del tensors["noise"]
    with pytest.raises(ValueError, match="missing"):
        SimulatedBatch.from_tensors(tensors)
    with pytest.raises(ValueError, match="unknown"):
        SimulatedBatch.from_tensors({**batch.tensors(), "extra": torch.zeros(1)})


def test_select_and_sizes(gen: torch.Generator) -> None:
    batch = Simulator(CFG).sample(6, gen)
    sub = batch.select(torch.tensor([4, 1]))
    assert len(sub) == 2
    assert torch.equal(sub.X[0], batch.X[4])
    assert torch.equal(sub.n_points, batch.point_mask.sum(1)[[4, 1]])
    assert sub.n_dims.tolist() == batch.dim_mask.sum(1)[[4, 1]].tolist()
    assert sub.has_test
    assert batch.n_failed == int((~batch.valid).sum())
