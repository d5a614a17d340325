"""amorgp.amortizer: the amortization network g(D, S) -> (theta_S, sigma^2), its inference and CLI.

Importing this package (and running inference) loads neither the training code nor the
simulator: training lives in :mod:`amorgp.amortizer.training`, behind the
``amorgp-amortizer[train]`` extra.  Its names are still reachable from here, loaded on
first use with a :class:`DeprecationWarning`.  The scikit-learn-style
:class:`AmortizedGPRegressor` is loaded on first use too (it imports scikit-learn, when
installed, which costs more than the rest of the package).

>>> import torch
>>> from amorgp.amortizer import PRESETS, build_model
>>> from amorgp.amortizer.testing import random_padded_batch
>>> model = build_model(PRESETS["tiny"].network).eval()
>>> batch = random_padded_batch(torch.Generator().manual_seed(0), model.vocabulary, dtype=torch.float32)
>>> pred = model(batch)
>>> tuple(pred.params.shape), tuple(pred.noise.shape)
((3, 3, 3, 4), (3,))
"""

import sys as _sys
import types as _types
import warnings as _warnings
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from amorgp.amortizer import _moved
from amorgp.amortizer.ahgp import AHGPSEARD
from amorgp.amortizer.api import PRETRAINED_DIR, Amortizer, Hyperparameter, KernelResult, Progress
from amorgp.amortizer.bundled import pretrained_names, resolve_checkpoint
from amorgp.amortizer.checkpoint import Checkpoint, load_checkpoint, load_model, save_checkpoint
from amorgp.amortizer.config import PRESETS, NetworkConfig, Preset, TrainConfig, preset
from amorgp.amortizer.io import Dataset, as_dataset, read_csv
from amorgp.amortizer.model import (
    AmortizedGP,
    DatasetEncoder,
    KernelEncoderDecoder,
    NoiseHead,
    Prediction,
    SymbolHeads,
    count_parameters,
)
from amorgp.amortizer.network import AmortizationNetwork, DatasetEncoding
from amorgp.amortizer.registry import (
    SE_VOCABULARY,
    NetworkSpec,
    build_model,
    network_names,
    network_spec,
    register_network,
)

if _TYPE_CHECKING:
    from amorgp.amortizer.estimator import AmortizedGPRegressor

_moved.install()

#: names of the training API, reachable here for compatibility: name -> module.
_TRAINING_NAMES = {
    **dict.fromkeys(
        ("LossOutput", "gp_nll_per_point", "phase1_loss", "phase2_loss"),
        "amorgp.amortizer.training.loss",
    ),
    **dict.fromkeys(
        ("TrainResult", "encoder_view", "simulator_config", "train", "training_loss", "validate"),
        "amorgp.amortizer.training.train",
    ),
}
_OLD_MODULES = {old.rpartition(".")[2] for old in _moved.MOVED}


def __getattr__(name: str) -> _Any:
    import importlib

    if name in _TRAINING_NAMES:
        where = _TRAINING_NAMES[name]
        _warnings.warn(
            f"amorgp.amortizer.{name} moved to {where}.{name} (amorgp.amortizer.training); "
            "import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(where), name)
    if name in _OLD_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "AmortizedGPRegressor":  # loaded on first use: it imports scikit-learn if present
        from amorgp.amortizer.estimator import AmortizedGPRegressor

        return AmortizedGPRegressor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(_types.ModuleType):
    """Keeps a moved module's old name (``train``) bound to the API name, not the module
    the import system would set on the package when the old path is imported."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _OLD_MODULES and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

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
