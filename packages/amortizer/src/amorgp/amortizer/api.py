"""Amortized inference for users: :class:`Amortizer` and its :class:`KernelResult`.

The front end in small modules, re-exported here:

* :mod:`amorgp.amortizer.inference` — :class:`Amortizer` (loading, validation, the
  network forward for a batch of kernels, the GP backend rule);
* :mod:`amorgp.amortizer.results` — :class:`KernelResult` (extends the fit-result base
  :class:`amorgp.lazy_kernels.KernelFit`) and the conditioned GP it keeps;
* :mod:`amorgp.amortizer.refine` — Type-2 ML refinement (``refine=k`` or ``"auto"``);
* :class:`Hyperparameter` — one row of a result's table (owned by
  :mod:`amorgp.lazy_kernels.fit`).
"""

from amorgp.amortizer.inference import (
    DEFAULT_ENCODER_POINTS,
    DEFAULT_MAX_ADDENDS,
    PRETRAINED_DIR,
    Amortizer,
    Progress,
)
from amorgp.amortizer.results import KernelResult
from amorgp.lazy_kernels.fit import Hyperparameter

__all__ = [
    "DEFAULT_ENCODER_POINTS",
    "DEFAULT_MAX_ADDENDS",
    "PRETRAINED_DIR",
    "Amortizer",
    "Hyperparameter",
    "KernelResult",
    "Progress",
]
