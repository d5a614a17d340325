"""The inference protocol shared by the baselines and the amortizer.

"Given a dataset and a list of kernels, return hyperparameters and log
marginal likelihoods" (``docs/architecture.md`` §2).  :class:`KernelFit` (the fit-result base
both the baselines' ``FitResult`` and the amortizer's ``KernelResult`` extend) and
:class:`HyperparameterInference` are owned by :mod:`amorgp.core.fit` and
re-exported here.
"""

from amorgp.core.fit import HyperparameterInference, KernelFit

__all__ = ["HyperparameterInference", "KernelFit"]
