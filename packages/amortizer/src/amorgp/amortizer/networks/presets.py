"""Named pairs of architecture and training recipe (:data:`PRESETS`; the table in
:mod:`amorgp.amortizer.networks.config`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from amorgp.amortizer.networks.network_config import NetworkConfig
from amorgp.amortizer.networks.train_config import TrainConfig

__all__ = ["PRESETS", "Preset", "preset"]


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
