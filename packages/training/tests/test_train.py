"""Tests of the training loop: budgets, exact resume, phase 2, AHGP, logs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.testing import TINY_TRAIN
from amorgp.simulator import Simulator
from amorgp.training.train import SE_VOCABULARY, encoder_view, simulator_config, train

NET = PRESETS["tiny"].network
TC = TINY_TRAIN


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path).model.state_dict()


def test_exact_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    straight = train(tmp_path / "a", NET, TC, max_steps=5, progress=False)
    first = train(tmp_path / "b", NET, TC, max_steps=2, progress=False)
    assert first.stopped_by == "max_steps"
    assert first.step == 2
    resumed = train(tmp_path / "b", resume=True, max_steps=5, progress=False)
    assert resumed.step == 5
    assert resumed.datasets_seen == straight.datasets_seen == 5 * TC.batch_size
    assert resumed.losses == straight.losses[2:]
    wa, wb = _weights(tmp_path / "a" / "last"), _weights(tmp_path / "b" / "last")
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=0, msg=name)


def test_run_directory_contents(tmp_path: Path) -> None:
    result = train(tmp_path / "run", NET, TC, max_datasets=12, progress=False)
    assert result.stopped_by == "max_datasets"
    assert result.step == 3
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    kinds = {r["kind"] for r in records}
    assert "validation" in kinds
    val = next(r for r in records if r["kind"] == "validation")
    for key in ("nll", "nll_true", "nll_gap", "noise_rmse_std", "n_failed"):
        assert key in val
    ckpt = load_checkpoint(tmp_path / "run" / "last")
    assert ckpt.meta["progress"]["step"] == 3
    assert ckpt.meta["train"] == TC.to_dict()
    assert ckpt.meta["vocabulary"] == NET.vocabulary.to_dict()
    assert (tmp_path / "run" / "last").is_symlink()


def test_new_run_refuses_existing_directory_and_needs_budget(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="budget"):
        train(tmp_path / "x", NET, TC)
    with pytest.raises(ValueError, match="nothing to resume"):
        train(tmp_path / "x", resume=True, max_steps=1)
    train(tmp_path / "y", NET, TC, max_steps=1, progress=False)
    with pytest.raises(ValueError, match="already holds a run"):
        train(tmp_path / "y", NET, TC, max_steps=1, progress=False)


def test_phase2_from_phase1_changes_noise_head_and_records_history(tmp_path: Path) -> None:
    train(tmp_path / "p1", NET, TC, max_steps=1, progress=False)
    before = _weights(tmp_path / "p1" / "last")
    tc2 = dataclasses.replace(TC, phase=2)
    result = train(
        tmp_path / "p2",
        train_cfg=tc2,
        init_from=tmp_path / "p1" / "last",
        max_steps=2,
        progress=False,
    )
    assert result.step == 2
    ckpt = load_checkpoint(tmp_path / "p2" / "last")
    assert ckpt.meta["train"]["phase"] == 2
    assert ckpt.meta["history"][0]["phase"] == 1
    assert ckpt.meta["history"][0]["step"] == 1
    after = ckpt.model.state_dict()
    assert not torch.equal(before["noise_head.mlp.2.bias"], after["noise_head.mlp.2.bias"])
    # phase 2 draws positive pairs only
    assert simulator_config(NET, tc2).positive_ratio == 1.0


def test_ahgp_trains_with_the_same_loop(tmp_path: Path) -> None:
    net = dataclasses.replace(NET, model="ahgp-se-ard", vocabulary=SE_VOCABULARY)
    result = train(tmp_path / "ahgp", net, TC, max_steps=2, progress=False)
    assert result.step == 2
    assert all(torch.isfinite(torch.tensor(result.losses)))
    assert type(load_checkpoint(tmp_path / "ahgp" / "last").model).__name__ == "AHGPSEARD"
    with pytest.raises(ValueError, match="trained with the vocabulary"):
        simulator_config(dataclasses.replace(NET, model="ahgp-se-ard"), TC)


def test_encoder_view_subsamples_present_points_only() -> None:
    sim = Simulator(simulator_config(NET, dataclasses.replace(TC, n_min=3, n_max=16)))
    batch = sim.sample(6, torch.Generator().manual_seed(0))
    view = encoder_view(batch, 5, torch.Generator().manual_seed(1))
    assert view.X.shape[1] == 5
    n = batch.point_mask.sum(1)
    assert view.point_mask.sum(1).tolist() == torch.clamp(n, max=5).tolist()
    for b in range(6):  # every kept point is one of the dataset's present points
        rows = batch.X[b][batch.point_mask[b]]
        for x in view.X[b][view.point_mask[b]]:
            assert bool((rows == x).all(-1).any())
    assert encoder_view(batch, 0, None).X is batch.X


def test_size_buckets_give_the_same_prediction_and_gradient() -> None:
    """Bucketing by n is exact: same predictions and gradients as one padded batch."""
    from amorgp.amortizer.networks.model import build_model
    from amorgp.training.train import predict_bucketed, training_loss

    sim = Simulator(simulator_config(NET, dataclasses.replace(TC, n_min=3, n_max=16, max_dims=3)))
    batch = sim.sample(7, torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    model = build_model(NET).double()
    view = encoder_view(batch, 0, None)
    ref = model(view)
    out = predict_bucketed(model, view, 3)
    torch.testing.assert_close(out.params, ref.params, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out.noise, ref.noise, rtol=1e-10, atol=1e-12)
    grads = []
    for buckets in (1, 3):
        model.zero_grad()
        training_loss(
            model, batch, NET.vocabulary, dataclasses.replace(TC, size_buckets=buckets)
        ).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-8, atol=1e-10)


def test_calibrated_pairs_positive_trains_the_noise_head_on_negative_pairs() -> None:
    """At ``calibrated=1`` the noise head gets no gradient from the loss; with
    ``calibrated_pairs="positive"`` the negative pairs keep the plain NLL, and the noise head
    learns from them (and only them: a batch of positives gives it none either)."""
    from amorgp.amortizer.networks.model import build_model
    from amorgp.training.train import training_loss

    cfg = dataclasses.replace(TC, n_min=5, n_max=12, max_dims=2, calibrated=1.0)
    batch = Simulator(simulator_config(NET, cfg)).sample(8, torch.Generator().manual_seed(3))
    assert 0 < int(batch.is_positive.sum()) < 8
    torch.manual_seed(0)
    model = build_model(NET).double()

    def noise_grad(train_cfg: Any, b: Any) -> float:
        model.zero_grad()
        training_loss(model, b, NET.vocabulary, train_cfg).loss.backward()
        return sum(
            float(q.grad.abs().sum()) for q in model.noise_head.parameters() if q.grad is not None
        )

    assert noise_grad(cfg, batch) == 0.0
    positive = dataclasses.replace(cfg, calibrated_pairs="positive")
    assert noise_grad(positive, batch) > 0.0
    only_positive = dataclasses.replace(batch, is_positive=torch.ones_like(batch.is_positive))
    assert noise_grad(positive, only_positive) == 0.0


def test_size_buckets_apply_on_the_cpu_only() -> None:
    """The CPU step runs one encoder pass per bucket; a GPU step runs one pass in all."""
    from amorgp.amortizer.networks.model import build_model
    from amorgp.training.train import effective_size_buckets, training_loss

    cfg = dataclasses.replace(TC, n_min=3, n_max=16, max_dims=3, size_buckets=3)
    assert effective_size_buckets(cfg, torch.device("cpu")) == 3
    assert effective_size_buckets(cfg, torch.device("cuda", 0)) == 1
    batch = Simulator(simulator_config(NET, cfg)).sample(7, torch.Generator().manual_seed(4))
    model = build_model(NET)
    calls: list[int] = []
    model.dataset_encoder.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    training_loss(model, batch, NET.vocabulary, cfg)
    assert len(calls) == 3
    assert sum(calls) == 7
    calls.clear()
    training_loss(model, batch, NET.vocabulary, cfg, size_buckets=1)
    assert calls == [7]


def test_dataloader_workers_give_the_same_data_as_in_process(tmp_path: Path) -> None:
    """One worker process produces the stream the main process would (same losses)."""
    a = train(tmp_path / "w0", NET, TC, max_steps=2, progress=False)
    b = train(
        tmp_path / "w1", NET, dataclasses.replace(TC, num_workers=1), max_steps=2, progress=False
    )
    assert a.losses == b.losses


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_training_matches_cpu_loss_roughly(tmp_path: Path) -> None:
    """On CUDA the network runs under bf16 autocast, the loss in float64; the first loss
    (same initialisation and data) agrees with the CPU float32 one to bf16 accuracy."""
    cpu = train(tmp_path / "cpu", NET, TC, max_steps=1, progress=False, device="cpu")
    gpu = train(tmp_path / "gpu", NET, TC, max_steps=1, progress=False, device="cuda")
    assert abs(gpu.losses[0] - cpu.losses[0]) < 0.05 * abs(cpu.losses[0]) + 0.05


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_training_steps_do_not_synchronise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two read-backs a CUDA training step after the first never waits for the
    device (the first uploads the constant tables that are built once per device, e.g.
    :func:`amorgp.lazy_kernels.slot_table`)."""
    from amorgp.training import trainer as trainer_module

    real_step = trainer_module.Trainer._step
    checked = {"n": 0}

    def strict_step(self: Any, batch: Any) -> None:
        if checked["n"] == 0:
            real_step(self, batch)
            checked["n"] += 1
            return
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            real_step(self, batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        checked["n"] += 1

    monkeypatch.setattr(trainer_module.Trainer, "_step", strict_step)
    out = train(tmp_path / "gpu", NET, TC, max_steps=4, progress=False, device="cuda")
    assert checked["n"] == 4
    assert all(math.isfinite(v) for v in out.losses)
