"""The prior p(dataset, kernel structure) of amorgp: fast batched GP dataset simulation.

>>> import torch
>>> from amorgp.simulator import Simulator, SimulatorConfig
>>> batch = Simulator(SimulatorConfig(n_max=40)).sample(16, torch.Generator().manual_seed(0))
>>> batch.X.shape[0]
16
"""

from amorgp.simulator.batch import SimulatedBatch
from amorgp.simulator.config import SimulatorConfig
from amorgp.simulator.inputs import INPUT_LAWS, sample_input_columns
from amorgp.simulator.parameters import PriorTable, sample_noise, sample_parameters
from amorgp.simulator.samplers import (
    GammaDraw,
    gamma_parameters,
    sample_exponential,
    sample_gamma,
    sample_geometric,
    sample_prior,
    sample_subsets,
    sample_uniform_int,
)
from amorgp.simulator.simulator import Inputs, Simulator, TargetDraw
from amorgp.simulator.storage import FixedSet, generate_fixed_set, read_fixed_set, write_fixed_set
from amorgp.simulator.stream import SimulatorStream, stream_seed
from amorgp.simulator.structures import (
    NegativeDraw,
    sample_negative_structures,
    sample_structures,
    structures_equal,
)

__all__ = [
    "INPUT_LAWS",
    "sample_input_columns",
    "FixedSet",
    "GammaDraw",
    "Inputs",
    "NegativeDraw",
    "PriorTable",
    "SimulatedBatch",
    "Simulator",
    "SimulatorConfig",
    "SimulatorStream",
    "TargetDraw",
    "gamma_parameters",
    "generate_fixed_set",
    "read_fixed_set",
    "sample_exponential",
    "sample_gamma",
    "sample_geometric",
    "sample_negative_structures",
    "sample_noise",
    "sample_parameters",
    "sample_prior",
    "sample_structures",
    "sample_subsets",
    "sample_uniform_int",
    "stream_seed",
    "structures_equal",
    "write_fixed_set",
]
