"""Simulator -> lazy-kernels -> diff-linalg: a simulated batch scored under its true kernel.

The log marginal likelihood of every simulated dataset under its ground-truth
structure, parameters and noise, computed on the padded batch with the batched
evaluator and diff-linalg, must equal scipy's multivariate normal log density
under a dense numpy covariance built from kernel-grammar's reference formulas.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from amorgp.diff_linalg import gp_log_marginal_likelihood
from amorgp.lazy_kernels import kernel_matrix_dimwise
from amorgp.simulator import Simulator, SimulatorConfig
from amorgp.simulator.testing import check_batch, dense_covariance, structure_of


def test_true_kernel_likelihood_of_a_simulated_batch_matches_scipy() -> None:
    cfg = SimulatorConfig.paper_finetune(n_min=5, n_max=25, d_max=3)
    batch = Simulator(cfg).sample(12, torch.Generator().manual_seed(4))
    check_batch(batch, cfg)
    K = kernel_matrix_dimwise(
        batch.X,
        batch.X,
        batch.true_symbols,
        batch.true_symbol_mask,
        batch.params,
        cfg.vocabulary,
        batch.dim_mask,
    )
    lml = gp_log_marginal_likelihood(K, batch.y, batch.noise, batch.point_mask)
    for b in range(len(batch)):
        n, d = int(batch.n_points[b]), int(batch.n_dims[b])
        cov = dense_covariance(
            batch.X[b, :n, :d].numpy(),
            structure_of(batch.true_symbols, batch.params, b, cfg.vocabulary),
            float(batch.noise[b]),
        )
        ref = stats.multivariate_normal(np.zeros(n), cov).logpdf(batch.y[b, :n].numpy())
        np.testing.assert_allclose(float(lml[b]), ref, rtol=1e-8)
