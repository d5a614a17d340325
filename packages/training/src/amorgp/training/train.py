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

The loop itself is :class:`amorgp.training.trainer.Trainer` (over the run state of
:mod:`amorgp.training.runstate`), started and closed by :mod:`amorgp.training.launch`; the run directory (``last``, ``best``, the metrics
log, the lock) is :mod:`amorgp.training.rundir`.  The step
functions (the encoder's view, the loss, validation) are in
:mod:`amorgp.training.steps`; this module holds the entry point :func:`train`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.amortizer.networks.registry import SE_VOCABULARY
from amorgp.core.errors import OptionError
from amorgp.training.launch import run_training
from amorgp.training.runstate import Budget
from amorgp.training.steps import (
    TrainResult,
    effective_size_buckets,
    encoder_view,
    make_stream,
    predict_bucketed,
    rank_seed,
    simulator_config,
    training_loss,
    validate,
)

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
