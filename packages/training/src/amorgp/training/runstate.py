"""The state of a training run: progress counters, budgets, and how a run starts.

A run starts in one of three ways (see :func:`start_run`):

* **new**: a network and a recipe, an empty run directory, weights drawn with the
  recipe's seed;
* **resume**: everything from the run directory's newest intact checkpoint
  (weights, optimiser and RNG state, progress, recipe); a network, recipe or
  override given beside ``resume`` must equal the stored one, else the call is
  refused with the differing fields listed;
* **init_from**: the weights (and architecture) of another checkpoint with a fresh
  optimiser, e.g. phase 2 after phase 1.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amorgp.amortizer.networks.checkpoint import Checkpoint, load_checkpoint
from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.amortizer.networks.model import build_model
from amorgp.core.errors import CheckpointError, OptionError
from amorgp.training.rundir import RunDirectory

__all__ = [
    "MAX_KERNEL_BYTES",
    "TRAINING_RECORD",
    "Budget",
    "RunStart",
    "RunState",
    "check_step_memory",
    "config_differences",
    "freeze_untrained",
    "start_run",
    "training_record",
]

TRAINING_RECORD = ("train", "simulator", "progress", "history")
"""The ``checkpoint.json`` entries that say how a checkpoint's weights were trained: its
recipe, its simulator, its own progress and that of the runs before it.  Every copy of
the weights that training may continue from (exports, averages, conversions) keeps them,
so that ``--from`` continues the recipe and the datasets seen are counted over the chain."""


def training_record(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`TRAINING_RECORD` entries of a checkpoint's ``meta`` (those it has)."""
    return {k: meta[k] for k in TRAINING_RECORD if k in meta}


MAX_KERNEL_BYTES = 4 * 2**30
"""Largest float64 kernel-matrix memory of one step, ``datasets x n_max^2 x 8`` bytes,
with ``datasets`` the larger of ``batch_size`` and a validation batch (``val_size``, at
most 64): 4 GiB, 64 times the paper's recipe (128 x 250^2 x 8 bytes = 64 MB).  The
loss, its Cholesky factors and the simulator hold a few such matrices at once."""


def step_kernel_bytes(cfg: TrainConfig) -> int:
    """Bytes of the float64 ``n_max x n_max`` kernel matrices of one step of ``cfg``
    (the training batch or a validation batch, whichever is larger)."""
    return max(cfg.batch_size, min(cfg.val_size, 64)) * cfg.n_max**2 * 8


