"""amorgp.amortizer: the amortization network g(D, S) -> (theta_S, sigma^2), its training and CLI.

>>> import torch
>>> from amorgp.amortizer import PRESETS, build_model
>>> from amorgp.amortizer.testing import random_padded_batch
>>> model = build_model(PRESETS["tiny"].network).eval()
>>> batch = random_padded_batch(torch.Generator().manual_seed(0), model.vocabulary, dtype=torch.float32)
>>> pred = model(batch)
>>> tuple(pred.params.shape), tuple(pred.noise.shape)
((3, 3, 3, 4), (3,))

The names below are imported on first use (PEP 562 ``__getattr__``), so that
``import amorgp.amortizer.cli`` (and ``amorgp --help``) does not import torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_LAZY: dict[str, str] = {
    "AHGPSEARD": "amorgp.amortizer.ahgp",
    "Amortizer": "amorgp.amortizer.api",
    "Hyperparameter": "amorgp.amortizer.api",
    "KernelResult": "amorgp.amortizer.api",
    "PRETRAINED_DIR": "amorgp.amortizer.api",
    "Progress": "amorgp.amortizer.api",
    "pretrained_names": "amorgp.amortizer.bundled",
    "resolve_checkpoint": "amorgp.amortizer.bundled",
    "Checkpoint": "amorgp.amortizer.checkpoint",
    "load_checkpoint": "amorgp.amortizer.checkpoint",
    "load_model": "amorgp.amortizer.checkpoint",
    "save_checkpoint": "amorgp.amortizer.checkpoint",
    "NetworkConfig": "amorgp.amortizer.config",
    "PRESETS": "amorgp.amortizer.config",
    "Preset": "amorgp.amortizer.config",
    "TrainConfig": "amorgp.amortizer.config",
    "preset": "amorgp.amortizer.config",
    "AmortizedGPRegressor": "amorgp.amortizer.estimator",
    "Dataset": "amorgp.amortizer.io",
    "as_dataset": "amorgp.amortizer.io",
    "read_csv": "amorgp.amortizer.io",
    "LossOutput": "amorgp.amortizer.loss",
    "gp_nll_per_point": "amorgp.amortizer.loss",
    "phase1_loss": "amorgp.amortizer.loss",
    "phase2_loss": "amorgp.amortizer.loss",
    "AmortizedGP": "amorgp.amortizer.model",
    "DatasetEncoder": "amorgp.amortizer.model",
    "KernelEncoderDecoder": "amorgp.amortizer.model",
    "NoiseHead": "amorgp.amortizer.model",
    "Prediction": "amorgp.amortizer.model",
    "SymbolHeads": "amorgp.amortizer.model",
    "count_parameters": "amorgp.amortizer.model",
    "AmortizationNetwork": "amorgp.amortizer.network",
    "DatasetEncoding": "amorgp.amortizer.network",
    "NetworkSpec": "amorgp.amortizer.registry",
    "SE_VOCABULARY": "amorgp.amortizer.registry",
    "build_model": "amorgp.amortizer.registry",
    "network_names": "amorgp.amortizer.registry",
    "network_spec": "amorgp.amortizer.registry",
    "register_network": "amorgp.amortizer.registry",
    "TrainResult": "amorgp.amortizer.train",
    "encoder_view": "amorgp.amortizer.train",
    "simulator_config": "amorgp.amortizer.train",
    "train": "amorgp.amortizer.train",
    "training_loss": "amorgp.amortizer.train",
    "validate": "amorgp.amortizer.train",
}
__all__ = [
    "AmortizationNetwork",
    "DatasetEncoding",
    "NetworkSpec",
    "network_names",
    "network_spec",
    "register_network",
    "AHGPSEARD",
    "PRESETS",
    "PRETRAINED_DIR",
    "pretrained_names",
    "resolve_checkpoint",
    "AmortizedGPRegressor",
    "Amortizer",
    "Dataset",
    "Hyperparameter",
    "KernelResult",
    "Progress",
    "as_dataset",
    "read_csv",
    "SE_VOCABULARY",
    "AmortizedGP",
    "Checkpoint",
    "DatasetEncoder",
    "KernelEncoderDecoder",
    "LossOutput",
    "NetworkConfig",
    "NoiseHead",
    "Prediction",
    "Preset",
    "SymbolHeads",
    "TrainConfig",
    "TrainResult",
    "build_model",
    "count_parameters",
    "encoder_view",
    "gp_nll_per_point",
    "load_checkpoint",
    "load_model",
    "phase1_loss",
    "phase2_loss",
    "preset",
    "save_checkpoint",
    "simulator_config",
    "train",
    "training_loss",
    "validate",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use and keep it in the package namespace."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    """Keeps the function :func:`~amorgp.amortizer.train.train` as the package's
    ``train`` (as an eager ``from amorgp.amortizer.train import train`` did) when the
    import system binds the submodule of the same name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "train" and isinstance(value, types.ModuleType):
            value = value.train
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
