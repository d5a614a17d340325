"""The deep inverse Wishart process (DIWP): a deep kernel process whose hidden layers are
Gram matrices with inverse Wishart distributions (Aitchison, Yang & Ober 2021).

See :mod:`amorgp.baselines.diwp.model` for the model and its approximate posterior,
:mod:`amorgp.baselines.diwp.layers` for the layers and the conditional sampling, and
:mod:`amorgp.baselines.diwp.fit` for training, prediction and ``method="diwp"``.
"""

from amorgp.baselines.diwp.fit import DIWPFit, diwp_kernel, fit_diwp, fit_diwp_normalized
from amorgp.baselines.diwp.layers import (
    PointNoise,
    bartlett_log_prob,
    bartlett_rsample,
    conditional_dof,
    draw_point_noise,
    input_gram,
    output_conditional,
    output_log_ratio,
    sample_conditional,
    sample_inducing_gram,
    sample_output,
)
from amorgp.baselines.diwp.model import DIWP, DIWPSettings, InducingSample

__all__ = [
    "DIWP",
    "DIWPFit",
    "DIWPSettings",
    "InducingSample",
    "PointNoise",
    "bartlett_log_prob",
    "bartlett_rsample",
    "conditional_dof",
    "diwp_kernel",
    "draw_point_noise",
    "fit_diwp",
    "fit_diwp_normalized",
    "input_gram",
    "output_conditional",
    "output_log_ratio",
    "sample_conditional",
    "sample_inducing_gram",
    "sample_output",
]
