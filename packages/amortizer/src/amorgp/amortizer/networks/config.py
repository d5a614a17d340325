"""Typed configuration of the amortization network, its training recipe and presets.

Configs are frozen dataclasses that round-trip through plain JSON dicts
(``to_dict`` / ``from_dict``), so every checkpoint carries the exact architecture
and recipe it was built with.  Presets:

=========  ==========================================================================
``tiny``   for unit tests (a few thousand parameters)
``small``  trainable on a 2-core CPU in about an hour (sizes chosen from the measured
           datasets/s in ``docs/benchmarks/amortizer.md``)
``mid``    between ``small`` and ``medium``: 2.2 M parameters, widths 128 with 32
           channels per attention head (measured against ``small`` per CPU-hour in
           ``docs/training/presets-mid.md``)
``medium`` for one GPU; at most ~15 M parameters (< 64 MB of float32 weights)
``paper``  the sizes of Bitzer et al. (2023), Appendix A (width 512, 8 heads), about
           the paper's 43 M parameters
=========  ==========================================================================
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from amorgp.amortizer.networks.registry import network_spec
from amorgp.kernel_grammar import PAPER_VOCABULARY, Vocabulary

__all__ = [
    "PRESETS",
    "TRAINING_PRIORS",
    "NetworkConfig",
    "Preset",
    "TrainConfig",
    "preset",
]


MAX_WIDTH = 8192
"""Largest width (``d_data``, ``d_kernel``, ``head_hidden``, ``noise_hidden``) of a
:class:`NetworkConfig`: 16 times the paper's 512, far above any trained network."""
MAX_BLOCKS = 64
"""Largest count of each entry of ``data_blocks`` / ``kernel_blocks``."""
MAX_FF_MULT = 16
"""Largest ``ff_mult``."""
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


def _check_positive(obj: object, names: tuple[str, ...], upper: int | None = None) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}"
            )
        if upper is not None and value > upper:
            raise ValueError(f"{type(obj).__name__}.{name} must be at most {upper}, got {value}")


def _check_blocks(name: str, blocks: Any, count: int) -> tuple[int, ...]:
    """``blocks`` as ``count`` integers in ``[0, MAX_BLOCKS]`` (refused before any layer is built)."""
    ok = (
        isinstance(blocks, (tuple, list))
        and len(blocks) == count
        and all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in blocks)
    )
    if not ok:
        raise ValueError(f"{name} needs {count} non-negative integer counts, got {blocks!r}")
    if max(blocks) > MAX_BLOCKS:
        raise ValueError(f"{name} counts must be at most {MAX_BLOCKS} each, got {list(blocks)}")
    return tuple(int(b) for b in blocks)


_FLAGS = ("period_tokens", "relevance_tokens", "learned_gate")
"""The network's optional features: stored in its config only where on."""


