"""The long training campaign: resumable, low-priority, one thread, in segments.

A campaign trains one network on the paper's prior (``d ~ Geometric(0.25)``
clipped to 8, ``n ~ U{10..n_max}``) through a fixed plan of *stages* (a
curriculum over ``n``: small datasets first), in *segments* of a few minutes.
After every segment it averages the phase-1 weights of the last few segment ends
(stochastic weight averaging, :data:`~amorgp.training.campaign_plan.SWA_MEMBERS`;
training itself continues from the latest weights), fine-tunes a copy of that
average for a few noise-head steps (phase 2), scores the copy on a fixed validation
set drawn from the paper prior, appends a record to the campaign log, and exports
the weights (no optimiser state) whenever they beat the best exported so far (the
first time: the bundled default model, scored on the same set).

Where things live::

    STATE/ (outside the repository; default ~/.cache/amorgp/campaign)
      campaign.json          stage index, datasets of the stage done before this run dir, seed
      stage-K/               an ``amorgp train`` run directory (exact resume within a stage)
      finetune/              the phase-2 copy of the latest segment (scratch)
      swa/NNNNNNNNNNNN/      phase-1 weights of the last segment ends (by datasets seen)
      swa-average/           their average, the start of the phase-2 copy (scratch)
      valset/                the fixed campaign validation set (regenerated from its seed)
    EXPORT/ (in the repository: docs/training/campaign by default)
      campaign.jsonl         one record per segment: datasets, minutes, validation, exported?
      phase1-latest/         the latest phase-1 weights (to continue on a machine without STATE)
      best/                  the best phase-2 weights so far (a pretrained-format checkpoint)
      best-phase1/           the weights ``best`` was fine-tuned from (the weight average)

Any interruption (Ctrl-C, SIGTERM, a killed process) loses at most the current
segment's progress since the last in-run checkpoint; a machine without STATE
continues from ``EXPORT/phase1-latest`` at the stage the log names, with a fresh
optimiser and a new data seed.  A run that diverges (see
:func:`~amorgp.training.train.train`) appends a ``"failed"`` record and raises
:class:`~amorgp.core.errors.TrainingError`; nothing is exported from it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.networks.checkpoint import load_checkpoint, save_checkpoint
from amorgp.amortizer.networks.config import NetworkConfig, preset
from amorgp.amortizer.networks.model import build_model
from amorgp.training.campaign_plan import (
    CAMPAIGN_STAGES,
    RECORD_FIELDS,
    RECORD_OPTIONAL,
    STATE_FIELDS,
    SWA_MEMBERS,
    VALSET_BATCHES,
    VALSET_SEED,
    CampaignStage,
    campaign_validation_set,
    check_fields,
    heldout_pairs,
    last_record,
    read_json,
    score_checkpoint,
    write_json,
)
from amorgp.training.campaign_segments import CampaignSegments, stage_ended
from amorgp.training.runtime import interruptible

__all__ = [
    "CAMPAIGN_STAGES",
    "VALSET_SEED",
    "CampaignStage",
    "campaign_validation_set",
    "run_campaign",
    "score_checkpoint",
]

logger = logging.getLogger(__name__)


def _initial_status(log: Path, stages: Sequence[CampaignStage]) -> dict[str, Any]:
    """A fresh status, continuing the stage and counters the log names (if any); a stage
    that the last record completed is not trained again."""
    previous = last_record(log)
    if previous is not None and "stage_datasets" not in previous:
        previous = None  # a failure record carries no counters
    if previous is None:
        return {
            "stage": 0,
            "stage_offset": 0,
            "total_offset": 0,
            "seed": 1,
            "best_nll": None,
            "minutes_offset": 0.0,
        }
    optional = {k: v for k, v in RECORD_OPTIONAL.items() if k in previous}
    fields = {**RECORD_FIELDS, **optional}
    check_fields(f"{log}, last record", previous, fields, "repair or remove that line")
    k, done = int(previous["stage"]), int(previous["stage_datasets"])
    total, minutes = int(previous["datasets_total"]), float(previous.get("minutes_total", 0.0))
    if stage_ended(stages, k, done):
        k, done = k + 1, 0  # the record ended its stage: the next stage starts afresh
    return {
        "stage": k,
        "stage_offset": done,
        "total_offset": total,
        "seed": int(previous.get("seed", 0)) + 1,
        "best_nll": previous.get("best_nll"),
        "minutes_offset": minutes,
    }


def _read_status(path: Path) -> dict[str, Any]:
    """The campaign state in ``path`` (``{}`` if there is none), its fields checked.

    Raises:
        DataError: not a JSON object, or a field missing or of the wrong kind (named).
    """
    status = read_json(path, {})
    if status:
        check_fields(
            str(path), status, STATE_FIELDS, "remove it to rebuild the campaign state from the log"
        )
    return status


def run_campaign(
    state: str | os.PathLike[str],
    export: str | os.PathLike[str],
    *,
    init: str | os.PathLike[str] | None = None,
    baseline: str | os.PathLike[str] | None = None,
    segment_minutes: float = 20.0,
    finetune_steps: int = 100,
    max_minutes: float = math.inf,
    batch_size: int = 16,
    preset_name: str = "small",
    network: NetworkConfig | None = None,
    stages: Sequence[CampaignStage] = CAMPAIGN_STAGES,
    segment_datasets: int | None = None,
    max_segments: int | None = None,
    valset_batches: int = VALSET_BATCHES,
    real_data: str | os.PathLike[str] | None = None,
    swa_members: int = SWA_MEMBERS,
    heldout_pairs_count: int = 200,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Run the campaign until ``max_minutes``, ``max_segments`` or an interruption.

    Args:
        state: the state directory (outside the repository).
        export: the export directory (in the repository): log, latest phase-1 weights, best.
        init: checkpoint to start from when neither ``state`` nor ``export/phase1-latest``
            has one (e.g. the bundled default weights); ``None``: a fresh network of
            ``network`` (default: the ``preset_name`` architecture), written to ``state/init``.
        baseline: the model to beat the first time (default: ``init``).
        segment_minutes: training minutes between evaluations.
        finetune_steps: phase-2 steps of the evaluation copy.
        max_minutes: wall-clock budget of this call.
        batch_size: datasets per optimiser step.
        preset_name: architecture used when starting from scratch (unused with ``init``).
        network: architecture used when starting from scratch (overrides ``preset_name``).
        stages: the curriculum (default :data:`CAMPAIGN_STAGES`).
        segment_datasets: also end a segment after this many datasets (``None``: time only).
        max_segments: stop after this many segments (``None``: no limit).
        valset_batches: batches of :data:`VALSET_BATCH_SIZE` in a new campaign validation set.
        real_data: a folder of CSV datasets (last column the target); if given, every
            segment's evaluation copy is also scored there
            (:func:`~amorgp.training.campaign_plan.real_data_scores`, record key ``"real"``).
        swa_members: segment ends averaged into the evaluated copy (1: the latest
            weights alone).
        heldout_pairs_count: simulated pairs with test points on which every evaluated
            copy's predictive quality is also logged (record key ``"heldout"``; 0: none).
        device: where the segments and the fine-tuning copies train (``"cuda"`` on a lent
            GPU: the trainer's bf16 autocast and on-device simulation; scoring stays on
            the CPU). A stage's run directory resumes on any device.

    Returns:
        The last record appended to ``export/campaign.jsonl`` (``{}`` if none).

    Raises:
        TrainingError: a training or fine-tuning run diverged (a ``"failed"`` record is
            appended to the log first).
    """
    state_dir, export_dir = Path(state), Path(export)
    state_dir.mkdir(parents=True, exist_ok=True)
    export_dir.mkdir(parents=True, exist_ok=True)
    log = export_dir / "campaign.jsonl"
    started = time.monotonic()
    campaign: CampaignSegments | None = None
    with interruptible():
        try:
            status = _read_status(state_dir / "campaign.json") or _initial_status(log, stages)
            write_json(state_dir / "campaign.json", status)
            if init is None or not Path(init).exists():
                init = _fresh_init(state_dir, network or preset(preset_name).network)
            init_network = load_checkpoint(init).network
            campaign = CampaignSegments(
                state_dir,
                export_dir,
                status,
                Path(init),
                stages=tuple(stages),
                batch_size=batch_size,
                finetune_steps=finetune_steps,
                segment_datasets=segment_datasets,
                real_data=Path(real_data) if real_data is not None else None,
                swa_members=swa_members,
                device=torch.device(device),
                heldout=(
                    heldout_pairs(init_network, heldout_pairs_count)
                    if heldout_pairs_count > 0
                    else None
                ),
                valset=campaign_validation_set(state_dir, init_network, valset_batches),
            )
            campaign.score_baseline(Path(baseline) if baseline is not None else Path(init))
            campaign.run_segments(log, started + 60.0 * max_minutes, segment_minutes, max_segments)
        except KeyboardInterrupt:
            logger.info("campaign interrupted")
    return campaign.record if campaign is not None else {}


def _fresh_init(state_dir: Path, network: NetworkConfig) -> Path:
    path = state_dir / "init"
    if not path.exists():
        torch.manual_seed(0)
        save_checkpoint(path, build_model(network), network)
    return path
