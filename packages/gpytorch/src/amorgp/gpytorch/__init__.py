"""GPyTorch and BoTorch bridge (the ``amorgp-gpytorch`` distribution; also pulled by the
``amorgp-amortizer[gpytorch]`` extra).

* :func:`to_gpytorch` — an amortized (or refined) :class:`~amorgp.amortizer.KernelResult`
  as a BoTorch ``SingleTaskGP`` (a GPyTorch ``ExactGP``) with the same kernel,
  hyperparameters and likelihood, in original units, with ``Normalize`` and
  ``Standardize`` transforms.
* :func:`initialize_gpytorch` — set an existing GPyTorch/BoTorch model's hyperparameters
  from one forward pass of the network.
* :func:`fit_amortized` / :class:`AmortizedFit` — a drop-in for BoTorch's
  ``fit_gpytorch_mll``: amortized start, L-BFGS-B on the model's own objective evaluated
  directly (:class:`LeanObjective`), BoTorch's own fit as the fallback.
"""

try:
    import botorch  # noqa: F401

    import gpytorch  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "amorgp.gpytorch needs GPyTorch and BoTorch: "
        "pip install amorgp-gpytorch (or 'amorgp-amortizer[gpytorch]')"
    ) from err

from amorgp.gpytorch.export import to_gpytorch
from amorgp.gpytorch.fit import (
    REFINE_STEPS,
    AmortizedFit,
    default_amortizer,
    fit_amortized,
    initialize_gpytorch,
    model_data,
    warm_up,
)
from amorgp.gpytorch.kernels import KernelMap, build_kernel, read_kernel
from amorgp.gpytorch.lean import LeanObjective, LeanResult

__all__ = [
    "REFINE_STEPS",
    "AmortizedFit",
    "KernelMap",
    "LeanObjective",
    "LeanResult",
    "build_kernel",
    "default_amortizer",
    "fit_amortized",
    "initialize_gpytorch",
    "model_data",
    "read_kernel",
    "to_gpytorch",
    "warm_up",
]
