"""The training loop of :func:`amorgp.training.train.train`: a trainer over a run state.

:class:`Trainer` runs chunks of ``val_every`` optimiser steps; after each chunk
it validates on the run's fixed set and writes a checkpoint (``last``, and
``best`` when the validation NLL is the lowest so far).  A step whose loss is not
finite, whose weights become non-finite, or in which every dataset of the batch
failed stops the run with :class:`~amorgp.core.errors.TrainingError`,
as does a validation in which every dataset failed; no checkpoint is written
then, so ``last`` keeps the newest finite one.

Off the CPU a step never waits for the device: its diagnostics (loss, gradient norm,
datasets used and failed) stay on the device and are read back together every
``log_every`` steps, and before any validation, checkpoint or stop; the weights are
checked for non-finite values at those reads too.  A divergence is then reported with
the step at which it happened, and no checkpoint is written from a diverged state.  On
the CPU (and in a multi-process run) every step is read back at once.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from amorgp.amortizer.networks.checkpoint import optimizer_from_tensors
from amorgp.core.errors import OptionError, TrainingError
from amorgp.simulator import SimulatedBatch, stream_seed
from amorgp.training.realtables import RealTables, mix_real
from amorgp.training.rundir import RunDirectory
from amorgp.training.runstate import Budget, RunStart
from amorgp.training.runtime import (
    ActiveClock,
    Distributed,
    deferred_sigint,
    simulated_batches,
)
from amorgp.training.steps import (
    TrainResult,
    make_stream,
    simulator_config,
    training_loss,
    validate,
)

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)


def _step_problem(loss: float, n_used: int, n_failed: int) -> str:
    """What makes a step unusable (non-finite loss, nothing used), or ``""``."""
    if not math.isfinite(loss):
        return f"the training loss is {loss}"
    if n_used == 0 and n_failed > 0:
        return f"every dataset of the batch failed ({n_failed} failed Cholesky factorisations or non-finite predictions)"
    return ""


def _weights_problem(model: nn.Module) -> str:
    """Non-finite weights (one read of one flag per tensor), or ``""``."""
    named = list(model.named_parameters())
    finite = torch.stack([torch.isfinite(p).all() for _, p in named]).tolist()
    bad = [name for (name, _), ok in zip(named, finite, strict=True) if not ok]
    if bad:
        return f"non-finite weights in {len(bad)} tensor(s), e.g. {bad[0]!r}"
    return ""


class _Pending(NamedTuple):
    """A step whose diagnostics are still on the device."""

    step: int
    datasets_seen: int
    lr: float
    stats: Tensor  # float64 (loss, grad norm, datasets used, datasets failed, real datasets)


class Trainer:
    """Runs one call of training over a :class:`~amorgp.training.runstate.RunState`.

    Args:
        run: the run directory (locked by rank 0).
        start: model, configs, state, and the checkpoint to restore (if resuming).
        budget: when to stop.
        device: where to train.
        ddp: the process group (one process: world 1).
        progress: show a progress bar (only on a terminal, only on rank 0).
        log_every: steps between JSONL training records.
        tables: the pool of real tables that replaces ``train_cfg.real_share`` of each
            batch's datasets (:func:`~amorgp.training.realtables.mix_real`; their count is
            ``n_real`` in the training records).
    """

    def __init__(
        self,
        run: RunDirectory,
        start: RunStart,
        budget: Budget,
        device: torch.device,
        ddp: Distributed,
        *,
        progress: bool = True,
        log_every: int = 10,
        tables: RealTables | None = None,
    ) -> None:
        self.run, self.budget, self.dev, self.ddp = run, budget, device, ddp
        self.tables = tables
        self.model, self.network, self.cfg = start.model, start.network, start.train_cfg
        self.state = start.state
        self.vocab = self.network.vocabulary
        self.sim_cfg = simulator_config(self.network, self.cfg)
        if self.cfg.batch_size % ddp.world:
            raise OptionError(
                f"batch_size {self.cfg.batch_size} is not divisible by the world size {ddp.world}"
            )
        self.per_rank = self.cfg.batch_size // ddp.world
        self.is_main = ddp.rank == 0
        self.show_progress, self.log_every = progress, log_every
        self.model.to(device).train()
        self.net: nn.Module = self.model
        if ddp.active:
            ids = [device.index] if device.type == "cuda" else None
            self.net = nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = torch.optim.RAdam(
            [p for p in self.model.parameters() if p.requires_grad],  # train_only's
            lr=self.cfg.lr,
            weight_decay=self.cfg.weight_decay,
        )
        if start.resume_from is not None:
            ckpt = start.resume_from
            optimizer_from_tensors(self.optimizer, ckpt.optimizer_tensors, ckpt.meta["optimizer"])
            if "rng/torch" in ckpt.optimizer_tensors:
                torch.set_rng_state(ckpt.optimizer_tensors["rng/torch"])
        self.losses: list[float] = []
        # steps between reads of the step diagnostics (each read is a host sync)
        self._read_every = 1 if device.type == "cpu" or ddp.active else max(1, log_every)
        self._pending: list[_Pending] = []
        self.last_checkpoint: Path | None = None
        self.val_batches: list[SimulatedBatch] = []
        self._clock = ActiveClock()  # training time leaves out SIGSTOP pauses
        self._t0 = self._window_t0 = self._clock.now()
        self._window_datasets = 0
        self._bar: Any = None
        self._interrupt = threading.Event()

    # -- the loop ---------------------------------------------------------------------
    def run_all(self) -> TrainResult:
        """Train until a budget is reached or Ctrl-C; checkpoint after every chunk."""
        self._open()
        stopped_by = ""
        try:
            with self._clock, deferred_sigint() as self._interrupt:
                while not stopped_by:
                    stopped_by = self._run_chunk()
                    self._end_of_chunk()
        except KeyboardInterrupt:
            stopped_by = "interrupted"
            step, problem = self._read_back()
            if problem:
                self._fail(f"training diverged at step {step}: {problem}")
            self._checkpoint(best=False)
        finally:
            if self._bar is not None:
                self._bar.close()
        s = self.state
        best = self.run.named("best") if self.is_main else None
        return TrainResult(
            s.step,
            s.datasets_seen,
            stopped_by,
            self.last_checkpoint,
            s.validation,
            self.losses,
            best,
        )

    def _open(self) -> None:
        if self.is_main:
            self.run.rewind_metrics(self.state.step)
            if not self.run.restore_best(self.state.best_step):
                self.state.best_nll = self.state.best_step = None
            self.val_batches = self.run.validation_set(self.sim_cfg, self.cfg)
            if self.show_progress and sys.stderr.isatty():
                from tqdm import tqdm

                self._bar = tqdm(
                    total=self.budget.max_steps,
                    initial=self.state.step,
                    unit="step",
                    dynamic_ncols=True,
                )
        self.ddp.barrier()
        self._t0 = self._window_t0 = self._clock.now()

    def _elapsed(self) -> float:
        return self.state.elapsed_before + self._clock.now() - self._t0

    def _run_chunk(self) -> str:
        """Steps up to the end of the current chunk; returns the budget reached or ``""``."""
        chunk, offset = divmod(self.state.step, self.cfg.val_every)
        stream = make_stream(
            self.sim_cfg, self.per_rank, self.cfg.seed, self.ddp.rank, chunk, self.cfg.val_every
        )
        for batch in simulated_batches(stream, self.cfg.num_workers, offset):
            self._step(batch)
            reason = self.budget.reached(self.state, (self._clock.now() - self._t0) / 60.0)
            reason = "interrupted" if self._interrupt.is_set() else reason
            chunk_ends = self.state.step % self.cfg.val_every == 0
            step, problem = self.state.step, ""
            if reason or chunk_ends or len(self._pending) >= self._read_every:
                step, problem = self._read_back()
            failed, stop = self.ddp.any(bool(problem), bool(reason))
            if failed:
                self._fail(f"training diverged at step {step}: {problem or 'on another rank'}")
            if stop:
                return reason or "other_rank"
            if chunk_ends:
                break
        return ""

    def _lr(self) -> float:
        warmup = self.cfg.warmup_steps
        return self.cfg.lr * min(1.0, (self.state.step + 1) / warmup) if warmup else self.cfg.lr

    def _step(self, batch: SimulatedBatch) -> None:
        """One optimiser step; its diagnostics are queued on the device (:meth:`_read_back`)."""
        seed = stream_seed(self.cfg.seed, self.state.step + 1, 2 + self.ddp.rank)
        gen = torch.Generator(device=self.dev).manual_seed(seed)
        n_real = 0
        if self.tables is not None:  # on the host, as drawn (given only where real_share > 0)
            mix = stream_seed(self.cfg.seed, self.state.step + 1, 1_000 + self.ddp.rank)
            batch, n_real = mix_real(
                batch, self.tables, self.cfg.real_share, torch.Generator().manual_seed(mix)
            )
        if self.dev.type == "cuda":  # an asynchronous copy from page-locked memory
            batch = batch.pin_memory().to(self.dev, non_blocking=True)
        else:
            batch = batch.to(self.dev)
        lr = self._lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        result = training_loss(self.net, batch, self.vocab, self.cfg, gen)
        self.optimizer.zero_grad(set_to_none=True)
        result.loss.backward()
        clip = self.cfg.grad_clip
        f64 = torch.float64
        if clip > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), clip).to(f64)
        else:
            grad_norm = torch.full((), math.nan, dtype=f64, device=self.dev)
        self.optimizer.step()
        self.state.step += 1
        self.state.datasets_seen += self.per_rank * self.ddp.world
        self._window_datasets += self.per_rank * self.ddp.world
        used = result.used.sum().to(f64)
        stats = torch.stack(
            [
                result.loss.detach().to(f64),
                grad_norm,
                used,
                result.n_failed.to(f64),
                torch.full((), n_real, dtype=f64, device=self.dev),
            ]
        )
        self._pending.append(_Pending(self.state.step, self.state.datasets_seen, lr, stats))

    def _read_back(self) -> tuple[int, str]:
        """Read the queued steps' diagnostics (one host sync), log them, check the weights.

        Returns:
            The step of the first problem and what it is, or ``(current step, "")``.
        """
        pending, self._pending = self._pending, []
        if pending:
            rows = torch.stack([p.stats for p in pending]).tolist()
            for p, (loss, grad_norm, n_used, n_failed, n_real) in zip(pending, rows, strict=True):
                self.losses.append(loss)
                problem = _step_problem(loss, int(n_used), int(n_failed))
                if problem:
                    return p.step, problem
                self._log_step(p, loss, int(n_used), int(n_failed), grad_norm, int(n_real))
        return self.state.step, _weights_problem(self.model)

    def _log_step(
        self, p: _Pending, loss: float, n_used: int, n_failed: int, grad_norm: float, n_real: int
    ) -> None:
        if self.is_main and p.step % self.log_every == 0:
            now = self._clock.now()
            rate = self._window_datasets / max(now - self._window_t0, 1e-9)
            self._window_t0, self._window_datasets = now, 0
            self.run.log(
                {
                    "kind": "train",
                    "phase": self.cfg.phase,
                    "step": p.step,
                    "datasets_seen": p.datasets_seen,
                    "loss": loss,
                    "n_used": n_used,
                    "n_failed": n_failed,
                    **({"n_real": n_real} if self.tables is not None else {}),
                    "lr": p.lr,
                    "grad_norm": grad_norm,
                    "datasets_per_s": rate,
                    "elapsed_s": self._elapsed(),
                }
            )
            if self._bar is not None:
                self._bar.set_postfix(loss=f"{loss:.3f}", ds_per_s=f"{rate:.1f}")
        if self._bar is not None:
            self._bar.update(1)

    def _where(self, kind: str) -> dict[str, Any]:
        s = self.state
        return {
            "kind": kind,
            "phase": self.cfg.phase,
            "step": s.step,
            "datasets_seen": s.datasets_seen,
        }

    # -- validation, checkpoints, failures --------------------------------------------
    def _end_of_chunk(self) -> None:
        problem, best = self._validate() if self.is_main else ("", False)
        (failed,) = self.ddp.any(bool(problem))
        if failed:
            self._fail(f"validation failed at step {self.state.step}: {problem or 'on rank 0'}")
        self._checkpoint(best=best)
        self.ddp.barrier()

    def _validate(self) -> tuple[str, bool]:
        """Validate (rank 0); returns (what failed or ``""``, whether it is a new best)."""
        metrics = validate(self.model, self.val_batches, self.vocab, self.dev)
        if metrics.get("n_datasets", 0) == 0:
            n = int(metrics.get("n_failed", 0))
            return f"every validation dataset failed ({n} failed, none could be scored)", False
        if not math.isfinite(metrics["nll"]):
            return f"the validation NLL is {metrics['nll']}", False
        self.run.log({**self._where("validation"), **metrics})
        logger.info("step %d: validation %s", self.state.step, metrics)
        return "", self.state.record_validation(metrics)

    def _checkpoint(self, *, best: bool) -> None:
        if not self.is_main:
            return
        s = self.state
        progress = {
            "phase": self.cfg.phase,
            "step": s.step,
            "datasets_seen": s.datasets_seen,
            "chunk": s.step // self.cfg.val_every,
            "chunk_offset": s.step % self.cfg.val_every,
            "world_size": self.ddp.world,
            "device": self.dev.type,
            "elapsed_s": self._elapsed(),
            "best": {"step": s.best_step, "nll": s.best_nll},
        }
        meta = {
            "train": self.cfg.to_dict(),
            "simulator": self.sim_cfg.to_dict(),
            "progress": progress,
            "history": s.history,
            "validation": s.validation,
        }
        self.last_checkpoint = self.run.write_checkpoint(
            s.step, self.model, self.network, self.optimizer, meta, best=best
        )

    def _fail(self, problem: str) -> None:
        """Log the failure and raise; ``last`` keeps the newest finite checkpoint."""
        kept = self.run.named("last")
        where = (
            f"{self.run.path / 'last'} still names {kept.name}, the newest finite checkpoint"
            if kept
            else "no checkpoint had been written yet"
        )
        message = (
            f"{problem}. Stopped without writing a checkpoint; {where}. Lower lr or keep "
            "grad_clip > 0 (a new run, or init_from an earlier checkpoint)"
        )
        if self.is_main:
            self.run.log({**self._where("failure"), "error": message})
        raise TrainingError(message)
