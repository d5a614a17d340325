"""Training loop: on-the-fly simulated batches, RAdam, validation, atomic checkpoints, exact resume, DDP.

One optimiser step::

    batch  <- SimulatorStream (DataLoader workers; each DDP rank its own seed)
    view   <- the encoder's view of the batch (optionally a random subset of points)
    pred   <- model(view)                         float32 (bf16 autocast on CUDA)
    loss   <- phase1_loss / phase2_loss(pred, batch)   float64 GP algebra, all points
    RAdam step after gradient clipping (DDP averages gradients over ranks)

Data order and resume: training is cut into *chunks* of ``val_every`` steps.
Chunk ``e`` of rank ``r`` is epoch ``e`` of a :class:`~amorgp.simulator.SimulatorStream`
seeded with :func:`rank_seed` ``(seed, r)``, so the data of every step is a
function of ``(seed, rank, step, num_workers)`` alone.  A checkpoint stores the
step; resuming regenerates the current chunk and skips the batches already used,
then continues bit-for-bit (model, optimiser state, step, RNG states restored).

The loop itself is :class:`amorgp.amortizer.training.trainer.Trainer` (over the run state of
:mod:`amorgp.amortizer.training.runstate`); the run directory (``last``, ``best``, the metrics
log, the lock) is :mod:`amorgp.amortizer.training.rundir`.  This module holds the step
functions (the encoder's view, the loss, validation) and the entry point :func:`train`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amorgp.amortizer.config import NetworkConfig, TrainConfig
from amorgp.amortizer.network import Prediction
from amorgp.amortizer.registry import SE_VOCABULARY, network_spec
from amorgp.amortizer.training.loss import LossOutput, gp_nll_per_point, phase1_loss, phase2_loss
from amorgp.kernel_grammar import Vocabulary
from amorgp.kernel_grammar.errors import OptionError
from amorgp.lazy_kernels import PaddedBatch
from amorgp.simulator import SimulatedBatch, SimulatorConfig, SimulatorStream, stream_seed

__all__ = [
    "SE_VOCABULARY",
    "TrainResult",
    "effective_size_buckets",
    "encoder_view",
    "make_stream",
    "predict_bucketed",
    "rank_seed",
    "simulator_config",
    "train",
    "training_loss",
    "validate",
]

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Outcome of :func:`train`.

    Attributes:
        step: optimiser steps done in total (over resumes).
        datasets_seen: datasets consumed in this phase, summed over ranks.
        stopped_by: ``"max_steps"``, ``"max_datasets"``, ``"max_minutes"``,
            ``"interrupted"`` (Ctrl-C), ``"other_rank"`` (DDP).
        last_checkpoint: the checkpoint directory written last (rank 0), if any.
        validation: the last validation metrics.
        losses: training losses of this call, per step.
        best_checkpoint: the checkpoint with the lowest validation NLL of the run
            (``runs/NAME/best`` names it; rank 0), if any.
    """

    step: int
    datasets_seen: int
    stopped_by: str
    last_checkpoint: Path | None
    validation: dict[str, float] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    best_checkpoint: Path | None = None


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s data stream (independent streams per rank)."""
    return stream_seed(seed, 1_000_000 + rank, 0)


def simulator_config(network: NetworkConfig, train_cfg: TrainConfig) -> SimulatorConfig:
    """The simulator prior used to train ``network`` with ``train_cfg``.

    Paper laws (Appendix A) with ``n ~ U{n_min..n_max}``, ``d <= max_dims``; phase 2
    draws positive pairs only; the network's registry entry adjusts the prior (the
    AHGP-SE-ARD model sees one SE per dimension).
    """
    spec = network_spec(network.model)
    spec.check_training(network.vocabulary)
    cfg = SimulatorConfig(
        n_min=train_cfg.n_min,
        n_max=train_cfg.n_max,
        d_max=train_cfg.max_dims,
        vocabulary=network.vocabulary,
        inputs=train_cfg.inputs,
    )
    cfg = spec.adjust_simulator(cfg)
    if train_cfg.phase == 2:
        cfg = cfg.finetune()
    return cfg


def make_stream(
    sim_cfg: SimulatorConfig, batch_size: int, seed: int, rank: int, chunk: int, chunk_steps: int
) -> SimulatorStream:
    """The stream of rank ``rank`` for chunk ``chunk`` (``chunk_steps`` batches)."""
    stream = SimulatorStream(
        sim_cfg, batch_size, rank_seed(seed, rank), batches_per_epoch=chunk_steps
    )
    stream.set_epoch(chunk)
    return stream


def encoder_view(
    batch: PaddedBatch, max_points: int, generator: torch.Generator | None
) -> PaddedBatch:
    """The batch the network reads: all points, or a random subset of ``max_points``.

    Each dataset keeps ``min(n_b, max_points)`` of its points, drawn uniformly
    without replacement; the padded axis shrinks to ``max_points`` (that is the
    saving).  The loss still uses every point.
    """
    shown = batch.presented() if isinstance(batch, SimulatedBatch) else batch
    return shown.subsample_points(max_points, generator)


def predict_bucketed(model: nn.Module, view: PaddedBatch, buckets: int) -> Prediction:
    """Run ``model`` on ``buckets`` sub-batches of datasets sorted by size, reassembled.

    Datasets are sorted by their number of points and split into ``buckets`` groups
    (:meth:`~amorgp.lazy_kernels.PaddedBatch.size_buckets`); each group is cropped to
    its largest ``n`` (present points moved first), so fewer padded tokens go through
    the encoder.  The network is invariant to padding and to point order, so the
    result equals ``model(view)`` up to float rounding.  The loop runs over the (few)
    buckets, not over datasets.
    """
    if buckets <= 1 or len(view) < 2:
        return model(view, validate=False)
    groups = view.size_buckets(buckets)
    outs = [model(sub, validate=False) for _, sub in groups]
    inverse = torch.argsort(torch.cat([idx for idx, _ in groups]))
    params = torch.cat([o.params for o in outs])[inverse]
    return Prediction(params, torch.cat([o.noise for o in outs])[inverse])


def effective_size_buckets(train_cfg: TrainConfig, device: torch.device) -> int:
    """The number of size buckets a training step uses on ``device``.

    ``train_cfg.size_buckets`` on the CPU, where the encoder is flop-bound and cropping
    padded points pays; 1 elsewhere: on a GPU each bucket is another round of small
    kernel launches and a host synchronisation for its crop, and 4 buckets measured
    2.2-3.3x slower per step than one on an H100 (``docs/training/throughput-cuda.md``).
    The prediction is the same either way (the network is padding invariant).
    """
    return train_cfg.size_buckets if device.type == "cpu" else 1


def training_loss(
    model: nn.Module,
    batch: SimulatedBatch,
    vocab: Vocabulary,
    train_cfg: TrainConfig,
    generator: torch.Generator | None = None,
    *,
    size_buckets: int | None = None,
) -> LossOutput:
    """Forward pass and loss of one batch (phase from ``train_cfg``).

    ``vocab`` is the batch's vocabulary (kept for callers; ``batch.vocab`` is used).
    ``size_buckets`` overrides :func:`effective_size_buckets` (benchmarks compare both).
    """
    view = encoder_view(batch, train_cfg.encoder_points, generator)
    device = batch.X.device
    buckets = effective_size_buckets(train_cfg, device) if size_buckets is None else size_buckets
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
        pred = predict_bucketed(model, view, buckets)
    pred = Prediction(pred.params.float(), pred.noise.float())
    shown = batch.presented()
    if train_cfg.phase == 1:
        return phase1_loss(pred, shown, valid=batch.valid)
    return phase2_loss(
        pred,
        shown,
        true_noise=batch.noise,
        is_positive=batch.is_positive,
        valid=batch.valid,
        alpha=train_cfg.alpha,
        beta=train_cfg.beta,
    )


@torch.no_grad()
def validate(
    model: nn.Module, batches: list[SimulatedBatch], vocab: Vocabulary, device: torch.device
) -> dict[str, float]:
    """Metrics of ``model`` on a fixed simulated set.

    Returns:
        ``nll``: mean per-point NLL of the predicted parameters (all pairs);
        ``nll_positive`` / ``nll_true``: the same on positive pairs, and at the
        ground-truth parameters there (``nll_gap`` = their difference, 0 is ideal);
        ``noise_rmse_std``: RMSE of the predicted noise standard deviation (positives);
        ``noise_mae_log``: mean absolute error of ``log sigma^2`` (positives);
        ``n_failed``: elements whose Cholesky failed.
    """
    module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    was_training = module.training
    module.eval()
    sums: dict[str, float] = {k: 0.0 for k in ("nll", "nll_positive", "nll_true", "se", "log")}
    counts = {"all": 0, "pos": 0}
    failed_total = 0
    for cpu_batch in batches:
        b = cpu_batch.to(device)
        shown = b.presented()
        pred = module(shown, validate=False)
        nll, failed = gp_nll_per_point(shown, pred.params.float(), pred.noise.float())
        true_nll, true_failed = gp_nll_per_point(b.truth())
        ok = b.valid & ~failed
        pos = ok & b.is_positive & ~true_failed
        failed_total += int((failed & b.valid).sum())
        counts["all"] += int(ok.sum())
        counts["pos"] += int(pos.sum())
        sums["nll"] += float(nll[ok].sum())
        sums["nll_positive"] += float(nll[pos].sum())
        sums["nll_true"] += float(true_nll[pos].sum())
        noise_hat = pred.noise.double()
        sums["se"] += float(((noise_hat.sqrt() - b.noise.sqrt()) ** 2)[pos].sum())
        sums["log"] += float((noise_hat.log() - b.noise.log()).abs()[pos].sum())
    module.train(was_training)
    n_all, n_pos = max(counts["all"], 1), max(counts["pos"], 1)
    out = {
        "nll": sums["nll"] / n_all,
        "nll_positive": sums["nll_positive"] / n_pos,
        "nll_true": sums["nll_true"] / n_pos,
        "noise_rmse_std": math.sqrt(sums["se"] / n_pos),
        "noise_mae_log": sums["log"] / n_pos,
        "n_failed": float(failed_total),
        "n_datasets": float(counts["all"]),
    }
    out["nll_gap"] = out["nll_positive"] - out["nll_true"]
    return out


def train(
    out_dir: str | os.PathLike[str],
    network: NetworkConfig | None = None,
    train_cfg: TrainConfig | None = None,
    *,
    resume: bool = False,
    init_from: str | os.PathLike[str] | None = None,
    max_minutes: float | None = None,
    max_datasets: int | None = None,
    max_steps: int | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    log_every: int = 10,
    train_overrides: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Train (or resume training) an amortization network.

    Every chunk of ``train_cfg.val_every`` steps ends with a validation and a
    checkpoint ``out_dir/step-*``; ``out_dir/last`` names the newest, ``out_dir/best``
    the one with the lowest validation NLL.  Only one process trains in a directory
    at a time (a lock); temporaries of killed writers are removed on start.

    Args:
        out_dir: the run directory (created).
        network: architecture of a new run.  With ``resume`` or ``init_from`` the
            architecture is the checkpoint's; a ``network`` given there must equal it.
        train_cfg: recipe of a new run or of ``init_from`` (default there: the
            checkpoint's recipe).  With ``resume`` it must equal the stored recipe.
        resume: continue from ``out_dir``'s newest intact checkpoint, exactly (if
            ``last`` fails verification, the newest ``step-*`` that verifies is used,
            with a logged warning).  The metrics log is rewound to that checkpoint.
        init_from: start from the weights of this checkpoint (e.g. phase 2 after phase 1);
            the optimiser starts fresh.
        max_minutes, max_datasets, max_steps: budgets; training stops at the first one
            reached, writes a checkpoint and returns.  ``max_steps`` and ``max_datasets``
            count the run's totals (over resumes); ``max_minutes`` this call's time.
        device: default CUDA (``LOCAL_RANK``) if available, else CPU.
        progress: show a progress bar (only on a terminal, only on rank 0).
        log_every: steps between JSONL training records.
        train_overrides: training-config fields the caller sets explicitly (e.g. the
            command line's ``--set``): applied on top of ``train_cfg`` (or of the
            checkpoint's recipe with ``init_from``); with ``resume`` each must equal the
            stored value.

    Raises:
        OptionError: no budget, a budget out of its domain or already reached by a
            resumed run, nothing to resume, a directory that already holds a run, or
            a configuration that differs from the resumed run's (fields listed).
        CheckpointError: no intact checkpoint to resume or start from.
        TrainingError: the run diverged (non-finite loss or weights, every dataset of
            a batch failed) or a validation in which every dataset failed; nothing is
            written then and ``last`` keeps the newest finite checkpoint.  Another
            process training in ``out_dir`` raises it too.
    """
    from amorgp.amortizer.training.runstate import Budget  # these modules build on this one
    from amorgp.amortizer.training.trainer import run_training

    budget = Budget(max_steps=max_steps, max_datasets=max_datasets, max_minutes=max_minutes)
    if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
        raise OptionError(f"log_every must be a positive integer, got {log_every!r}")
    return run_training(
        Path(out_dir),
        network,
        train_cfg,
        budget,
        resume=resume,
        init_from=init_from,
        overrides=train_overrides,
        device=device,
        progress=progress,
        log_every=log_every,
    )
