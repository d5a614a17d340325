"""amorgp.ensembles: Bayesian model averaging and structure search over kernel structures.

Consumes the inference protocol (``fit_many(X, y, kernels)`` returning fits with a log
marginal likelihood and a predictive), so the amortization network, every baseline or
a user's own method can be plugged in.

>>> import torch
>>> from amorgp.ensembles import KernelEnsemble
>>> from amorgp.ensembles.testing import PriorMeanInference
>>> X = torch.linspace(0, 1, 20)[:, None]
>>> ens = KernelEnsemble.fit(PriorMeanInference(), X, torch.sin(6 * X[:, 0]), ["SE", "PER"])
>>> ens.predictive(X[:3]).mean().shape
torch.Size([3])
"""

from amorgp.ensembles.describe import TermSummary, describe_structure, format_description
from amorgp.ensembles.ensemble import FitLike, InferenceLike, KernelEnsemble, Weighting
from amorgp.ensembles.mixture import GaussianMixture
from amorgp.ensembles.search import Criterion, ScoredStructure, SearchResult, structure_search
from amorgp.ensembles.weights import bma_weights, stacking_weights, uniform_weights

__all__ = [
    "Criterion",
    "FitLike",
    "GaussianMixture",
    "InferenceLike",
    "KernelEnsemble",
    "ScoredStructure",
    "SearchResult",
    "TermSummary",
    "Weighting",
    "bma_weights",
    "describe_structure",
    "format_description",
    "stacking_weights",
    "structure_search",
    "uniform_weights",
]
