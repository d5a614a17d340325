"""The segments of one campaign call: train, average, fine-tune a copy, score, export.

:class:`CampaignSegments` holds the campaign's status dictionary (``STATE/campaign.json``,
see :mod:`amorgp.training.campaign`) and runs the segments of one
:func:`~amorgp.training.campaign.run_campaign` call: each trains the current stage for a
few minutes (an ``amorgp train`` run directory, resumed exactly), exports the phase-1
weights, averages the last segment ends, fine-tunes a phase-2 copy of the average, scores
it on the fixed validation set (and the held-out pairs and real datasets when given) and
exports it when it beats the best so far.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from amorgp.core.errors import OptionError, TrainingError
from amorgp.training.campaign_plan import (
    SWA_MEMBERS,
    VALSET_SEED,
    CampaignStage,
    append_record,
    average_weights,
    export_weights,
    finetune_config,
    heldout_scores,
    real_data_scores,
    score_checkpoint,
    stage_train_config,
    write_json,
)
from amorgp.training.rundir import RunDirectory
from amorgp.training.runtime import ActiveClock
from amorgp.training.train import TrainResult, train

__all__ = ["CampaignSegments", "stage_ended"]

logger = logging.getLogger("amorgp.training.campaign")


def stage_ended(stages: Sequence[CampaignStage], k: int, done: int) -> bool:
    """Whether ``done`` datasets end stage ``k`` and a next stage follows."""
    limit = stages[min(k, len(stages) - 1)].datasets
    return limit is not None and done >= limit and k + 1 < len(stages)


class CampaignSegments:
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
        if stage_ended(self.stages, k, stage_datasets):
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
