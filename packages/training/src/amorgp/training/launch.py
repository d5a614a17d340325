"""Starting and closing a training run (:func:`amorgp.training.train.train`): lock the
run directory, build the start (:func:`~amorgp.training.runstate.start_run`), refuse
before any work what cannot run, leaving no half-created run behind, then hand over to
the loop (:class:`~amorgp.training.trainer.Trainer`) and release the directory whatever
happens."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.core.errors import DataError, TrainingError
from amorgp.training.realtables import RealTables
from amorgp.training.rundir import RunDirectory
from amorgp.training.runstate import Budget, check_step_memory, start_run
from amorgp.training.runtime import Distributed, default_device
from amorgp.training.steps import TrainResult
from amorgp.training.trainer import Trainer

__all__ = ["real_tables", "run_training"]


def _start_error(out: Path, err: OSError, removed: bool) -> str:
    """The one-line message of a run that could not start (a full disk, no permission)."""
    reason = "no space left on device" if err.errno == errno.ENOSPC else err.strerror or str(err)
    where = f" ({err.filename})" if err.filename else ""
    left = f"; {out} was removed" if removed else ""
    return f"cannot start the run in {out}: {reason}{where}{left}"


def real_tables(cfg: TrainConfig) -> RealTables | None:
    """The pool of real tables ``cfg`` mixes into its batches (``None`` where
    ``real_share`` is 0), read before any work starts.

    Raises:
        TrainingError: the pool cannot be read.
    """
    if cfg.real_share <= 0:
        return None
    try:
        return RealTables.load(cfg.real_tables)
    except (DataError, OSError, ValueError) as err:
        raise TrainingError(f"real_tables {cfg.real_tables!r}: {err}") from err


def run_training(
    out: Path,
    network: NetworkConfig | None,
    train_cfg: TrainConfig | None,
    budget: Budget,
    *,
    resume: bool,
    init_from: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any] | None,
    device: torch.device | str | None,
    progress: bool,
    log_every: int,
) -> TrainResult:
    """Lock the run directory, build the start, train (see :func:`~amorgp.training.train.train`)."""
    started = time.time()
    dev = torch.device(device) if device is not None else default_device()
    ddp = Distributed(dev)
    run = RunDirectory(out)
    fresh = ddp.rank == 0 and not Path(out).exists()
    try:
        try:
            if ddp.rank == 0 and resume == run.holds_run():  # else start_run refuses
                run.lock()
                run.clean_stale(started)
            start = start_run(
                run, network, train_cfg, resume=resume, init_from=init_from, overrides=overrides
            )
            check_step_memory(start.train_cfg)
            budget.check_reachable(start.state, out)
            tables = real_tables(start.train_cfg)
        except BaseException as err:
            # refused or failed before any work: leave no half-created run (.lock) behind,
            # unless another process holds the folder; releasing the lock may fail too
            # on a full disk, which must not keep the folder
            removed = fresh and (run.locked or not isinstance(err, TrainingError))
            if removed:
                with contextlib.suppress(OSError):
                    run.close()
                shutil.rmtree(out, ignore_errors=True)
            if isinstance(err, OSError):
                raise TrainingError(_start_error(out, err, removed)) from err
            raise
        trainer = Trainer(
            run, start, budget, dev, ddp, progress=progress, log_every=log_every, tables=tables
        )
        return trainer.run_all()
    except BaseException:
        with contextlib.suppress(OSError):  # the error in flight is the one to report
            run.close()
        raise
    finally:
        try:
            run.close()  # releases the lock even when closing the metrics log fails
        finally:
            ddp.close()
