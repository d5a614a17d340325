"""amorgp.amortizer: the amortization network g(D, S) -> (theta_S, sigma^2) and its inference.

Importing this package (and running inference) loads neither the training code nor the
simulator: training is the package :mod:`amorgp.training` (distribution
``amorgp-training``, also pulled by the ``amorgp-amortizer[train]`` extra).  The scikit-learn-style
:class:`AmortizedGPRegressor` is loaded on first use (it imports scikit-learn, when
installed, which costs more than the rest of the package).

>>> import torch
>>> from amorgp.amortizer import PRESETS, build_model
>>> from amorgp.amortizer.testing import random_padded_batch
>>> model = build_model(PRESETS["tiny"].network).eval()
>>> batch = random_padded_batch(torch.Generator().manual_seed(0), model.vocabulary, dtype=torch.float32)
>>> pred = model(batch)
>>> tuple(pred.params.shape), tuple(pred.noise.shape)
((3, 3, 3, 4), (3,))

The public names are imported on first use (PEP 562 ``__getattr__``), so that
``import amorgp.cli`` (and ``amorgp --help``) does not import torch.  The command line
(:mod:`amorgp.cli`, distribution ``amorgp-cli``) and the GPyTorch/BoTorch bridge
(:mod:`amorgp.gpytorch`, ``amorgp-gpytorch``) are packages of their own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

_LAZY: dict[str, str] = {
    "AHGPSEARD": "amorgp.amortizer.networks.ahgp",
    "Amortizer": "amorgp.amortizer.api",
    "Hyperparameter": "amorgp.amortizer.api",
    "KernelResult": "amorgp.amortizer.api",
    "PRETRAINED_DIR": "amorgp.amortizer.api",
    "Progress": "amorgp.amortizer.api",
    "pretrained_names": "amorgp.amortizer.networks.bundled",
    "resolve_checkpoint": "amorgp.amortizer.networks.bundled",
    "Checkpoint": "amorgp.amortizer.networks.checkpoint",
    "load_checkpoint": "amorgp.amortizer.networks.checkpoint",
    "load_model": "amorgp.amortizer.networks.checkpoint",
    "save_checkpoint": "amorgp.amortizer.networks.checkpoint",
    "NetworkConfig": "amorgp.amortizer.networks.config",
    "PRESETS": "amorgp.amortizer.networks.config",
    "Preset": "amorgp.amortizer.networks.config",
    "TrainConfig": "amorgp.amortizer.networks.config",
    "preset": "amorgp.amortizer.networks.config",
    "AmortizedGPRegressor": "amorgp.amortizer.frontends.estimator",
    "FittedKernel": "amorgp.amortizer.frontends.fitted_kernel",
    "Dataset": "amorgp.amortizer.frontends.io",
    "read_csv": "amorgp.amortizer.frontends.io",
    "AmortizedGP": "amorgp.amortizer.networks.model",
    "DatasetEncoder": "amorgp.amortizer.networks.model",
    "KernelEncoderDecoder": "amorgp.amortizer.networks.model",
    "NoiseHead": "amorgp.amortizer.networks.model",
    "Prediction": "amorgp.amortizer.networks.model",
    "SymbolHeads": "amorgp.amortizer.networks.model",
    "count_parameters": "amorgp.amortizer.networks.model",
    "AmortizationNetwork": "amorgp.amortizer.networks.network",
    "DatasetEncoding": "amorgp.amortizer.networks.network",
    "NetworkSpec": "amorgp.amortizer.networks.registry",
    "SE_VOCABULARY": "amorgp.amortizer.networks.registry",
    "build_model": "amorgp.amortizer.networks.registry",
    "network_names": "amorgp.amortizer.networks.registry",
    "network_spec": "amorgp.amortizer.networks.registry",
    "register_network": "amorgp.amortizer.networks.registry",
}
"""Public name -> the module that defines it, imported on first use."""

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
    "FittedKernel",
    "Dataset",
    "Hyperparameter",
    "KernelResult",
    "Progress",
    "read_csv",
    "SE_VOCABULARY",
    "AmortizedGP",
    "Checkpoint",
    "DatasetEncoder",
    "KernelEncoderDecoder",
    "NetworkConfig",
    "NoiseHead",
    "Prediction",
    "Preset",
    "SymbolHeads",
    "TrainConfig",
    "build_model",
    "count_parameters",
    "load_checkpoint",
    "load_model",
    "preset",
    "save_checkpoint",
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