def check_step_memory(cfg: TrainConfig) -> None:
    """Refuse a recipe whose kernel matrices would pass :data:`MAX_KERNEL_BYTES`: the
    linear bound of :class:`~amorgp.amortizer.networks.config.TrainConfig` (``batch_size *
    n_max`` points) lets ``n_max=20000`` through, whose matrices are 3.2 GB each.

    Raises:
        OptionError: naming the options and the memory the step would need.
    """
    need = step_kernel_bytes(cfg)
    if need <= MAX_KERNEL_BYTES:
        return
    datasets = max(cfg.batch_size, min(cfg.val_size, 64))
    largest = math.isqrt(MAX_KERNEL_BYTES // (8 * datasets))
    raise OptionError(
        f"batch_size={cfg.batch_size}, val_size={cfg.val_size}, n_max={cfg.n_max}: a step "
        f"holds {datasets} float64 kernel matrices of n_max^2 x 8 bytes, "
        f"{datasets} x {cfg.n_max}^2 x 8 = {need / 1e9:.3g} GB, more than the "
        f"{MAX_KERNEL_BYTES / 1e9:.3g} GB ({MAX_KERNEL_BYTES // 2**30} GiB) a step may use; "
        f"lower n_max (at most {largest} with these batch sizes) or batch_size and val_size"
    )


@dataclass
class RunState:
    """Progress of a run, carried from checkpoint to checkpoint.

    Attributes:
        step: optimiser steps done (over resumes).
        datasets_seen: datasets consumed, summed over ranks.
        elapsed_before: training seconds of earlier calls (resumes).
        history: progress records of earlier phases (``init_from`` chains).
        validation: the latest successful validation metrics.
        best_nll: the lowest validation NLL so far (``None`` before the first validation).
        best_step: the step at which ``best_nll`` was reached.
    """

    step: int = 0
    datasets_seen: int = 0
    elapsed_before: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    validation: dict[str, float] = field(default_factory=dict)
    best_nll: float | None = None
    best_step: int | None = None

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RunState:
        """The state stored in a checkpoint's ``checkpoint.json``."""
        prog = meta["progress"]
        best = prog.get("best") or {}
        return cls(
            step=int(prog["step"]),
            datasets_seen=int(prog["datasets_seen"]),
            elapsed_before=float(prog["elapsed_s"]),
            history=list(meta.get("history", [])),
            validation=dict(meta.get("validation", {})),
            best_nll=None if best.get("nll") is None else float(best["nll"]),
            best_step=None if best.get("step") is None else int(best["step"]),
        )

    def record_validation(self, metrics: dict[str, float]) -> bool:
        """Keep ``metrics`` as the latest validation; True if its NLL is a new best."""
        self.validation = dict(metrics)
        if self.best_nll is not None and not metrics["nll"] < self.best_nll:
            return False
        self.best_nll, self.best_step = float(metrics["nll"]), self.step
        return True


@dataclass(frozen=True)
class Budget:
    """When a call of :func:`~amorgp.training.train.train` stops (the first one reached).

    Attributes:
        max_steps: total optimiser steps of the run (over resumes), a positive integer.
        max_datasets: total datasets of the run (over resumes), a positive integer.
        max_minutes: wall-clock minutes of this call, positive (``inf``: until interrupted).

    Raises:
        OptionError: no budget, or a value outside its domain (checked on construction,
            before any work).
    """

    max_steps: int | None = None
    max_datasets: int | None = None
    max_minutes: float | None = None

    def __post_init__(self) -> None:
        if self.max_steps is None and self.max_datasets is None and self.max_minutes is None:
            raise OptionError("give at least one budget: max_minutes, max_datasets or max_steps")
        for name in ("max_steps", "max_datasets"):
            value = getattr(self, name)
            ok = (
                isinstance(value, numbers.Integral)
                and not isinstance(value, bool)
                and int(value) >= 1
            )
            if value is not None and not ok:
                raise OptionError(f"{name} must be a positive integer, got {value!r}")
        minutes = self.max_minutes
        if minutes is not None:
            if isinstance(minutes, bool) or not isinstance(minutes, numbers.Real):
                raise OptionError(f"max_minutes must be a positive number, got {minutes!r}")
            if math.isnan(minutes) or minutes <= 0:
                raise OptionError(f"max_minutes must be positive, got {minutes!r}")

    def check_reachable(self, state: RunState, where: Path) -> None:
        """Refuse a resumed run that is already at or past its step or dataset budget."""
        for name, done, limit in (
            ("max_steps", state.step, self.max_steps),
            ("max_datasets", state.datasets_seen, self.max_datasets),
        ):
            if limit is not None and done >= limit:
                unit = name.removeprefix("max_")
                raise OptionError(
                    f"the run in {where} is already at {done} {unit}, at or past "
                    f"{name}={limit} ({name} counts the run's total {unit}, over resumes); "
                    f"nothing to train: give a {name} above {done}"
                )

    def reached(self, state: RunState, minutes: float) -> str:
        """The name of the budget reached, or ``""``."""
        if self.max_steps is not None and state.step >= self.max_steps:
            return "max_steps"
        if self.max_datasets is not None and state.datasets_seen >= self.max_datasets:
            return "max_datasets"
        if self.max_minutes is not None and minutes >= self.max_minutes:
            return "max_minutes"
        return ""


def config_differences(
    given: Mapping[str, Any], stored: Mapping[str, Any], prefix: str = ""
) -> list[str]:
    """``"name: given X, stored Y"`` for every field of ``given`` that differs from ``stored``."""
    return [
        f"{prefix}{key}: given {value!r}, stored {stored.get(key)!r}"
        for key, value in given.items()
        if stored.get(key) != value
    ]


def _with_overrides(cfg: TrainConfig, overrides: Mapping[str, Any] | None) -> TrainConfig:
    if not overrides:
        return cfg
    try:
        return TrainConfig.from_dict({**cfg.to_dict(), **overrides})
    except (TypeError, ValueError) as err:
        raise OptionError(f"invalid training option: {err}") from err


@dataclass
class RunStart:
    """What a run starts from: model, configs, state, and the checkpoint to restore."""

    model: nn.Module
    network: NetworkConfig
    train_cfg: TrainConfig
    state: RunState
    resume_from: Checkpoint | None = None


def start_run(
    run: RunDirectory,
    network: NetworkConfig | None,
    train_cfg: TrainConfig | None,
    *,
    resume: bool,
    init_from: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any] | None,
) -> RunStart:
    """Build the starting point of a run (see the module docstring).  The model's
    parameters that the recipe does not train (``TrainConfig.train_only``) stop requiring
    gradients (:func:`freeze_untrained`), so a prefix that names none is refused here,
    before any work.

    Raises:
        OptionError: conflicting or missing arguments, a resume whose given
            configuration differs from the stored one (the fields are listed), a
            ``train_only`` prefix that names no parameter.
        CheckpointError: no intact checkpoint to resume or start from.
    """
    start = _start(run, network, train_cfg, resume=resume, init_from=init_from, overrides=overrides)
    freeze_untrained(start.model, start.train_cfg.trained_prefixes)
    return start


