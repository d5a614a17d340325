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

Run directory::

    runs/NAME/
      metrics.jsonl          one JSON record per logged step and per validation
      validation/            the fixed validation set (simulator fixed-set format)
      step-00000200/         checkpoints (see :mod:`amorgp.amortizer.checkpoint`)
      last -> step-00000200  symlink, swapped atomically
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import DataLoader

from amorgp.amortizer.checkpoint import load_checkpoint, optimizer_from_tensors, save_checkpoint
from amorgp.amortizer.config import NetworkConfig, TrainConfig
from amorgp.amortizer.loss import LossOutput, gp_nll_per_point, phase1_loss, phase2_loss
from amorgp.amortizer.model import Prediction, build_model
from amorgp.kernel_grammar import Vocabulary
from amorgp.simulator import (
    SimulatedBatch,
    SimulatorConfig,
    SimulatorStream,
    generate_fixed_set,
    read_fixed_set,
    stream_seed,
)

__all__ = [
    "SE_VOCABULARY",
    "TrainResult",
    "encoder_view",
    "make_stream",
    "predict_bucketed",
    "rank_seed",
    "simulator_config",
    "train",
    "training_loss",
    "validate",
]

logger = logging.getLogger(__name__)

SE_VOCABULARY = Vocabulary(("SE",), "se")
"""Vocabulary of the AHGP-SE-ARD model (one SE per dimension)."""

_INPUTS = ("X", "y", "point_mask", "dim_mask", "symbols", "symbol_mask")


