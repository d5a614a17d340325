"""The four exact-GP call sites (baselines' predictive, the ensemble's batched members, the
GPyTorch bridge's closed-form and generic objectives) against one dense float64 oracle.

All four factor through :meth:`amorgp.lazy_kernels.Posterior.dense`; the oracle here uses
``torch.linalg.solve`` and ``torch.linalg.slogdet`` on the same ARD squared-exponential
kernel and data.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("gpytorch")

import gpytorch
import gpytorch.kernels as gk
from gpytorch.mlls import ExactMarginalLogLikelihood

from amorgp.baselines import exact_predictive
from amorgp.ensembles.batched import batched_member_predictive
from amorgp.gpytorch import LeanObjective
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import PaddedBatch

TOL = dict(rtol=1e-9, atol=1e-10)
# (lengthscales, outputscale, noise) of two SE-ARD models
MODELS = [((0.7, 1.3), 1.5, 0.1), ((0.4, 2.0), 0.8, 0.05)]


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    X = 3.0 * torch.rand(15, 2, generator=g, dtype=torch.float64)
    y = torch.sin(2.0 * X[:, 0]) * X[:, 1] + 0.1 * torch.randn(15, generator=g, dtype=torch.float64)
    Xq = 3.0 * torch.rand(9, 2, generator=g, dtype=torch.float64)
    return X, y, Xq


def _se(A: torch.Tensor, B: torch.Tensor, ls: torch.Tensor, os: torch.Tensor) -> torch.Tensor:
    diff = (A[:, None, :] - B[None, :, :]) / ls
    return os * torch.exp(-0.5 * (diff * diff).sum(-1))


def _oracle_lml(X, y, ls, os, noise) -> torch.Tensor:
    A = _se(X, X, ls, os) + noise * torch.eye(X.shape[0], dtype=X.dtype)
    return (
        -0.5 * y @ torch.linalg.solve(A, y)
        - 0.5 * torch.linalg.slogdet(A)[1]
        - 0.5 * X.shape[0] * math.log(2 * math.pi)
    )


def _oracle_predictive(X, y, Xq, ls, os, noise) -> tuple[torch.Tensor, torch.Tensor]:
    ls_t, os_t = torch.tensor(ls, dtype=torch.float64), torch.tensor(os, dtype=torch.float64)
    A = _se(X, X, ls_t, os_t) + noise * torch.eye(X.shape[0], dtype=X.dtype)
    Ks = _se(X, Xq, ls_t, os_t)
    mean = Ks.T @ torch.linalg.solve(A, y)
    var = os - (Ks * torch.linalg.solve(A, Ks)).sum(0) + noise
    return mean, var


def _grammar_params(batch: PaddedBatch, b: int, params: torch.Tensor, model) -> None:
    """SE on each of two dimensions: the product is an SE-ARD with variance v0 * v1."""
    ls, os, _ = model
    names = {p.param: p.slot for p in DimWiseStructure.parse("SE", 2).param_names()}
    params[b, 0, 0, names["variance"]] = os
    params[b, 1, 0, names["variance"]] = 1.0
    params[b, 0, 0, names["lengthscale"]] = ls[0]
    params[b, 1, 0, names["lengthscale"]] = ls[1]


def test_baselines_exact_predictive_equals_oracle_on_a_padded_batch() -> None:
    X, y, Xq = _data()
    k = DimWiseStructure.parse("SE", 2)
    batch = PaddedBatch.from_datasets([(X, y), (X[:9], y[:9])], [k, k])
    params = torch.ones(batch.param_shape, dtype=torch.float64)
    for b, model in enumerate(MODELS):
        _grammar_params(batch, b, params, model)
    noise = torch.tensor([m[2] for m in MODELS], dtype=torch.float64)
    mean, var = exact_predictive(batch, params, noise, Xq.expand(2, -1, -1))
    for b, n in enumerate((15, 9)):
        m_ref, v_ref = _oracle_predictive(X[:n], y[:n], Xq, *MODELS[b])
        torch.testing.assert_close(mean[b], m_ref, **TOL)
        torch.testing.assert_close(var[b], v_ref, **TOL)


class _Identity:
    def transform_x(self, X):
        return X

    def transform_y(self, y):
        return y

    def unnormalize_predictive(self, mean, var):
        return mean, var


def test_ensemble_batched_members_equal_oracle() -> None:
    X, y, Xq = _data()
    k = DimWiseStructure.parse("SE", 2)
    fits = []
    for ls, os, noise in MODELS:
        hyper = {
            (0, 0, "variance"): os,
            (1, 0, "variance"): 1.0,
            (0, 0, "lengthscale"): ls[0],
            (1, 0, "lengthscale"): ls[1],
        }
        fits.append(
            SimpleNamespace(kernel=k, hyperparameters=hyper, noise=noise, normalization=_Identity())
        )
    out = batched_member_predictive(fits, X, y, Xq, chunk=4)
    assert out is not None
    for m, model in enumerate(MODELS):
        m_ref, v_ref = _oracle_predictive(X, y, Xq, *model)
        torch.testing.assert_close(out[0][m], m_ref, **TOL)
        torch.testing.assert_close(out[1][m], v_ref, **TOL)


class _GP(gpytorch.models.ExactGP):
    def __init__(self, X, y, covar) -> None:
        lik = gpytorch.likelihoods.GaussianLikelihood().double()
        super().__init__(X, y, lik)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = covar

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


@pytest.mark.parametrize("closed_form", [True, False])
def test_bridge_objective_value_and_gradient_equal_oracle(closed_form: bool) -> None:
    X, y, _ = _data()
    ls, os, noise = MODELS[0]
    active = None if closed_form else [0, 1]  # active_dims sends it to the generic path
    covar = gk.ScaleKernel(gk.RBFKernel(ard_num_dims=2, active_dims=active)).double()
    model = _GP(X, y, covar)
    model.covar_module.outputscale = os
    model.covar_module.base_kernel.lengthscale = torch.tensor([ls], dtype=torch.float64)
    model.likelihood.noise = noise
    lean = LeanObjective(ExactMarginalLogLikelihood(model.likelihood, model))
    assert (lean.closed_form is not None) is closed_form
    value, grad = lean.value_and_grad(lean.x0())

    # oracle: the same raw parameters through GPyTorch's constraints, dense solve/slogdet
    raw = {id(p): p.detach().clone().requires_grad_(True) for p in lean.params}
    k, lik = model.covar_module, model.likelihood.noise_covar

    def const(mod, name):
        return getattr(mod, f"raw_{name}_constraint").transform(
            raw[id(getattr(mod, f"raw_{name}"))]
        )

    lml = _oracle_lml(
        X,
        y,
        const(k.base_kernel, "lengthscale").reshape(-1),
        const(k, "outputscale").reshape(()),
        const(lik, "noise").reshape(()),
    )
    g_ref = torch.autograd.grad(lml / X.shape[0], [raw[id(p)] for p in lean.params])
    assert value == pytest.approx(-float(lml.detach()) / X.shape[0], rel=1e-10, abs=1e-12)
    g_flat = torch.cat([g.reshape(-1) for g in g_ref]).numpy()
    torch.testing.assert_close(
        torch.from_numpy(grad), -torch.from_numpy(g_flat), rtol=1e-7, atol=1e-9
    )
