"""amorgp.training: training the amortization network on simulated data.

The trainer, its loss, the run directory and run state, the CPU campaign, held-out pairs
and the process-level helpers (distribution ``amorgp-training``).  It builds on the
network and checkpoints of :mod:`amorgp.amortizer` and the simulator
(:mod:`amorgp.simulator`); the inference runtime imports nothing from here.
"""

from amorgp.training.loss import (
    LossOutput,
    gp_nll_per_point,
    phase1_loss,
    phase2_loss,
)
from amorgp.training.rundir import RunDirectory
from amorgp.training.train import (
    TrainResult,
    encoder_view,
    simulator_config,
    train,
    training_loss,
    validate,
)

__all__ = [
    "LossOutput",
    "RunDirectory",
    "TrainResult",
    "encoder_view",
    "gp_nll_per_point",
    "phase1_loss",
    "phase2_loss",
    "simulator_config",
    "train",
    "training_loss",
    "validate",
]
