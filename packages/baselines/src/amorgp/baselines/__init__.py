"""GP hyperparameter baselines for amorgp: Type-2 ML, MAP, SVGP, ADVI, and the deep inverse
Wishart process (DIWP).

Quick start::

    from amorgp.baselines import fit, fit_many

    result = fit(X, y, "SE + PER", method="gp-ml")
    mean, var = result.predict(X_test)
    results = fit_many(X, y, ["SE", "SE + LIN", "PER"], method="gp-ml-multistart")
"""

from amorgp.baselines.advi import (
    ADVIResult,
    advi,
    elbo_estimate,
    paper_gradients,
    positive_log_density,
)
from amorgp.baselines.api import (
    METHODS,
    Baseline,
    BaselineMethod,
    FitResult,
    Method,
    fit,
    fit_many,
    get_method,
    register_method,
)
from amorgp.baselines.bayesian import ADVISettings, GPPosterior, fit_advi_gp
from amorgp.baselines.data import train_test_split
from amorgp.baselines.diwp import DIWP, DIWPFit, DIWPSettings, fit_diwp
from amorgp.baselines.gp import (
    exact_posterior,
    exact_predictive,
    log_marginal_likelihood,
    log_prior,
)
from amorgp.baselines.gram_kernels import GRAM_KERNELS, GramBlocks, GramKernel, gram_kernel
from amorgp.baselines.protocol import HyperparameterInference, KernelFit
from amorgp.baselines.svgp import SVGPFit, SVGPSettings, fit_svgp_batch, svgp_elbo, svgp_predictive
from amorgp.baselines.type2ml import BatchFit, Type2MLSettings, fit_type2ml_batch

__all__ = [
    "ADVIResult",
    "ADVISettings",
    "METHODS",
    "Baseline",
    "BaselineMethod",
    "BatchFit",
    "DIWP",
    "DIWPFit",
    "DIWPSettings",
    "FitResult",
    "GRAM_KERNELS",
    "GramBlocks",
    "GramKernel",
    "GPPosterior",
    "HyperparameterInference",
    "KernelFit",
    "Method",
    "SVGPFit",
    "SVGPSettings",
    "Type2MLSettings",
    "advi",
    "elbo_estimate",
    "exact_posterior",
    "exact_predictive",
    "fit",
    "fit_advi_gp",
    "fit_diwp",
    "fit_many",
    "fit_svgp_batch",
    "fit_type2ml_batch",
    "get_method",
    "gram_kernel",
    "log_marginal_likelihood",
    "log_prior",
    "paper_gradients",
    "positive_log_density",
    "register_method",
    "svgp_elbo",
    "svgp_predictive",
    "train_test_split",
]
