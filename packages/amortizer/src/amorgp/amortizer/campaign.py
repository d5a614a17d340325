"""The long CPU training campaign: resumable, low-priority, one thread, in segments.

A campaign trains one network on the paper's prior (``d ~ Geometric(0.25)``
clipped to 8, ``n ~ U{10..n_max}``) through a fixed plan of *stages* (a
curriculum over ``n``: small datasets first), in *segments* of a few minutes.
After every segment it fine-tunes a copy of the phase-1 weights for a few
noise-head steps (phase 2), scores that copy on a fixed validation set drawn
from the paper prior, appends a record to the campaign log, and exports the
weights (no optimiser state) whenever they beat the best exported so far (the
first time: the bundled default model, scored on the same set).

Where things live::

    STATE/ (outside the repository; default ~/.cache/amorgp/campaign)
      campaign.json          stage index, datasets of the stage done before this run dir, seed
      stage-K/               an ``amorgp train`` run directory (exact resume within a stage)
      finetune/              the phase-2 copy of the latest segment (scratch)
      valset/                the fixed campaign validation set (regenerated from its seed)
    EXPORT/ (in the repository: docs/training/campaign by default)
      campaign.jsonl         one record per segment: datasets, minutes, validation, exported?
      phase1-latest/         the latest phase-1 weights (to continue on a machine without STATE)
      best/                  the best phase-2 weights so far (a pretrained-format checkpoint)

Any interruption (Ctrl-C, SIGTERM, a killed process) loses at most the current
segment's progress since the last in-run checkpoint; a machine without STATE
continues from ``EXPORT/phase1-latest`` at the stage the log names, with a fresh
optimiser and a new data seed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.checkpoint import load_checkpoint, save_checkpoint
from amorgp.amortizer.config import NetworkConfig, TrainConfig, preset
from amorgp.amortizer.train import train, validate
from amorgp.simulator import SimulatorConfig, generate_fixed_set, read_fixed_set

__all__ = [
    "CAMPAIGN_STAGES",
    "VALSET_SEED",
    "CampaignStage",
    "campaign_validation_set",
    "run_campaign",
    "score_checkpoint",
]

logger = logging.getLogger(__name__)

VALSET_SEED = 20_261_122
"""Seed of the fixed campaign validation set (paper prior, ``d <= 8``, ``n <= 250``)."""

VALSET_BATCHES, VALSET_BATCH_SIZE = 8, 32


@dataclass(frozen=True)
class CampaignStage:
    """One stage of the curriculum.

    Attributes:
        name: label in the log.
        n_max: largest dataset size drawn (``n ~ U{10..n_max}``).
        lr: RAdam learning rate (after ``warmup_steps``).
        datasets: datasets to train in this stage before the next one (``None``: open-ended).
    """

    name: str
    n_max: int
    lr: float
    datasets: int | None
    warmup_steps: int = 20


CAMPAIGN_STAGES: tuple[CampaignStage, ...] = (
    CampaignStage("d8-n100", n_max=100, lr=5e-4, datasets=150_000),
    CampaignStage("d8-n250", n_max=250, lr=3e-4, datasets=None),
)


def _stage_train_config(stage: CampaignStage, seed: int, batch_size: int) -> TrainConfig:
    return TrainConfig(
        phase=1,
        batch_size=batch_size,
        lr=stage.lr,
        warmup_steps=stage.warmup_steps,
        n_max=stage.n_max,
        max_dims=8,
        encoder_points=0,
        size_buckets=4,
        val_size=64,
        val_every=100,
        num_workers=0,
        seed=seed,
    )


def _finetune_config(seed: int, batch_size: int) -> TrainConfig:
    return TrainConfig(
        phase=2,
        batch_size=batch_size,
        lr=3e-4,
        warmup_steps=10,
        n_max=250,
        max_dims=8,
        size_buckets=4,
        val_size=32,
        val_every=10_000,
        num_workers=0,
        seed=seed,
    )


def campaign_validation_set(state: Path, network: NetworkConfig) -> list[Any]:
    """The fixed campaign validation set (written to ``state/valset`` once, then read)."""
    path = state / "valset"
    if path.exists():
        return list(read_fixed_set(path).batches)
    cfg = SimulatorConfig(n_min=10, n_max=250, d_max=8, vocabulary=network.vocabulary)
    return list(
        generate_fixed_set(
            path, cfg, n_batches=VALSET_BATCHES, batch_size=VALSET_BATCH_SIZE, seed=VALSET_SEED
        ).batches
    )


def score_checkpoint(checkpoint: Path, batches: list[Any]) -> dict[str, float]:
    """Validation metrics (see :func:`~amorgp.amortizer.train.validate`) of a checkpoint."""
    ckpt = load_checkpoint(checkpoint)
    return validate(ckpt.model, batches, ckpt.network.vocabulary, torch.device("cpu"))


def _read_json(path: Path, default: dict[str, Any]) -> dict[str, Any]:
    if not path.exists():
        return dict(default)
    return dict(json.loads(path.read_text()))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _last_record(log: Path) -> dict[str, Any] | None:
    if not log.exists():
        return None
    last = None
    for line in log.read_text().splitlines():
        if line.strip():
            try:
                last = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a killed writer: ignore it
    return last


def _append(log: Path, record: dict[str, Any]) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _export(source: Path, target: Path, meta: dict[str, Any]) -> None:
    """Write the weights of ``source`` (no optimiser state) to ``target`` atomically."""
    ckpt = load_checkpoint(source)
    keep: dict[str, Any] = {
        k: ckpt.meta[k] for k in ("train", "simulator", "progress", "history") if k in ckpt.meta
    }
    save_checkpoint(target, ckpt.model, ckpt.network, meta={**keep, **meta}, overwrite=True)


def _install_sigterm() -> Callable[[], None]:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # a background job of a non-interactive shell starts with SIGINT ignored: honour it
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    old = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)

    return restore


def run_campaign(
    state: str | os.PathLike[str],
    export: str | os.PathLike[str],
    *,
    init: str | os.PathLike[str],
    baseline: str | os.PathLike[str] | None = None,
    segment_minutes: float = 20.0,
    finetune_steps: int = 100,
    max_minutes: float = math.inf,
    batch_size: int = 16,
    preset_name: str = "small",
) -> dict[str, Any]:
    """Run the campaign until ``max_minutes`` or an interruption; returns the last record.

    Args:
        state: the state directory (outside the repository).
        export: the export directory (in the repository): log, latest phase-1 weights, best.
        init: checkpoint to start from when neither ``state`` nor ``export/phase1-latest``
            has one (e.g. the bundled default weights).
        baseline: the model to beat the first time (default: ``init``).
        segment_minutes: training minutes between evaluations.
        finetune_steps: phase-2 steps of the evaluation copy.
        max_minutes: wall-clock budget of this call.
        batch_size: datasets per optimiser step.
        preset_name: architecture used when starting from scratch (unused with ``init``).
    """
    state_dir, export_dir = Path(state), Path(export)
    state_dir.mkdir(parents=True, exist_ok=True)
    export_dir.mkdir(parents=True, exist_ok=True)
    log = export_dir / "campaign.jsonl"
    restore = _install_sigterm()
    started = time.monotonic()
    run_id = f"{socket.gethostname()}-{int(time.time())}"
    record: dict[str, Any] = {}
    try:
        status = _read_json(state_dir / "campaign.json", {})
        if not status:
            previous = _last_record(log)
            status = {
                "stage": int(previous["stage"]) if previous else 0,
                "stage_offset": int(previous["stage_datasets"]) if previous else 0,
                "total_offset": int(previous["datasets_total"]) if previous else 0,
                "seed": int(previous.get("seed", 0)) + 1 if previous else 1,
                "best_nll": float(previous["best_nll"]) if previous else None,
                "minutes_offset": float(previous["minutes_total"]) if previous else 0.0,
            }
            _write_json(state_dir / "campaign.json", status)
        network = (
            load_checkpoint(init).network if Path(init).exists() else preset(preset_name).network
        )
        valset = campaign_validation_set(state_dir, network)
        if status["best_nll"] is None:
            base = Path(baseline) if baseline is not None else Path(init)
            status["best_nll"] = score_checkpoint(base, valset)["nll"]
            status["baseline"] = str(base)
            _write_json(state_dir / "campaign.json", status)
            logger.info("campaign baseline %s: nll %.4f", base, status["best_nll"])
        while True:
            left = max_minutes - (time.monotonic() - started) / 60.0
            if left <= 0.05:
                break
            record = _segment(
                state_dir,
                export_dir,
                status,
                init,
                min(left, segment_minutes),
                finetune_steps,
                batch_size,
                valset,
                run_id,
                started,
            )
            _append(log, record)
            if record["stopped_by"] == "interrupted":
                break
    except KeyboardInterrupt:
        logger.info("campaign interrupted")
    finally:
        restore()
    return record


def _segment(
    state_dir: Path,
    export_dir: Path,
    status: dict[str, Any],
    init: str | os.PathLike[str],
    minutes: float,
    finetune_steps: int,
    batch_size: int,
    valset: list[Any],
    run_id: str,
    started: float,
) -> dict[str, Any]:
    k = int(status["stage"])
    stage = CAMPAIGN_STAGES[min(k, len(CAMPAIGN_STAGES) - 1)]
    run_dir = state_dir / f"stage-{k}"
    budget = (
        None if stage.datasets is None else max(stage.datasets - int(status["stage_offset"]), 1)
    )
    t0 = time.monotonic()
    if (run_dir / "last").exists():
        result = train(
            run_dir,
            resume=True,
            max_minutes=minutes,
            max_datasets=budget,
            device="cpu",
            progress=False,
        )
    else:
        latest = export_dir / "phase1-latest"
        start = latest if latest.exists() else Path(init)
        cfg = _stage_train_config(stage, int(status["seed"]), batch_size)
        result = train(
            run_dir,
            train_cfg=cfg,
            init_from=start,
            max_minutes=minutes,
            max_datasets=budget,
            device="cpu",
            progress=False,
        )
    train_minutes = (time.monotonic() - t0) / 60.0
    stage_datasets = int(status["stage_offset"]) + result.datasets_seen
    total = int(status["total_offset"]) + result.datasets_seen
    record: dict[str, Any] = {
        "run": run_id,
        "stage": k,
        "stage_name": stage.name,
        "stage_datasets": stage_datasets,
        "datasets_total": total,
        "seed": int(status["seed"]),
        "stopped_by": result.stopped_by,
        "minutes_total": float(status["minutes_offset"]) + _elapsed_minutes(state_dir, k),
        "unix": time.time(),
    }
    if result.last_checkpoint is None:
        record["best_nll"] = status["best_nll"]
        return record
    _export(
        run_dir / "last",
        export_dir / "phase1-latest",
        {"campaign": {"stage": k, "stage_datasets": stage_datasets, "datasets_total": total}},
    )
    if result.stopped_by == "interrupted":
        record["best_nll"] = status["best_nll"]
        return record
    # evaluation: phase-2 copy of the current weights on the fixed campaign set
    ft_dir = state_dir / "finetune"
    if ft_dir.exists():
        shutil.rmtree(ft_dir)
    ft = train(
        ft_dir,
        train_cfg=_finetune_config(int(status["seed"]), batch_size),
        init_from=run_dir / "last",
        max_steps=finetune_steps,
        device="cpu",
        progress=False,
    )
    if ft.stopped_by == "interrupted":
        record["best_nll"] = status["best_nll"]
        record["stopped_by"] = "interrupted"
        return record
    metrics = score_checkpoint(ft_dir / "last", valset)
    phase1 = score_checkpoint(run_dir / "last", valset)
    improved = metrics["nll"] < float(status["best_nll"])
    record.update(
        validation=metrics,
        validation_phase1={"nll": phase1["nll"], "nll_gap": phase1["nll_gap"]},
        improved=improved,
        train_minutes=train_minutes,
        segment_minutes=(time.monotonic() - t0) / 60.0,
    )
    if improved:
        status["best_nll"] = metrics["nll"]
        _export(
            ft_dir / "last",
            export_dir / "best",
            {"campaign": {**record, "valset_seed": VALSET_SEED}},
        )
    record["best_nll"] = status["best_nll"]
    if (
        stage.datasets is not None
        and stage_datasets >= stage.datasets
        and k + 1 < len(CAMPAIGN_STAGES)
    ):
        status.update(
            stage=k + 1,
            stage_offset=0,
            total_offset=total,
            minutes_offset=record["minutes_total"],
            seed=int(status["seed"]) + 1,
        )
    _write_json(state_dir / "campaign.json", status)
    return record


def _elapsed_minutes(state_dir: Path, k: int) -> float:
    last = state_dir / f"stage-{k}" / "last"
    if not last.exists():
        return 0.0
    meta = json.loads((last / "checkpoint.json").read_text())
    return float(meta.get("progress", {}).get("elapsed_s", 0.0)) / 60.0