def freeze_untrained(model: nn.Module, prefixes: tuple[str, ...]) -> None:
    """Leave gradients on the parameters of ``model`` whose names start with one of
    ``prefixes`` and stop them on the others (``TrainConfig.train_only``; nothing changes
    if ``prefixes`` is empty).

    Raises:
        OptionError: a prefix names no parameter of the network.
    """
    named = list(model.named_parameters())
    if not prefixes:
        return
    unmatched = [pre for pre in prefixes if not any(n.startswith(pre) for n, _ in named)]
    if unmatched:
        tops = sorted({n.split(".")[0] + "." for n, _ in named})
        raise OptionError(
            f"train_only prefix {unmatched[0]!r} names no parameter of the network "
            f"(its modules: {', '.join(tops)})"
        )
    for name, p in named:
        p.requires_grad_(name.startswith(prefixes))


def _start(
    run: RunDirectory,
    network: NetworkConfig | None,
    train_cfg: TrainConfig | None,
    *,
    resume: bool,
    init_from: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any] | None,
) -> RunStart:
    """:func:`start_run` before the trained parameters are chosen."""
    if resume and init_from is not None:
        raise OptionError("resume and init_from exclude each other")
    if resume:
        return _resume(run, network, train_cfg, overrides)
    if run.holds_run():
        raise OptionError(
            f"{run.path} already holds a run; resume it (resume=True) or choose another directory"
        )
    if init_from is not None:
        return _init_from(Path(init_from), network, train_cfg, overrides)
    if network is None or train_cfg is None:
        raise OptionError("a new run needs a network and a training config")
    train_cfg = _with_overrides(train_cfg, overrides)
    torch.manual_seed(train_cfg.seed)
    return RunStart(build_model(network), network, train_cfg, RunState())


def _resume(
    run: RunDirectory,
    network: NetworkConfig | None,
    train_cfg: TrainConfig | None,
    overrides: Mapping[str, Any] | None,
) -> RunStart:
    ckpt = run.load_resumable()
    try:
        stored = TrainConfig.from_dict(ckpt.meta["train"])
        state = RunState.from_meta(ckpt.meta)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"checkpoint {ckpt.path}: invalid progress or recipe: {err}") from err
    diffs: list[str] = []
    if network is not None:
        diffs += config_differences(network.to_dict(), ckpt.network.to_dict(), "network.")
    if train_cfg is not None:
        diffs += config_differences(train_cfg.to_dict(), stored.to_dict())
    if overrides:
        given = _with_overrides(stored, overrides).to_dict()
        diffs += config_differences({k: given[k] for k in overrides}, stored.to_dict())
    if diffs:
        raise OptionError(
            f"resuming {run.path} continues its stored configuration, and these settings "
            f"differ from it: {'; '.join(diffs)}. Resume without them, or start a new run "
            "(init_from=the checkpoint keeps the weights)"
        )
    return RunStart(ckpt.model, ckpt.network, stored, state, ckpt)


def _init_from(
    source: Path,
    network: NetworkConfig | None,
    train_cfg: TrainConfig | None,
    overrides: Mapping[str, Any] | None,
) -> RunStart:
    ckpt = load_checkpoint(source)
    if network is not None and network != ckpt.network:
        diffs = config_differences(network.to_dict(), ckpt.network.to_dict(), "network.")
        raise OptionError(
            f"init_from takes the architecture of {source}; the given network differs: "
            + "; ".join(diffs)
        )
    if train_cfg is None:
        if "train" not in ckpt.meta:
            raise OptionError(
                f"init_from needs a training config: {source} stores none (e.g. pass the "
                "phase-2 recipe)"
            )
        try:
            train_cfg = TrainConfig.from_dict(ckpt.meta["train"])
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"checkpoint {source}: invalid training config: {err}") from err
    train_cfg = _with_overrides(train_cfg, overrides)
    previous = {
        "phase": ckpt.meta.get("train", {}).get("phase"),
        **ckpt.meta.get("progress", {}),
        "from": str(source),
    }
    history = [*ckpt.meta.get("history", []), previous]
    return RunStart(ckpt.model, ckpt.network, train_cfg, RunState(history=history))
