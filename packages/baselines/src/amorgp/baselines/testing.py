"""Reusable checks and dense numpy oracles for anything that fits GP hyperparameters.

* :func:`dense_kernel` / :func:`dense_log_marginal_likelihood` /
  :func:`dense_predictive`: float64 references built only from
  :meth:`amorgp.kernel_grammar.DimWiseStructure.reference` and the dense GP oracles of
  :mod:`amorgp.diff_linalg.testing` (independent of the torch evaluator and of this
  package's GP code).
* :func:`check_kernel_fit`: conformance of a :class:`~amorgp.core.fit.KernelFit`
  (keys, positivity, predictive shapes, non-negative variances, original units, a JSON
  summary without NaN/inf).
* :func:`check_inference`: conformance of a
  :class:`~amorgp.core.fit.HyperparameterInference` implementation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from amorgp.core.fit import HyperparameterInference, KernelFit
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood, dense_gp_predictive
from amorgp.kernel_grammar import DimWiseStructure

__all__ = [
    "check_inference",
    "check_kernel_fit",
    "dense_kernel",
    "dense_log_marginal_likelihood",
    "dense_predictive",
    "gpytorch_se_reference_fit",
    "synthetic_dataset",
]

Hyper = Mapping[tuple[int, int, str], float]


def synthetic_dataset(
    n: int, d: int, seed: int = 0, noise: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """A small float64 regression problem: ``X ~ U[0, 1]^d``, ``y = sin(6 x_0) + sum_{k>0} x_k^2 + eps``, standardised."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    f = torch.sin(6.0 * X[:, 0]) + (X[:, 1:] ** 2).sum(1)
    y = f + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return X, (y - y.mean()) / y.std()


def dense_kernel(
    X1: np.ndarray, X2: np.ndarray, structure: DimWiseStructure, hyper: Hyper
) -> np.ndarray:
    """``prod_d sum_l k_{s_dl}(X1[:, d], X2[:, d])`` by :meth:`DimWiseStructure.reference`.

    ``hyper`` maps ``(dim, addend, name)`` (as in ``structure.param_names()``) to values.
    """
    names = structure.param_names()
    params = np.ones((structure.n_dims, structure.max_addends, 1 + max(p.slot for p in names)))
    for p in names:
        params[p.dim, p.addend, p.slot] = hyper[(p.dim, p.addend, p.param)]
    X1 = np.asarray(X1, float).reshape(len(X1), -1)
    X2 = np.asarray(X2, float).reshape(len(X2), -1)
    return structure.reference(X1, X2, params)


def dense_log_marginal_likelihood(
    X: np.ndarray, y: np.ndarray, structure: DimWiseStructure, hyper: Hyper, noise: float
) -> float:
    """``log N(y | 0, K + noise I)`` by the dense oracle of ``amorgp.diff_linalg.testing``."""
    K = dense_kernel(X, X, structure, hyper)
    return float(dense_gp_log_marginal_likelihood(K, np.asarray(y, float), noise))


