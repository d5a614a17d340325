"""amorgp.amortizer: the amortization network g(D, S) -> (theta_S, sigma^2), its training and CLI.

>>> import torch
>>> from amorgp.amortizer import PRESETS, build_model
>>> from amorgp.amortizer.testing import random_padded_batch
>>> model = build_model(PRESETS["tiny"].network).eval()
>>> batch = random_padded_batch(torch.Generator().manual_seed(0), model.vocabulary, dtype=torch.float32)
>>> pred = model(batch)
>>> tuple(pred.params.shape), tuple(pred.noise.shape)
((3, 3, 3, 4), (3,))
"""

from amorgp.amortizer.ahgp import AHGPSEARD
from amorgp.amortizer.api import PRETRAINED_DIR, Amortizer, Hyperparameter, KernelResult, Progress
from amorgp.amortizer.bundled import pretrained_names, resolve_checkpoint
from amorgp.amortizer.checkpoint import Checkpoint, load_checkpoint, load_model, save_checkpoint
from amorgp.amortizer.config import PRESETS, NetworkConfig, Preset, TrainConfig, preset
from amorgp.amortizer.estimator import AmortizedGPRegressor
from amorgp.amortizer.io import Dataset, as_dataset, read_csv
from amorgp.amortizer.loss import LossOutput, gp_nll_per_point, phase1_loss, phase2_loss
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
from amorgp.amortizer.train import (
    TrainResult,
    encoder_view,
    simulator_config,
    train,
    training_loss,
    validate,
)

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
