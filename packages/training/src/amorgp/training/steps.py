"""The step functions of training: the encoder's view, the loss, validation, the data
stream and the result type (the loop is :mod:`amorgp.training.trainer`, the
entry point :func:`amorgp.training.train.train`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.amortizer.networks.network import Prediction
from amorgp.amortizer.networks.registry import SE_VOCABULARY, network_spec
from amorgp.kernel_grammar import Vocabulary
from amorgp.lazy_kernels import PaddedBatch
from amorgp.simulator import SimulatedBatch, SimulatorConfig, SimulatorStream, stream_seed
from amorgp.training.loss import LossOutput, gp_nll_per_point, phase1_loss, phase2_loss

__all__ = [
    "SE_VOCABULARY",
    "TrainResult",
    "effective_size_buckets",
    "encoder_view",
    "make_stream",
    "predict_bucketed",
    "rank_seed",
    "simulator_config",
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

    Paper laws (Appendix A) or the ``realdata`` laws (``train_cfg.prior``) with
    ``n ~ U{n_min..n_max}``, ``d <= max_dims``; phase 2
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
        prior=train_cfg.prior,
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
        positive = batch.is_positive if train_cfg.calibrated_pairs == "positive" else None
        return phase1_loss(
            pred,
            shown,
            valid=batch.valid,
            calibrated=train_cfg.calibrated,
            calibrated_mask=positive,
        )
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