@dataclass(frozen=True)
class NetworkConfig:
    """Architecture of the amortization network (Bitzer et al. 2023, §3.1).

    Attributes:
        model: a name of :mod:`amorgp.amortizer.networks.registry`: ``"structured"`` (the
            paper's network, any dimension-wise structure) or ``"ahgp-se-ard"`` (the
            fixed SE-ARD kernel comparison model).
        vocabulary: the base symbols the kernel encoder and the heads know.
        d_data: width ``H`` of the dataset encoder (embeddings ``h_i``).
        d_kernel: width ``K`` of the kernel encoder-decoder tokens.
        n_heads: attention heads of every Transformer block (divides both widths).
        ff_mult: hidden width of the Transformer feed-forward layers, in multiples of
            the block width.
        data_blocks: Transformer blocks of the dataset encoder's four stages:
            (points within each dimension, points of the dimension mean, points
            within each dimension after concatenation, dimensions).
        kernel_blocks: (Kernel-Encoder-Blocks of the encoder, Transformer blocks over
            dimensions, Kernel-Encoder-Blocks of the decoder).
        head_hidden: hidden width of each per-symbol parameter head.
        noise_hidden: hidden width of the noise head.
        period_tokens: the kernel tokens read the periodogram's strongest peak of their
            dimension, and the predicted periods follow it where it is clear
            (:mod:`amorgp.amortizer.networks.period_tokens`; structured network only).
        relevance_tokens: the kernel tokens read each dimension's nearest-neighbour
            relevance and lengthscales have an exponential tail
            (:mod:`amorgp.amortizer.networks.relevance_tokens`; structured network only).
        learned_gate: the period anchors' gate opens from
            :data:`~amorgp.amortizer.networks.period_tokens.LEARNED_GATE_CYCLES` cycles
            and a learnt correction from the dimension's embedding and its peak closes or
            opens it (:func:`~amorgp.amortizer.networks.period_tokens.learned_gate`;
            needs ``period_tokens``).
    """

    model: str = "structured"
    vocabulary: Vocabulary = PAPER_VOCABULARY
    d_data: int = 64
    d_kernel: int = 64
    n_heads: int = 4
    ff_mult: int = 2
    data_blocks: tuple[int, int, int, int] = (1, 1, 1, 1)
    kernel_blocks: tuple[int, int, int] = (2, 1, 2)
    head_hidden: int = 64
    noise_hidden: int = 64
    period_tokens: bool = False
    relevance_tokens: bool = False
    learned_gate: bool = False

    def __post_init__(self) -> None:
        spec = network_spec(self.model)
        for flag in _FLAGS:
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ValueError(f"{flag} must be a bool, got {value!r}")
            if value and self.model != "structured":
                raise ValueError(f"{flag} needs the structured network, got {self.model!r}")
        if self.learned_gate and not self.period_tokens:
            raise ValueError("learned_gate needs period_tokens=True")
        _check_positive(self, ("d_data", "d_kernel", "head_hidden", "noise_hidden"), MAX_WIDTH)
        _check_positive(self, ("n_heads",), MAX_WIDTH)
        _check_positive(self, ("ff_mult",), MAX_FF_MULT)
        for width in ("d_data", "d_kernel"):
            if getattr(self, width) % self.n_heads:
                raise ValueError(
                    f"{width}={getattr(self, width)} is not divisible by n_heads={self.n_heads}"
                )
        object.__setattr__(self, "data_blocks", _check_blocks("data_blocks", self.data_blocks, 4))
        object.__setattr__(
            self, "kernel_blocks", _check_blocks("kernel_blocks", self.kernel_blocks, 3)
        )
        spec.check_vocabulary(self.vocabulary)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["vocabulary"] = self.vocabulary.to_dict()
        out["data_blocks"] = list(self.data_blocks)
        out["kernel_blocks"] = list(self.kernel_blocks)
        for flag in _FLAGS:
            if not out[flag]:  # networks without it keep their stored config as it was
                del out[flag]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NetworkConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown network config keys {sorted(unknown)}")
        kwargs = dict(data)
        if "vocabulary" in kwargs:
            kwargs["vocabulary"] = Vocabulary.from_dict(kwargs["vocabulary"])
        for key in ("data_blocks", "kernel_blocks"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


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
        _check_positive(self, ("batch_size", "n_min", "n_max", "max_dims", "val_size", "val_every"))
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


@dataclass(frozen=True)
class Preset:
    """A named pair of network and training configs."""

    network: NetworkConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    description: str = ""


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        NetworkConfig(
            d_data=16,
            d_kernel=16,
            n_heads=2,
            ff_mult=2,
            data_blocks=(1, 1, 1, 1),
            kernel_blocks=(1, 1, 1),
            head_hidden=16,
            noise_hidden=16,
        ),
        TrainConfig(batch_size=8, n_max=40, max_dims=3, val_size=16, val_every=20, num_workers=0),
        "unit tests only",
    ),
    "small": Preset(
        NetworkConfig(
            d_data=64,
            d_kernel=64,
            n_heads=4,
            ff_mult=2,
            data_blocks=(1, 1, 1, 1),
            kernel_blocks=(2, 1, 2),
            head_hidden=64,
            noise_hidden=64,
        ),
        TrainConfig(
            batch_size=32,
            lr=5e-4,
            warmup_steps=50,
            n_max=100,
            max_dims=4,
            encoder_points=48,  # measured: 1.6x datasets/s, val NLL no worse at equal time
            val_size=128,
            val_every=50,
            num_workers=1,
        ),
        "a 2-core CPU, about an hour of training",
    ),
    "mid": Preset(
        NetworkConfig(
            d_data=128,
            d_kernel=128,
            n_heads=4,  # 32 channels per head
            ff_mult=2,
            data_blocks=(2, 2, 2, 2),
            kernel_blocks=(2, 2, 2),
            head_hidden=128,
            noise_hidden=128,
        ),
        TrainConfig(
            batch_size=16,
            lr=3e-4,
            warmup_steps=100,
            n_max=100,
            val_size=128,
            val_every=100,
            num_workers=1,
        ),
        "between small and medium: 2.2 M parameters, 32 channels per attention head",
    ),
    "medium": Preset(
        NetworkConfig(
            d_data=256,
            d_kernel=256,
            n_heads=8,
            ff_mult=2,
            data_blocks=(3, 3, 3, 3),
            kernel_blocks=(4, 2, 4),
            head_hidden=256,
            noise_hidden=256,
        ),
        TrainConfig(
            batch_size=128, lr=1e-4, warmup_steps=1000, val_size=512, val_every=1000, num_workers=4
        ),
        "one GPU; under 15 M parameters",
    ),
    "paper": Preset(
        NetworkConfig(
            d_data=512,
            d_kernel=512,
            n_heads=8,
            ff_mult=2,
            data_blocks=(3, 3, 3, 3),
            kernel_blocks=(2, 2, 2),
            head_hidden=200,
            noise_hidden=200,
        ),
        TrainConfig(
            batch_size=128, lr=2e-5, warmup_steps=0, val_size=512, val_every=2000, num_workers=4
        ),
        "Bitzer et al. (2023), Appendix A: batch 128, RAdam lr 2e-5 constant",
    ),
}


def preset(name: str, **overrides: Any) -> Preset:
    """Look up a preset by name; ``overrides`` replace training-config fields.

    Raises:
        ValueError: unknown preset name or unknown override.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    p = PRESETS[name]
    if overrides:
        known = {f.name for f in fields(TrainConfig)}
        bad = set(overrides) - known
        if bad:
            raise ValueError(f"unknown training options {sorted(bad)}")
        p = replace(p, train=replace(p.train, **overrides))
    return p