@dataclass
class TrainResult:
    """Outcome of :func:`train`.

    Attributes:
        step: optimiser steps done in total (over resumes).
        datasets_seen: datasets consumed in this phase, summed over ranks.
        stopped_by: ``"max_steps"``, ``"max_datasets"``, ``"max_minutes"``.
        last_checkpoint: the checkpoint directory written last (rank 0), if any.
        validation: the last validation metrics.
        losses: training losses of this call, per step.
    """

    step: int
    datasets_seen: int
    stopped_by: str
    last_checkpoint: Path | None
    validation: dict[str, float] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s data stream (independent streams per rank)."""
    return stream_seed(seed, 1_000_000 + rank, 0)


def simulator_config(network: NetworkConfig, train_cfg: TrainConfig) -> SimulatorConfig:
    """The simulator prior used to train ``network`` with ``train_cfg``.

    Paper laws (Appendix A) with ``n ~ U{n_min..n_max}``, ``d <= max_dims``; phase 2
    draws positive pairs only; the AHGP-SE-ARD model sees one SE per dimension.
    """
    cfg = SimulatorConfig(
        n_min=train_cfg.n_min,
        n_max=train_cfg.n_max,
        d_max=train_cfg.max_dims,
        vocabulary=network.vocabulary,
        inputs=train_cfg.inputs,
    )
    if network.model == "ahgp-se-ard":
        if network.vocabulary != SE_VOCABULARY:
            raise ValueError(
                "the ahgp-se-ard model is trained with the SE-only vocabulary SE_VOCABULARY"
            )
        cfg = replace(cfg, max_addends=1, positive_ratio=1.0)
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
    batch: SimulatedBatch, max_points: int, generator: torch.Generator | None
) -> dict[str, Tensor]:
    """The inputs the network reads: all points, or a random subset of ``max_points``.

    Each dataset keeps ``min(n_b, max_points)`` of its points, drawn uniformly
    without replacement; the padded axis shrinks to ``max_points`` (that is the
    saving).  The loss still uses every point.
    """
    view = {k: getattr(batch, k) for k in _INPUTS}
    N = batch.X.shape[1]
    if max_points <= 0 or max_points >= N:
        return view
    scores = torch.rand(batch.point_mask.shape, generator=generator, device=batch.X.device)
    scores = torch.where(batch.point_mask, scores, torch.full_like(scores, 2.0))
    idx = torch.argsort(scores, dim=1)[:, :max_points]
    view["X"] = torch.gather(batch.X, 1, idx[:, :, None].expand(-1, -1, batch.X.shape[2]))
    view["y"] = torch.gather(batch.y, 1, idx)
    view["point_mask"] = torch.gather(batch.point_mask, 1, idx)
    return view


def predict_bucketed(model: nn.Module, view: dict[str, Tensor], buckets: int) -> Prediction:
    """Run ``model`` on ``buckets`` sub-batches of datasets sorted by size, reassembled.

    Datasets are sorted by their number of points and split into ``buckets`` groups;
    each group is cropped to its largest ``n`` (present points moved first), so fewer
    padded tokens go through the encoder.  The network is invariant to padding and to
    point order, so the result equals ``model(**view)`` up to float rounding.  The
    loop runs over the (few) buckets, not over datasets.
    """
    if buckets <= 1 or view["X"].shape[0] < 2:
        return model(**view, validate=False)
    n = view["point_mask"].sum(1)
    order = torch.argsort(n)
    groups = [g for g in torch.tensor_split(order, min(buckets, order.numel())) if g.numel()]
    params, noise = [], []
    for idx in groups:
        m = int(n[idx].max())
        sub = {k: v[idx] for k, v in view.items()}
        first = torch.argsort((~sub["point_mask"]).to(torch.int8), dim=1, stable=True)[:, :m]
        sub["X"] = torch.gather(sub["X"], 1, first[:, :, None].expand(-1, -1, sub["X"].shape[2]))
        sub["y"] = torch.gather(sub["y"], 1, first)
        sub["point_mask"] = torch.gather(sub["point_mask"], 1, first)
        out = model(**sub, validate=False)
        params.append(out.params)
        noise.append(out.noise)
    inverse = torch.argsort(torch.cat(groups))
    return Prediction(torch.cat(params)[inverse], torch.cat(noise)[inverse])


def training_loss(
    model: nn.Module,
    batch: SimulatedBatch,
    vocab: Vocabulary,
    train_cfg: TrainConfig,
    generator: torch.Generator | None = None,
) -> LossOutput:
    """Forward pass and loss of one batch (phase from ``train_cfg``)."""
    view = encoder_view(batch, train_cfg.encoder_points, generator)
    device = batch.X.device
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
        pred = predict_bucketed(model, view, train_cfg.size_buckets)
    pred = Prediction(pred.params.float(), pred.noise.float())
    inputs = {k: getattr(batch, k) for k in _INPUTS}
    if train_cfg.phase == 1:
        return phase1_loss(pred, **inputs, vocab=vocab, valid=batch.valid)
    return phase2_loss(
        pred,
        **inputs,
        vocab=vocab,
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
        pred = module(**{k: getattr(b, k) for k in _INPUTS}, validate=False)
        inputs = {k: getattr(b, k) for k in _INPUTS}
        nll, failed = gp_nll_per_point(
            **inputs, params=pred.params.float(), noise=pred.noise.float(), vocab=vocab
        )
        true_nll, true_failed = gp_nll_per_point(
            b.X,
            b.y,
            b.point_mask,
            b.dim_mask,
            b.true_symbols,
            b.true_symbol_mask,
            b.params,
            b.noise,
            vocab,
        )
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


class _Distributed:
    """World size, rank and whether this call initialised the process group."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.owned = False
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
            self.owned = True
        self.active = dist.is_initialized() and dist.get_world_size() > 1
        self.world = dist.get_world_size() if self.active else 1
        self.rank = dist.get_rank() if self.active else 0

    def any(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is True on any rank."""
        if not self.active:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        if self.owned:
            dist.destroy_process_group()


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


def _batches(stream: SimulatorStream, num_workers: int, skip: int) -> Iterator[SimulatedBatch]:
    loader = DataLoader(
        stream,
        batch_size=None,
        num_workers=num_workers,
        worker_init_fn=_worker_init if num_workers else None,
        prefetch_factor=2 if num_workers else None,
    )
    for i, batch in enumerate(loader):
        if i >= skip:
            yield batch


def _validation_set(
    out: Path, sim_cfg: SimulatorConfig, train_cfg: TrainConfig
) -> list[SimulatedBatch]:
    path = out / "validation"
    if path.exists():
        return list(read_fixed_set(path).batches)
    size = min(train_cfg.val_size, 64)
    n_batches = math.ceil(train_cfg.val_size / size)
    return list(
        generate_fixed_set(
            path, sim_cfg, n_batches=n_batches, batch_size=size, seed=train_cfg.seed + 7_777_777
        ).batches
    )


def _update_last(out: Path, target: Path, keep: int = 2) -> None:
    """Point ``out/last`` at ``target`` atomically and delete older step checkpoints."""
    tmp = out / ".last.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target.name)
    os.replace(tmp, out / "last")
    steps = sorted(p for p in out.glob("step-*") if p.is_dir())
    for old in steps[:-keep]:
        if old != target:
            shutil.rmtree(old, ignore_errors=True)


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
) -> TrainResult:
    """Train (or resume training) an amortization network.

    Args:
        out_dir: the run directory (created).
        network: architecture (ignored when resuming or with ``init_from``: taken from the checkpoint).
        train_cfg: recipe (ignored when resuming: taken from the checkpoint).
        resume: continue from ``out_dir/last`` exactly.
        init_from: start from the weights of this checkpoint (e.g. phase 2 after phase 1);
            the optimiser starts fresh.
        max_minutes, max_datasets, max_steps: budgets; training stops at the first one
            reached, writes a checkpoint and returns.  ``max_steps`` counts total steps.
        device: default CUDA (``LOCAL_RANK``) if available, else CPU.
        progress: show a progress bar (only on a terminal, only on rank 0).
        log_every: steps between JSONL training records.

    Raises:
        ValueError: no budget given, nothing to resume, or an invalid configuration.
    """
    if max_minutes is None and max_datasets is None and max_steps is None:
        raise ValueError("give at least one budget: max_minutes, max_datasets or max_steps")
    out = Path(out_dir)
    dev = torch.device(device) if device is not None else _default_device()
    ddp = _Distributed(dev)
    try:
        return _train(
            out,
            network,
            train_cfg,
            resume,
            init_from,
            max_minutes,
            max_datasets,
            max_steps,
            dev,
            ddp,
            progress,
            log_every,
        )
    finally:
        ddp.close()


def _train(
    out: Path,
    network: NetworkConfig | None,
    train_cfg: TrainConfig | None,
    resume: bool,
    init_from: str | os.PathLike[str] | None,
    max_minutes: float | None,
    max_datasets: int | None,
    max_steps: int | None,
    dev: torch.device,
    ddp: _Distributed,
    progress: bool,
    log_every: int,
) -> TrainResult:
    history: list[dict[str, Any]] = []
    step = datasets = 0
    elapsed_before = 0.0
    opt_state = None
    if resume:
        last = out / "last"
        if not last.exists():
            raise ValueError(f"nothing to resume: {last} does not exist")
        ckpt = load_checkpoint(last)
        network = ckpt.network
        train_cfg = TrainConfig.from_dict(ckpt.meta["train"])
        prog = ckpt.meta["progress"]
        step, datasets, elapsed_before = (
            int(prog["step"]),
            int(prog["datasets_seen"]),
            float(prog["elapsed_s"]),
        )
        history = list(ckpt.meta.get("history", []))
        model = ckpt.model
        opt_state = ckpt
    elif init_from is not None:
        ckpt = load_checkpoint(init_from)
        network = ckpt.network
        if train_cfg is None:
            raise ValueError("init_from needs a training config (e.g. the phase-2 recipe)")
        previous = {
            "phase": ckpt.meta.get("train", {}).get("phase"),
            **ckpt.meta.get("progress", {}),
            "from": str(init_from),
        }
        history = [*ckpt.meta.get("history", []), previous]
        model = ckpt.model
    else:
        if network is None or train_cfg is None:
            raise ValueError("a new run needs a network and a training config")
        if (out / "last").exists():
            raise ValueError(
                f"{out} already holds a run; pass resume=True or choose another directory"
            )
        torch.manual_seed(train_cfg.seed)
        model = build_model(network)
    assert network is not None
    assert train_cfg is not None
    vocab = network.vocabulary
    sim_cfg = simulator_config(network, train_cfg)
    if train_cfg.batch_size % ddp.world:
        raise ValueError(
            f"batch_size {train_cfg.batch_size} is not divisible by the world size {ddp.world}"
        )
    per_rank = train_cfg.batch_size // ddp.world

    model.to(dev).train()
    net: nn.Module = model
    if ddp.active:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.index] if dev.type == "cuda" else None
        )
    optimizer = torch.optim.RAdam(
        model.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay
    )
    if opt_state is not None:
        optimizer_from_tensors(optimizer, opt_state.optimizer_tensors, opt_state.meta["optimizer"])
        if "rng/torch" in opt_state.optimizer_tensors:
            torch.set_rng_state(opt_state.optimizer_tensors["rng/torch"])

    is_main = ddp.rank == 0
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        val_batches = _validation_set(out, sim_cfg, train_cfg)
    ddp.barrier()
    metrics_file = (out / "metrics.jsonl").open("a") if is_main else None

    def log(record: dict[str, Any]) -> None:
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()

    bar = None
    if progress and is_main and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=max_steps, initial=step, unit="step", dynamic_ncols=True)

    start = time.monotonic()
    last_ckpt: Path | None = None
    val_metrics: dict[str, float] = {}
    losses: list[float] = []
    stopped_by = ""

    def checkpoint() -> None:
        nonlocal last_ckpt
        if not is_main:
            return
        chunk_steps = train_cfg.val_every
        meta = {
            "train": train_cfg.to_dict(),
            "simulator": sim_cfg.to_dict(),
            "progress": {
                "phase": train_cfg.phase,
                "step": step,
                "datasets_seen": datasets,
                "chunk": step // chunk_steps,
                "chunk_offset": step % chunk_steps,
                "world_size": ddp.world,
                "elapsed_s": elapsed_before + time.monotonic() - start,
            },
            "history": history,
            "validation": val_metrics,
        }
        target = out / f"step-{step:08d}"
        save_checkpoint(
            target,
            model,
            network,
            optimizer=optimizer,
            extra_tensors={"rng/torch": torch.get_rng_state()},
            meta=meta,
            overwrite=True,
        )
        _update_last(out, target)
        last_ckpt = target

    window_start, window_datasets = time.monotonic(), 0
    try:
        while not stopped_by:
            chunk, offset = divmod(step, train_cfg.val_every)
            stream = make_stream(
                sim_cfg, per_rank, train_cfg.seed, ddp.rank, chunk, train_cfg.val_every
            )
            for batch in _batches(stream, train_cfg.num_workers, offset):
                gen = torch.Generator(device=dev).manual_seed(
                    stream_seed(train_cfg.seed, step + 1, 2 + ddp.rank)
                )
                batch = batch.to(dev)
                lr = (
                    train_cfg.lr * min(1.0, (step + 1) / train_cfg.warmup_steps)
                    if train_cfg.warmup_steps
                    else train_cfg.lr
                )
                for group in optimizer.param_groups:
                    group["lr"] = lr
                result = training_loss(net, batch, vocab, train_cfg, gen)
                optimizer.zero_grad(set_to_none=True)
                result.loss.backward()
                grad_norm = (
                    float(torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip))
                    if train_cfg.grad_clip > 0
                    else float("nan")
                )
                optimizer.step()
                step += 1
                datasets += per_rank * ddp.world
                window_datasets += per_rank * ddp.world
                loss_value = float(result.loss.detach())
                losses.append(loss_value)
                if step % log_every == 0 and is_main:
                    now = time.monotonic()
                    rate = window_datasets / max(now - window_start, 1e-9)
                    window_start, window_datasets = now, 0
                    log(
                        {
                            "kind": "train",
                            "phase": train_cfg.phase,
                            "step": step,
                            "datasets_seen": datasets,
                            "loss": loss_value,
                            "n_used": int(result.used.sum()),
                            "n_failed": result.n_failed,
                            "lr": lr,
                            "grad_norm": grad_norm,
                            "datasets_per_s": rate,
                            "elapsed_s": elapsed_before + now - start,
                        }
                    )
                    if bar is not None:
                        bar.set_postfix(loss=f"{loss_value:.3f}", ds_per_s=f"{rate:.1f}")
                if bar is not None:
                    bar.update(1)
                minutes = (time.monotonic() - start) / 60.0
                reason = ""
                if max_steps is not None and step >= max_steps:
                    reason = "max_steps"
                elif max_datasets is not None and datasets >= max_datasets:
                    reason = "max_datasets"
                elif max_minutes is not None and minutes >= max_minutes:
                    reason = "max_minutes"
                if ddp.any(bool(reason)):
                    stopped_by = reason or "other_rank"
                    break
                if step % train_cfg.val_every == 0:
                    break
            if is_main and (step % train_cfg.val_every == 0 or stopped_by):
                val_metrics = validate(model, val_batches, vocab, dev)
                log(
                    {
                        "kind": "validation",
                        "phase": train_cfg.phase,
                        "step": step,
                        "datasets_seen": datasets,
                        **val_metrics,
                    }
                )
                logger.info("step %d: validation %s", step, val_metrics)
            checkpoint()
            ddp.barrier()
    except KeyboardInterrupt:
        stopped_by = "interrupted"
        checkpoint()
    finally:
        if bar is not None:
            bar.close()
        if metrics_file is not None:
            metrics_file.close()
    return TrainResult(step, datasets, stopped_by, last_ckpt, val_metrics, losses)
