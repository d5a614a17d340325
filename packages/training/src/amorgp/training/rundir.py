"""The files of one training run directory: lock, checkpoints, ``last``/``best``, metrics log.

Layout::

    runs/NAME/
      .lock                  held (flock) by the process training in the directory
      metrics.jsonl          one JSON record per logged step, per validation, per failure
      validation/            the fixed validation set (simulator fixed-set format)
      step-00000200/         checkpoints (see :mod:`amorgp.amortizer.networks.checkpoint`)
      last -> step-00000200  the newest checkpoint (symlink, swapped atomically)
      best -> step-00000100  the checkpoint with the lowest validation NLL so far

Only the process holding the lock writes here, so on start every temporary left
by a killed writer (``.step-*``, ``.last.tmp``, ...) is stale and removed.  The
metrics log is rewound to the step of the checkpoint a run resumes from (records
written after it would be written again), and a torn last line is dropped; both
rewrites go through a temporary file and a rename.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from amorgp.amortizer.networks.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.core.errors import CheckpointError, OptionError, TrainingError
from amorgp.simulator import SimulatedBatch, SimulatorConfig, generate_fixed_set, read_fixed_set

try:
    import fcntl
except ImportError:  # not POSIX: runs are not locked
    fcntl = None  # type: ignore[assignment]

__all__ = ["RunDirectory"]

logger = logging.getLogger(__name__)

METRICS = "metrics.jsonl"
LOCK = ".lock"
_TEMPORARIES = (".step-*", ".last.tmp", ".best.tmp", ".validation.*", f".{METRICS}.tmp")


class RunDirectory:
    """One run directory (rank 0 writes; every rank may read checkpoints).

    Args:
        path: the directory (created by :meth:`lock`).
        keep: newest step checkpoints kept besides the ones ``last`` and ``best`` name.
    """

    def __init__(self, path: Path, keep: int = 2) -> None:
        self.path = path
        self.keep = keep
        self._lock: IO[str] | None = None
        self._metrics: IO[str] | None = None

    # -- ownership --------------------------------------------------------------------
    def lock(self) -> None:
        """Create the directory and take its lock.

        Raises:
            OptionError: the path is a file.
            TrainingError: another process holds the lock (is training here).
        """
        if self.path.exists() and not self.path.is_dir():
            raise OptionError(f"{self.path} is a file, not a run directory")
        self.path.mkdir(parents=True, exist_ok=True)
        handle = (self.path / LOCK).open("a+")
        self._lock = handle  # closed by close() whatever happens next
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                handle.close()
                self._lock = None
                raise TrainingError(
                    f"{self.path} is in use: {holder} is training in it; wait for it to "
                    "finish or choose another directory"
                ) from None
        # the holder's line goes straight to the file (no buffer): on a full disk the
        # write fails here, and closing the lock has nothing left to flush
        os.ftruncate(handle.fileno(), 0)
        os.write(handle.fileno(), f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._lock = handle

    @property
    def locked(self) -> bool:
        """Whether this object holds the directory's lock."""
        return self._lock is not None

    def close(self) -> None:
        """Close the metrics log and release the lock, both whatever happens.

        Raises:
            OSError: closing the metrics log or the lock failed (a full disk flushing
                the log's last record); both are closed and the lock released anyway.
        """
        metrics, self._metrics = self._metrics, None
        lock, self._lock = self._lock, None
        try:
            if metrics is not None:
                metrics.close()
        finally:
            if lock is not None:
                lock.close()  # closing the file releases the flock, even if it raises

    def clean_stale(self, before: float) -> list[Path]:
        """Remove temporaries of killed writers modified before ``before`` (Unix time)."""
        removed = []
        for pattern in _TEMPORARIES:
            for p in self.path.glob(pattern):
                if p.lstat().st_mtime >= before:
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                removed.append(p)
        if removed:
            logger.info("removed stale temporaries %s", sorted(p.name for p in removed))
        return removed

    # -- checkpoints ------------------------------------------------------------------
    def step_dirs(self) -> list[Path]:
        """The ``step-*`` checkpoint directories, oldest first."""
        return sorted(p for p in self.path.glob("step-*") if p.is_dir())

    def holds_run(self) -> bool:
        """Whether the directory holds checkpoints of a run."""
        last = self.path / "last"
        return last.is_symlink() or last.exists() or bool(self.step_dirs())

    def load_resumable(self) -> Checkpoint:
        """The newest intact checkpoint: ``last``, else the newest ``step-*`` that verifies.

        A ``last`` that fails verification (truncated, bit-flipped, missing files) is
        skipped with a logged warning naming the problem and the checkpoint used instead.

        Raises:
            OptionError: the directory holds no run.
            CheckpointError: no checkpoint verifies (every problem is listed).
        """
        last = self.path / "last"
        if not self.holds_run():
            raise OptionError(f"nothing to resume: {last} does not exist")
        named = last.resolve() if last.exists() else None
        candidates = [named or last] if last.is_symlink() or last.exists() else []
        candidates += [p for p in reversed(self.step_dirs()) if p.resolve() != named]
        problems: list[str] = []
        for candidate in candidates:
            try:
                ckpt = load_checkpoint(candidate)
                if not {"progress", "train", "optimizer"} <= set(ckpt.meta):
                    raise CheckpointError(
                        f"{candidate} is not a resumable training checkpoint "
                        "(no progress, recipe or optimiser state)"
                    )
            except CheckpointError as err:
                problems.append(str(err))
                continue
            if problems:
                logger.warning(
                    "cannot resume from the newest checkpoint (%s); resuming from %s instead",
                    "; ".join(problems),
                    candidate,
                )
            return ckpt
        raise CheckpointError(
            f"no intact checkpoint to resume in {self.path}: " + "; ".join(problems)
        )

    def write_checkpoint(
        self,
        step: int,
        model: nn.Module,
        network: NetworkConfig,
        optimizer: torch.optim.Optimizer,
        meta: dict[str, Any],
        *,
        best: bool,
    ) -> Path:
        """Save ``step-{step}``, point ``last`` (and ``best`` if ``best``) at it, prune."""
        target = self.path / f"step-{step:08d}"
        save_checkpoint(
            target,
            model,
            network,
            optimizer=optimizer,
            extra_tensors={"rng/torch": torch.get_rng_state()},
            meta=meta,
            overwrite=True,
        )
        self._point("last", target)
        if best:
            self._point("best", target)
        self._prune()
        return target

    def restore_best(self, step: int | None) -> bool:
        """Point ``best`` at ``step-{step}`` if that checkpoint exists, else remove it.

        Returns:
            Whether ``best`` now names that checkpoint.
        """
        target = None if step is None else self.path / f"step-{step:08d}"
        if target is not None and target.is_dir():
            self._point("best", target)
            return True
        (self.path / "best").unlink(missing_ok=True)
        return False

    def named(self, link: str) -> Path | None:
        """The checkpoint ``last`` or ``best`` names (``None`` if none)."""
        path = self.path / link
        return path.resolve() if path.exists() else None

    def _point(self, link: str, target: Path) -> None:
        tmp = self.path / f".{link}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target.name)
        os.replace(tmp, self.path / link)

    def _prune(self) -> None:
        steps = self.step_dirs()
        keep = {p.resolve() for p in steps[-self.keep :]}
        keep |= {p for p in (self.named("last"), self.named("best")) if p is not None}
        for old in steps:
            if old.resolve() not in keep:
                shutil.rmtree(old, ignore_errors=True)

    # -- metrics log ------------------------------------------------------------------
    def rewind_metrics(self, step: int) -> int:
        """Drop records after ``step`` and torn lines from the metrics log (atomically).

        Returns:
            The number of lines dropped.
        """
        path = self.path / METRICS
        if not path.exists():
            return 0
        text = path.read_text(errors="replace")
        kept, dropped = [], 0
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                late = int(record.get("step", 0)) > step
            except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
                late = True  # a torn line from a killed writer
            if late:
                dropped += 1
            else:
                kept.append(line + "\n")
        if dropped or (text and not text.endswith("\n")):
            tmp = self.path / f".{METRICS}.tmp"
            tmp.write_text("".join(kept))
            os.replace(tmp, path)
        if dropped:
            logger.warning("%s: dropped %d record(s) after step %d", path, dropped, step)
        return dropped

    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON record to the metrics log."""
        if self._metrics is None:
            self._metrics = (self.path / METRICS).open("a")
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()

    # -- validation set ---------------------------------------------------------------
    def validation_set(
        self, sim_cfg: SimulatorConfig, train_cfg: TrainConfig
    ) -> list[SimulatedBatch]:
        """The fixed validation set of the run (drawn and written once, then read).

        A stored set drawn with another simulator config, seed or size (left by a
        killed run with other settings), or one that does not read, is drawn again
        (drawing is deterministic, so a matching set is never changed).
        """
        path = self.path / "validation"
        size = min(train_cfg.val_size, 64)
        n_batches = -(-train_cfg.val_size // size)
        seed = train_cfg.seed + 7_777_777
        wanted = {"seed": seed, "n_batches": n_batches, "batch_size": size}
        if path.exists():
            try:
                fixed = read_fixed_set(path)
                stored = {k: fixed.metadata.get(k) for k in wanted}
                if fixed.config == sim_cfg and stored == wanted:
                    return list(fixed.batches)
                problem = "was drawn with other settings"
            except ValueError as err:
                problem = f"does not read ({err})"
            logger.warning("%s %s; drawing it again", path, problem)
        fixed = generate_fixed_set(
            path, sim_cfg, n_batches=n_batches, batch_size=size, seed=seed, overwrite=True
        )
        return list(fixed.batches)
