"""Typed configuration of the amortization network, its training recipe and presets.

Configs are frozen dataclasses that round-trip through plain JSON dicts
(``to_dict`` / ``from_dict``), so every checkpoint carries the exact architecture
and recipe it was built with.  The architecture is in
:mod:`~amorgp.amortizer.networks.network_config`, the training recipe in
:mod:`~amorgp.amortizer.networks.train_config` and the presets in
:mod:`~amorgp.amortizer.networks.presets`; this module gathers them.  Presets:

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

from amorgp.amortizer.networks.network_config import (
    MAX_BLOCKS,
    MAX_FF_MULT,
    MAX_WIDTH,
    NetworkConfig,
)
from amorgp.amortizer.networks.presets import PRESETS, Preset, preset
from amorgp.amortizer.networks.train_config import (
    MAX_POINTS_PER_STEP,
    TRAINING_PRIORS,
    TrainConfig,
)

__all__ = [
    "MAX_BLOCKS",
    "MAX_FF_MULT",
    "MAX_POINTS_PER_STEP",
    "MAX_WIDTH",
    "PRESETS",
    "TRAINING_PRIORS",
    "NetworkConfig",
    "Preset",
    "TrainConfig",
    "preset",
]
