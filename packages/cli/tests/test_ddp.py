"""DistributedDataParallel: two gloo ranks (torchrun) train what a single process computes by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import build_model
from amorgp.amortizer.testing import TINY_TRAIN
from amorgp.training.train import make_stream, simulator_config, training_loss

NET = PRESETS["tiny"].network
TC = replace(
    TINY_TRAIN,
    batch_size=8,
    n_max=12,
    val_size=4,
    val_every=2,
    size_buckets=2,  # several forward passes per step under DDP
)
STEPS = 3


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs the gloo backend")
def test_two_gloo_ranks_match_single_process_reference(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    sets = [f"--set={k}={v}" for k, v in TC.to_dict().items() if k != "phase"]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "amorgp.cli", "train", "--preset", "tiny", "--out", str(out),
        "--max-steps", str(STEPS), "--device", "cpu", "--no-progress", *sets,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = load_checkpoint(out / "last")
    assert ckpt.meta["progress"]["world_size"] == 2
    assert ckpt.meta["progress"]["datasets_seen"] == STEPS * TC.batch_size

    # reference: one process, the mean of the two ranks' losses per step
    sim_cfg = simulator_config(NET, TC)
    torch.manual_seed(TC.seed)
    model = build_model(NET)
    opt = torch.optim.RAdam(model.parameters(), lr=TC.lr)
    chunks: dict[tuple[int, int], list] = {}
    for step in range(STEPS):
        chunk, offset = divmod(step, TC.val_every)
        losses = []
        for rank in (0, 1):
            if (chunk, rank) not in chunks:
                stream = make_stream(
                    sim_cfg, TC.batch_size // 2, TC.seed, rank, chunk, TC.val_every
                )
                chunks[chunk, rank] = list(iter(stream))
            losses.append(
                training_loss(model, chunks[chunk, rank][offset], NET.vocabulary, TC).loss
            )
        for group in opt.param_groups:
            group["lr"] = TC.lr * min(1.0, (step + 1) / TC.warmup_steps)
        opt.zero_grad()
        (0.5 * (losses[0] + losses[1])).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TC.grad_clip)
        opt.step()
    # the two ranks drew different data
    assert not torch.equal(chunks[0, 0][0].X, chunks[0, 1][0].X)
    trained = ckpt.model.state_dict()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(trained[name], value, rtol=1e-4, atol=1e-6, msg=name)
