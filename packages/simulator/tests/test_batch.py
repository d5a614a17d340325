"""SimulatedBatch: tensor round trip, selection, errors, the padded-batch base."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from amorgp.lazy_kernels import PaddedBatch
from amorgp.simulator import SimulatedBatch, Simulator, SimulatorConfig

CFG = SimulatorConfig(n_min=3, n_max=7, n_test=1, d_max=2)


def test_from_tensors_round_trip_and_errors(gen: torch.Generator) -> None:
    batch = Simulator(CFG).sample(5, gen)
    back = SimulatedBatch.from_tensors(batch.tensors(), batch.counters(), vocab=CFG.vocabulary)
    for name, value in batch.tensors().items():
        assert torch.equal(value, back.tensors()[name])
    assert back.counters() == batch.counters()
    tensors = batch.tensors()
    del tensors["noise"]
    with pytest.raises(ValueError, match="missing"):
        SimulatedBatch.from_tensors(tensors, vocab=CFG.vocabulary)
    with pytest.raises(ValueError, match="unknown"):
        SimulatedBatch.from_tensors(
            {**batch.tensors(), "extra": torch.zeros(1)}, vocab=CFG.vocabulary
        )


def test_select_and_sizes(gen: torch.Generator) -> None:
    batch = Simulator(CFG).sample(6, gen)
    sub = batch.select(torch.tensor([4, 1]))
    assert len(sub) == 2
    assert torch.equal(sub.X[0], batch.X[4])
    assert torch.equal(sub.n_points, batch.point_mask.sum(1)[[4, 1]])
    assert sub.n_dims.tolist() == batch.dim_mask.sum(1)[[4, 1]].tolist()
    assert sub.has_test
    assert batch.n_failed == int((~batch.valid).sum())


def test_extends_the_padded_batch(gen: torch.Generator) -> None:
    batch = Simulator(CFG).sample(6, gen)
    assert isinstance(batch, PaddedBatch)
    assert batch.validate() is batch
    assert "vocab" not in batch.tensors()
    truth = batch.truth()
    assert type(truth) is PaddedBatch
    assert torch.equal(truth.symbols, batch.true_symbols)
    truth.validate()
    shown = batch.presented()
    assert shown.params is None
    assert torch.equal(shown.symbols, batch.symbols)
    assert batch.structures() == batch.structures(CFG.vocabulary)
    pos = batch.is_positive
    assert [s for s, p in zip(batch.structures(), pos) if p] == [
        s for s, p in zip(batch.true_structures(), pos) if p
    ]


def test_to_select_repeat_keep_the_subclass(gen: torch.Generator) -> None:
    batch = Simulator(CFG).sample(4, gen)
    low = batch.to(dtype=torch.float32)
    assert isinstance(low, SimulatedBatch)
    assert low.X.dtype == torch.float32
    assert low.params.dtype == torch.float32
    assert low.symbols.dtype == torch.int64
    assert low.valid.dtype == torch.bool
    one = batch.select(-1)
    assert len(one) == 1
    assert torch.equal(one.true_symbols[0], batch.true_symbols[-1])
    assert one.counters() == {"n_gamma_rejections": 0, "n_negative_fallback": 0}
    rep = batch.repeat(2)
    assert len(rep) == 8
    assert torch.equal(rep.y[2], batch.y[1])
    assert rep.X_test is not None
    assert torch.equal(rep.X_test[3], batch.X_test[1])


def test_validate_checks_the_ground_truth_against_the_true_structure(
    gen: torch.Generator,
) -> None:
    batch = Simulator(CFG).sample(4, gen)
    used = batch.used_slots()
    bad = torch.where(used, torch.zeros_like(batch.params), batch.params)
    with pytest.raises(ValueError, match="positive in every used slot"):
        replace(batch, params=bad).validate()
    with pytest.raises(ValueError, match="shape"):
        replace(batch, params=batch.params[:, :, :1, :1]).validate()
