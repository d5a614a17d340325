"""Differentiable linear algebra (Seeger et al.) and GP building blocks for amorgp."""

from amorgp.diff_linalg.buckets import size_buckets
from amorgp.diff_linalg.cholesky import CholeskyResult, robust_cholesky
from amorgp.diff_linalg.distributions import (
    InverseWishart,
    kl_inverse_wishart,
    multivariate_digamma,
    multivariate_lgamma,
)
from amorgp.diff_linalg.examples import blr_log_evidence, kalman_nll, sparse_gp_titsias_bound
from amorgp.diff_linalg.gp import DEFAULT_STRATEGY, gp_log_marginal_likelihood
from amorgp.diff_linalg.operators import (
    EighResult,
    LQResult,
    copyltu,
    gelqf,
    gemm2,
    potrf,
    potri,
    sumlogdiag,
    syevd,
    syrk,
    trmm,
    trsm,
)
from amorgp.diff_linalg.optim import (
    BatchedOptimResult,
    LBFGSResult,
    LBFGSRun,
    batched_adam,
    lbfgs,
)

__all__ = [
    "size_buckets",
    "blr_log_evidence",
    "kalman_nll",
    "sparse_gp_titsias_bound",
    "InverseWishart",
    "kl_inverse_wishart",
    "multivariate_digamma",
    "multivariate_lgamma",
    "EighResult",
    "LQResult",
    "copyltu",
    "gelqf",
    "gemm2",
    "potrf",
    "potri",
    "sumlogdiag",
    "syevd",
    "syrk",
    "trmm",
    "trsm",
    "DEFAULT_STRATEGY",
    "CholeskyResult",
    "gp_log_marginal_likelihood",
    "robust_cholesky",
    "BatchedOptimResult",
    "LBFGSResult",
    "LBFGSRun",
    "batched_adam",
    "lbfgs",
]
