"""Differentiable linear algebra (Seeger et al.) and GP building blocks for amorgp."""

from amorgp.diff_linalg.cholesky import CholeskyResult, robust_cholesky
from amorgp.diff_linalg.gp import DEFAULT_STRATEGY, gp_log_marginal_likelihood

__all__ = [
    "DEFAULT_STRATEGY",
    "CholeskyResult",
    "gp_log_marginal_likelihood",
    "robust_cholesky",
]