def dense_predictive(
    X: np.ndarray,
    y: np.ndarray,
    X_new: np.ndarray,
    structure: DimWiseStructure,
    hyper: Hyper,
    noise: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior predictive of ``y`` (noise included) by dense float64 algebra."""
    return dense_gp_predictive(
        dense_kernel(X, X, structure, hyper),
        dense_kernel(X, X_new, structure, hyper),
        np.diag(dense_kernel(X_new, X_new, structure, hyper)),
        np.asarray(y, float),
        noise,
    )


def check_kernel_fit(result: KernelFit, X_test: Any) -> None:
    """Assert the :class:`KernelFit` conformance of one fit.

    Checks: it is a :class:`KernelFit`; one finite positive value per parameter of
    the structure (keys ``(dim, addend, name)``, also in original units); positive
    noise; finite objective; predictive mean and variance of shape ``(m,)``, finite,
    variance positive and larger with noise than without; a JSON summary.
    """
    assert isinstance(result, KernelFit), f"{type(result).__name__} is not a KernelFit"
    expected = {(p.dim, p.addend, p.param) for p in result.kernel.param_names()}
    assert set(result.hyperparameters) == expected, "hyperparameter keys differ from the structure"
    values = np.array(list(result.hyperparameters.values()))
    assert np.all(np.isfinite(values)), "hyperparameters must be finite"
    assert np.all(values > 0), "hyperparameters must be positive"
    assert result.noise > 0, "noise must be positive"
    assert math.isfinite(result.noise), "noise must be finite"
    assert math.isfinite(result.log_marginal_likelihood), "log marginal likelihood must be finite"
    X_test = torch.as_tensor(np.asarray(X_test, float))
    mean, var = result.predict(X_test)
    m = X_test.shape[0]
    assert tuple(mean.shape) == (m,), "predictive mean must be (m,)"
    assert tuple(var.shape) == (m,), "predictive variance must be (m,)"
    assert bool(torch.isfinite(mean).all() and torch.isfinite(var).all()), (
        "predictive must be finite"
    )
    assert bool((var > 0).all()), "predictive variances of y must be positive"
    _, var_f = result.predict(X_test, include_noise=False)
    assert bool((var_f <= var + 1e-12).all()), (
        "variance without noise must not exceed the one with noise"
    )
    assert set(result.hyperparameters_original) == expected, "original-unit keys differ"
    summary = json.dumps(result.to_dict(), allow_nan=False)  # finite numbers only
    assert result.kernel_text in summary


def check_inference(
    method: HyperparameterInference, X: Any, y: Any, kernels: Sequence[str]
) -> list[KernelFit]:
    """Assert the :class:`HyperparameterInference` conformance on one dataset; returns the fits."""
    assert isinstance(method, HyperparameterInference)
    fits = list(method.fit_many(X, y, kernels))
    assert len(fits) == len(kernels), "one fit per kernel"
    d = np.asarray(X).reshape(len(X), -1).shape[1]
    for k, f in zip(kernels, fits, strict=True):
        assert f.kernel == DimWiseStructure.parse(k, d), (
            f"fit order differs from the kernels ({f.kernel} vs {k})"
        )
        check_kernel_fit(f, X)
    return fits


def gpytorch_se_reference_fit(
    X: Tensor, y: Tensor, steps: int, lr: float = 0.1, *, ard: bool = False
) -> tuple[float, dict[str, Any], float]:
    """The peer fit: GPyTorch ``ExactGP`` with ``ScaleKernel(RBF)`` (ARD optional), zero mean,
    the baselines' default start (variance 1, lengthscale 1, noise 0.04) and Adam.

    Exact Cholesky algebra (``fast_computations`` off); needs ``gpytorch`` (imported on use).

    Returns:
        ``(log marginal likelihood, {"variance", "lengthscale", "noise"}, seconds)``, the
        LML of the final parameters (not per point); ``lengthscale`` is a list with ARD.
    """
    import time

    import gpytorch

    class Model(gpytorch.models.ExactGP):
        def __init__(self, likelihood: object) -> None:
            super().__init__(X, y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            rbf = gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1] if ard else None)
            self.covar_module = gpytorch.kernels.ScaleKernel(rbf)

        def forward(self, x: Tensor) -> object:
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    t0 = time.perf_counter()
    lik = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(1e-6)
    )
    model = Model(lik).double()
    base = model.covar_module.base_kernel
    model.covar_module.outputscale = 1.0
    base.lengthscale = 1.0
    lik.noise = 0.04
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with (
        gpytorch.settings.fast_computations(False, False, False),
        gpytorch.settings.max_cholesky_size(10_000),
    ):
        for _ in range(steps):
            opt.zero_grad()
            loss = -mll(model(X), y)
            loss.backward()
            opt.step()
        elapsed = time.perf_counter() - t0
        value = float(mll(model(X), y).detach()) * len(y)
    ls = base.lengthscale.detach().reshape(-1)
    hyper: dict[str, Any] = {
        "variance": float(model.covar_module.outputscale.detach()),
        "noise": float(lik.noise.detach()),
        "lengthscale": ls.tolist() if ard else float(ls[0]),
    }
    return value, hyper, elapsed
