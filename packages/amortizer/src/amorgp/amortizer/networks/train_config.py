"""The training recipe: :class:`TrainConfig` (a frozen dataclass that round-trips through a
plain JSON dict, so every checkpoint carries the exact recipe it was trained with;
:mod:`amorgp.amortizer.networks.config` gathers it with the architecture and the
presets)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from amorgp.amortizer.networks.network_config import check_positive

__all__ = ["MAX_POINTS_PER_STEP", "TRAINING_PRIORS", "TrainConfig"]

TRAINING_PRIORS: tuple[str, ...] = (
    "paper",
    "realdata",
    "realdata-series",
    "realdata-irrelevant",
    "realdata-ard",
)
"""The simulator's named priors a :class:`TrainConfig` may train on
(``amorgp.simulator.realdata.PRIORS``; the amortizer does not depend on the simulator)."""
MAX_POINTS_PER_STEP = 2**21
"""Largest ``batch_size * n_max`` of a :class:`TrainConfig` (2,097,152 points per step;
the paper's recipe has 128 x 250 = 32,000)."""


@dataclass(frozen=True)
class TrainConfig:
    """Training recipe.

    Attributes:
        phase: 1 (per-point NLL on all pairs) or 2 (noise fine-tuning on positives).
        batch_size: datasets per optimiser step (summed over DDP ranks: each rank
            draws ``batch_size // world_size``).
        lr: RAdam learning rate after warm-up.
        warmup_steps: linear warm-up from 0 (0 = constant, the paper's recipe).
        grad_clip: maximum global gradient norm (0 disables clipping).
        weight_decay: RAdam weight decay.
        alpha, beta: phase-2 weights of ``alpha * NLL + beta * MSE(noise std)``.
        n_min, n_max: number of points per simulated dataset.
        max_dims: maximum input dimension of simulated datasets.
        inputs: the simulator's input law (``"uniform"``, the paper's; see
            :mod:`amorgp.simulator.inputs`).
        prior: the simulator's parameter laws: ``"paper"``, ``"realdata"``,
            ``"realdata-series"``, ``"realdata-irrelevant"`` or ``"realdata-ard"``
            (:mod:`amorgp.simulator.realdata`: standardised targets, long, growing and
            periodic lengthscales, near-noiseless data, with ``"realdata-series"`` seasonal
            one-input series, with ``"realdata-irrelevant"`` also irrelevant inputs, with
            ``"realdata-ard"`` also ARD structures; its input law is ``inputs``).
        encoder_points: if > 0, the encoder reads at most this many points of each
            dataset (a random subset) while the loss uses all of them.
        size_buckets: if > 1, the encoder runs on this many sub-batches of datasets
            sorted by their number of points, each cropped to its own largest n (exact:
            the network is padding invariant, so predictions do not change; only padded
            tokens are removed).
        calibrated: phase 1: weight ``w`` in ``(1 - w) NLL + w NLL_calibrated``, the second
            at the exact Type-2 ML scale and noise given the network's other
            hyperparameters (:mod:`amorgp.training.loss`); 0 (default): the plain NLL.
        calibrated_pairs: the pairs the calibrated term applies to: ``"all"`` (default)
            or ``"positive"`` (the presented structure is the data's own; a negative pair
            keeps the plain NLL at full weight: a wrong structure's profile-likelihood
            optimum is not asked of the network).
        train_only: if not empty, a comma-separated list of parameter-name prefixes
            (e.g. ``"period_proj.,gate_proj."``): only the network's parameters whose names
            start with one of them are trained, every other weight stays as it is (for
            example, new token projections learnt on top of a network whose other
            outputs must not move); empty (default): every parameter is trained.
        real_tables: path of a pool of real tables (``.npz``,
            :class:`amorgp.training.realtables.RealTables`); with ``real_share``.
        real_share: phase 1: the share of each batch's datasets replaced by random pieces
            of ``real_tables`` (:func:`amorgp.training.realtables.mix_real`: the loss is
            the likelihood of real targets); 0 (default): every dataset simulated.
        val_size: datasets in the fixed validation set.
        val_every: optimiser steps between validations (and checkpoints).
        num_workers: DataLoader worker processes drawing simulated batches.
        seed: seed of the run (data, initialisation).
    """

    phase: int = 1
    batch_size: int = 32
    lr: float = 3e-4
    warmup_steps: int = 200
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    alpha: float = 10.0
    beta: float = 1.0
    n_min: int = 10
    n_max: int = 250
    max_dims: int = 8
    inputs: str = "uniform"
    prior: str = "paper"
    encoder_points: int = 0
    size_buckets: int = 1
    calibrated: float = 0.0
    calibrated_pairs: str = "all"
    train_only: str = ""
    real_tables: str = ""
    real_share: float = 0.0
    val_size: int = 256
    val_every: int = 200
    num_workers: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.phase not in (1, 2):
            raise ValueError(f"phase must be 1 or 2, got {self.phase!r}")
        check_positive(self, ("batch_size", "n_min", "n_max", "max_dims", "val_size", "val_every"))
        if self.n_min > self.n_max:
            raise ValueError(f"n_min={self.n_min} exceeds n_max={self.n_max}")
        if self.batch_size * self.n_max > MAX_POINTS_PER_STEP:
            raise ValueError(
                f"batch_size x n_max = {self.batch_size} x {self.n_max} = "
                f"{self.batch_size * self.n_max} points per step exceeds {MAX_POINTS_PER_STEP} "
                "(the simulated batch and the network's activations would not fit in memory); "
                "lower batch_size or n_max"
            )
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.warmup_steps < 0 or self.num_workers < 0 or self.encoder_points < 0:
            raise ValueError("warmup_steps, num_workers and encoder_points must be >= 0")
        if self.size_buckets < 1:
            raise ValueError(f"size_buckets must be >= 1, got {self.size_buckets}")
        if self.prior not in TRAINING_PRIORS:
            raise ValueError(
                f"prior must be one of {', '.join(TRAINING_PRIORS)}, got {self.prior!r}"
            )
        if not 0.0 <= self.calibrated <= 1.0:
            raise ValueError(f"calibrated must be in [0, 1], got {self.calibrated}")
        if self.calibrated_pairs not in ("all", "positive"):
            raise ValueError(
                f"calibrated_pairs must be 'all' or 'positive', got {self.calibrated_pairs!r}"
            )
        if self.calibrated_pairs == "positive" and self.real_share > 0:
            raise ValueError(
                "calibrated_pairs='positive' cannot be used with real_share > 0: a real "
                "table's piece has no true structure to be a positive pair of"
            )
        if self.grad_clip < 0 or self.alpha < 0 or self.beta < 0:
            raise ValueError("grad_clip, alpha and beta must be >= 0")
        if not 0.0 <= self.real_share <= 1.0:
            raise ValueError(f"real_share must be in [0, 1], got {self.real_share}")
        if self.real_share > 0 and not self.real_tables:
            raise ValueError("real_share > 0 needs real_tables, the path of a pool of real tables")
        if self.real_share > 0 and self.phase != 1:
            raise ValueError(
                "real_share > 0 needs phase 1: phase 2 reads the true noise, which real "
                "tables do not have (pass --set real_share=0)"
            )
        if self.train_only and not all(self.trained_prefixes):
            raise ValueError(
                f"train_only has an empty entry: {self.train_only!r} "
                "(a comma-separated list of parameter-name prefixes)"
            )

    @property
    def trained_prefixes(self) -> tuple[str, ...]:
        """The prefixes of ``train_only`` (empty: every parameter is trained)."""
        if not self.train_only:
            return ()
        return tuple(part.strip() for part in self.train_only.split(","))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown training config keys {sorted(unknown)}")
        return cls(**data)
