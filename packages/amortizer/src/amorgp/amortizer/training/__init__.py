"""amorgp.amortizer.training: training the amortization network on simulated data.

The trainer, its loss, the run directory and run state, the CPU campaign and the
process-level helpers.  It needs the simulator, installed by the ``train`` extra
(``pip install 'amorgp-amortizer[train]'``); the inference runtime
(:mod:`amorgp.amortizer`) imports nothing from here.
"""

from amorgp.amortizer.errors import MissingExtraError

try:
    import amorgp.simulator  # noqa: F401
except ModuleNotFoundError as err:
    if err.name is None or not err.name.startswith("amorgp.simulator"):
        raise
    raise MissingExtraError(
        "training needs amorgp-simulator: pip install 'amorgp-amortizer[train]'",
        name=err.name,
    ) from None

from amorgp.amortizer.training.loss import (
    LossOutput,
    gp_nll_per_point,
    phase1_loss,
    phase2_loss,
)
from amorgp.amortizer.training.rundir import RunDirectory
from amorgp.amortizer.training.train import (
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
