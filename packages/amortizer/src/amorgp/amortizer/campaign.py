"""The long training campaign: resumable, low-priority, one thread, in segments.

A campaign trains one network on the paper's prior (``d ~ Geometric(0.25)``
clipped to 8, ``n ~ U{10..n_max}``) through a fixed plan of *stages* (a
curriculum over ``n``: small datasets first), in *segments* of a few minutes.
After every segment it averages the phase-1 weights of the last few segment ends
(stochastic weight averaging, :data:`~amorgp.amortizer.campaign_plan.SWA_MEMBERS`;
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
:func:`~amorgp.amortizer.train.train`) appends a ``"failed"`` record and raises
:class:`~amorgp.kernel_grammar.errors.TrainingError`; nothing is exported from it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.campaign_plan import (
    CAMPAIGN_STAGES,
    SWA_MEMBERS,
    VALSET_BATCHES,
    VALSET_SEED,
    CampaignStage,
    append_record,
    average_weights,
    campaign_validation_set,
    export_weights,
    finetune_config,
    heldout_pairs,
    heldout_scores,
    last_record,
    read_json,
    real_data_scores,
    score_checkpoint,
    stage_train_config,
    write_json,
)
from amorgp.amortizer.checkpoint import load_checkpoint, save_checkpoint
from amorgp.amortizer.config import NetworkConfig, preset
from amorgp.amortizer.model import build_model
from amorgp.amortizer.rundir import RunDirectory
from amorgp.amortizer.runtime import ActiveClock, interruptible
from amorgp.amortizer.train import TrainResult, train
from amorgp.kernel_grammar.errors import OptionError, TrainingError

__all__ = [
    "CAMPAIGN_STAGES",
    "VALSET_SEED",
    "CampaignStage",
    "campaign_validation_set",
    "run_campaign",
    "score_checkpoint",
]

logger = logging.getLogger(__name__)


def _stage_ended(stages: Sequence[CampaignStage], k: int, done: int) -> bool:
    """Whether ``done`` datasets end stage ``k`` and a next stage follows."""
    limit = stages[min(k, len(stages) - 1)].datasets
    return limit is not None and done >= limit and k + 1 < len(stages)


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
    k, done = int(previous["stage"]), int(previous["stage_datasets"])
    total, minutes = int(previous["datasets_total"]), float(previous.get("minutes_total", 0.0))
    if _stage_ended(stages, k, done):
        k, done = k + 1, 0  # the record ended its stage: the next stage starts afresh
    return {
        "stage": k,
        "stage_offset": done,
        "total_offset": total,
        "seed": int(previous.get("seed", 0)) + 1,
        "best_nll": previous.get("best_nll"),
        "minutes_offset": minutes,
    }


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
            (:func:`~amorgp.amortizer.campaign_plan.real_data_scores`, record key ``"real"``).
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
    campaign: _Campaign | None = None
    with interruptible():
        try:
            status = read_json(state_dir / "campaign.json", {}) or _initial_status(log, stages)
            write_json(state_dir / "campaign.json", status)
            if init is None or not Path(init).exists():
                init = _fresh_init(state_dir, network or preset(preset_name).network)
            init_network = load_checkpoint(init).network
            campaign = _Campaign(
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


class _Campaign:
    """The segments of one :func:`run_campaign` call over its status dictionary."""

    def __init__(
        self,
        state_dir: Path,
        export_dir: Path,
        status: dict[str, Any],
        init: Path,
        *,
        stages: tuple[CampaignStage, ...],
        batch_size: int,
        finetune_steps: int,
        segment_datasets: int | None,
        valset: list[Any],
        real_data: Path | None = None,
        swa_members: int = SWA_MEMBERS,
        heldout: list[Any] | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.state_dir, self.export_dir = state_dir, export_dir
        self.status, self.init = status, init
        self.stages, self.batch_size, self.finetune_steps = stages, batch_size, finetune_steps
        self.segment_datasets, self.valset = segment_datasets, valset
        self.real_data = real_data
        if swa_members < 1:
            raise OptionError(f"swa_members must be >= 1, got {swa_members}")
        self.swa_members = swa_members
        self.heldout = heldout
        self.device = device if device is not None else torch.device("cpu")
        self.run_id = f"{socket.gethostname()}-{int(time.time())}"
        self.record: dict[str, Any] = {}

    def run_segments(
        self, log: Path, deadline: float, segment_minutes: float, max_segments: int | None
    ) -> None:
        """Segments until ``deadline`` (monotonic seconds), ``max_segments`` or Ctrl-C.

        Each record is appended to ``log`` and kept in :attr:`record`.
        """
        segments = 0
        while max_segments is None or segments < max_segments:
            left = (deadline - time.monotonic()) / 60.0
            if left <= 0.05:
                break
            try:
                self.record = self.segment(min(left, segment_minutes))
            except TrainingError as err:
                failed = {**self.base_record(), "stopped_by": "failed", "error": str(err)}
                append_record(log, failed)
                raise
            append_record(log, self.record)
            segments += 1
            if self.record["stopped_by"] == "interrupted":
                break

    def _save_status(self) -> None:
        write_json(self.state_dir / "campaign.json", self.status)

    def score_baseline(self, base: Path) -> None:
        """Score the model to beat, the first time only."""
        if self.status["best_nll"] is not None:
            return
        self.status["best_nll"] = score_checkpoint(base, self.valset)["nll"]
        self.status["baseline"] = str(base)
        self.status["baseline_nll"] = self.status["best_nll"]
        self._save_status()
        logger.info("campaign baseline %s: nll %.4f", base, self.status["best_nll"])

    def _stage(self) -> tuple[int, CampaignStage]:
        k = int(self.status["stage"])
        return k, self.stages[min(k, len(self.stages) - 1)]

    def base_record(self) -> dict[str, Any]:
        k, stage = self._stage()
        return {
            "run": self.run_id,
            "stage": k,
            "stage_name": stage.name,
            "seed": int(self.status["seed"]),
            "device": self.device.type,
            "baseline_nll": self.status.get("baseline_nll"),
            "unix": time.time(),
        }

    def segment(self, minutes: float) -> dict[str, Any]:
        """Train one segment, export the phase-1 weights, evaluate a phase-2 copy."""
        k, stage = self._stage()
        with ActiveClock() as clock:  # minutes leave out SIGSTOP pauses
            return self._segment(k, stage, minutes, clock)

    def _segment(
        self, k: int, stage: CampaignStage, minutes: float, clock: ActiveClock
    ) -> dict[str, Any]:
        t0 = clock.now()
        result = self._train(k, stage, minutes)
        train_minutes = (clock.now() - t0) / 60.0
        stage_datasets = int(self.status["stage_offset"]) + result.datasets_seen
        total = int(self.status["total_offset"]) + result.datasets_seen
        record = {
            **self.base_record(),
            "stage_datasets": stage_datasets,
            "datasets_total": total,
            "stopped_by": result.stopped_by,
            "minutes_total": float(self.status["minutes_offset"])
            + _elapsed_minutes(self.state_dir, k),
            "best_nll": self.status["best_nll"],
        }
        if result.last_checkpoint is None:
            return record
        counters = {"stage": k, "stage_datasets": stage_datasets, "datasets_total": total}
        export_weights(
            result.last_checkpoint, self.export_dir / "phase1-latest", {"campaign": counters}
        )
        if result.stopped_by == "interrupted" or not self._evaluate(result, record):
            return record
        record.update(train_minutes=train_minutes, segment_minutes=(clock.now() - t0) / 60.0)
        if _stage_ended(self.stages, k, stage_datasets):
            self.status.update(
                stage=k + 1,
                stage_offset=0,
                total_offset=total,
                minutes_offset=record["minutes_total"],
                seed=int(self.status["seed"]) + 1,
            )
        self._save_status()
        return record

    def _train(self, k: int, stage: CampaignStage, minutes: float) -> TrainResult:
        """Train stage ``k`` for up to ``minutes`` (and ``segment_datasets``)."""
        run_dir = self.state_dir / f"stage-{k}"
        limits = []  # max_datasets counts the run directory's total
        if stage.datasets is not None:
            limits.append(max(stage.datasets - int(self.status["stage_offset"]), 1))
        run = RunDirectory(run_dir)
        resume = run.holds_run()
        done = 0
        if resume:
            ckpt = run.load_resumable()
            prog = ckpt.meta["progress"]
            done = int(prog["datasets_seen"])
            if limits and done >= limits[0]:  # reached before an interruption
                return TrainResult(int(prog["step"]), done, "max_datasets", ckpt.path)
        if self.segment_datasets is not None:
            limits.append(done + self.segment_datasets)
        common: dict[str, Any] = {
            "max_minutes": minutes,
            "max_datasets": min(limits) if limits else None,
            "device": self.device,
            "progress": False,
        }
        if resume:
            return train(run_dir, resume=True, **common)
        latest = self.export_dir / "phase1-latest"
        start = latest if latest.exists() else self.init
        cfg = stage_train_config(stage, int(self.status["seed"]), self.batch_size)
        return train(run_dir, train_cfg=cfg, init_from=start, **common)

    def _average(self, last: Path, total: int, record: dict[str, Any]) -> Path:
        """Add ``last`` to the segment ends kept for averaging (the newest
        :attr:`swa_members`) and return the checkpoint to fine-tune: their average, or
        ``last`` while only one is kept."""
        folder = self.state_dir / "swa"
        export_weights(last, folder / f"{total:012d}", {"campaign": {"datasets_total": total}})
        members = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
        for old in members[: -self.swa_members]:
            shutil.rmtree(old)
        members = members[-self.swa_members :]
        if len(members) < 2:
            return last
        target = self.state_dir / "swa-average"
        average_weights(members, target, {"swa_members": [int(p.name) for p in members]})
        record["swa"] = {
            "members": [int(p.name) for p in members],
            "phase1_nll": score_checkpoint(target, self.valset)["nll"],
        }
        return target

    def _evaluate(self, result: TrainResult, record: dict[str, Any]) -> bool:
        """Fine-tune a phase-2 copy (of the weight average), score it, export it if
        better; False if interrupted."""
        assert result.last_checkpoint is not None
        start = self._average(result.last_checkpoint, int(record["datasets_total"]), record)
        ft_dir = self.state_dir / "finetune"
        if ft_dir.exists():
            shutil.rmtree(ft_dir)
        ft = train(
            ft_dir,
            train_cfg=finetune_config(int(self.status["seed"]), self.batch_size),
            init_from=start,
            max_steps=self.finetune_steps,
            device=self.device,
            progress=False,
        )
        if ft.stopped_by == "interrupted":
            record["stopped_by"] = "interrupted"
            return False
        metrics = score_checkpoint(ft_dir / "last", self.valset)
        phase1 = score_checkpoint(result.last_checkpoint, self.valset)
        improved = metrics["nll"] < float(self.status["best_nll"])
        record.update(
            validation=metrics,
            validation_phase1={"nll": phase1["nll"], "nll_gap": phase1["nll_gap"]},
            improved=improved,
        )
        if self.heldout is not None:
            record["heldout"] = heldout_scores(ft_dir / "last", self.heldout)
        if self.real_data is not None:
            record["real"] = real_data_scores(ft_dir / "last", self.real_data)
        if improved:
            self.status["best_nll"] = metrics["nll"]
            meta = {"campaign": {**record, "valset_seed": VALSET_SEED}}
            export_weights(ft_dir / "last", self.export_dir / "best", meta)
            # the same model before the noise fine-tuning (the pair of paper Fig. 10)
            export_weights(start, self.export_dir / "best-phase1", meta)
        record["best_nll"] = self.status["best_nll"]
        return True


def _elapsed_minutes(state_dir: Path, k: int) -> float:
    last = state_dir / f"stage-{k}" / "last"
    if not last.exists():
        return 0.0
    try:
        meta = json.loads((last / "checkpoint.json").read_text())
    except (OSError, json.JSONDecodeError):
        return 0.0
    return float(meta.get("progress", {}).get("elapsed_s", 0.0)) / 60.0
