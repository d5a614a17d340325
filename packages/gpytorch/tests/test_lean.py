"""The lean training objective against GPyTorch's ExactMarginalLogLikelihood and BoTorch's fit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("gpytorch")
pytest.importorskip("botorch")

import gpytorch
import gpytorch.kernels as gk
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from gpytorch.means import LinearMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import GammaPrior, NormalPrior

from amorgp.amortizer import Amortizer
from amorgp.core.errors import OptionError
from amorgp.gpytorch import AmortizedFit, LeanObjective

TOL = 1e-8


@pytest.fixture(scope="module")
def amz() -> Amortizer:
    return Amortizer.from_pretrained()


def _data(seed: int, n: int, d: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64) * scale
    y = (6.0 * X / scale).sin().sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, 2.0 * y[:, None] + 1.0


def _model(name: str) -> tuple[SingleTaskGP, bool]:
    """A model and whether the closed form (RBF) should evaluate it."""
    if name == "default-d2":
        return SingleTaskGP(*_data(0, 25, 2)), True
    if name == "default-d6":
        return SingleTaskGP(*_data(1, 40, 6)), True
    if name == "normalize":
        X, Y = _data(2, 30, 3, scale=7.0)
        return SingleTaskGP(X - 2.0, Y, input_transform=Normalize(3)), True
    if name == "scale-rbf-gamma":
        covar = gk.ScaleKernel(
            gk.RBFKernel(ard_num_dims=2, lengthscale_prior=GammaPrior(3.0, 6.0)),
            outputscale_prior=GammaPrior(2.0, 0.15),
        )
        return SingleTaskGP(*_data(3, 30, 2), covar_module=covar), True
    if name == "rbf-shared":  # one lengthscale for all columns, softplus constraints
        return SingleTaskGP(*_data(12, 25, 3), covar_module=gk.RBFKernel()), True
    if name == "mean-prior":
        mean = gpytorch.means.ConstantMean(constant_prior=NormalPrior(0.5, 2.0))
        return SingleTaskGP(*_data(4, 20, 2), mean_module=mean), True
    if name == "sum-product":
        covar = gk.ScaleKernel(gk.RBFKernel(ard_num_dims=2)) + gk.ScaleKernel(
            gk.PeriodicKernel(active_dims=[0]) * gk.LinearKernel(active_dims=[0])
        )
        return SingleTaskGP(*_data(5, 30, 2), covar_module=covar), False
    if name == "per-lin-const":
        covar = gk.ProductKernel(
            gk.ScaleKernel(gk.PeriodicKernel(active_dims=[1])),
            gk.AdditiveKernel(gk.LinearKernel(active_dims=[0]), gk.ConstantKernel(active_dims=[0])),
        )
        return SingleTaskGP(*_data(6, 25, 2), covar_module=covar), False
    raise AssertionError(name)


def _perturb(model: SingleTaskGP, seed: int) -> None:
    """Move every hyperparameter off its initial value (noise kept well conditioned)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            if "raw_noise" in name:
                p.clamp_(min=0.1)
            if "raw_lengthscale" in name:
                p.clamp_(min=0.3)


def _gpytorch(mll: ExactMarginalLogLikelihood, params: list[torch.Tensor]):
    model = mll.model
    mll.train()
    mll.zero_grad()
    loss = -mll(model(*model.train_inputs), model.train_targets)
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in params]).numpy()
    return float(loss.detach()), grad


MODELS = [
    "default-d2",
    "default-d6",
    "normalize",
    "scale-rbf-gamma",
    "rbf-shared",
    "mean-prior",
    "sum-product",
    "per-lin-const",
]


@pytest.mark.parametrize("name", MODELS)
def test_value_and_gradient_equal_gpytorch(name: str) -> None:
    model, closed = _model(name)
    _perturb(model, 11)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    objective = LeanObjective(mll)
    assert (objective.closed_form is not None) == closed
    value, grad = objective.value_and_grad(objective.x0())
    ref_value, ref_grad = _gpytorch(mll, objective.params)
    assert value == pytest.approx(ref_value, abs=TOL)
    assert abs(grad - ref_grad).max() < TOL
    assert len(grad) == sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["default-d2", "scale-rbf-gamma", "sum-product"])
def test_minimize_reaches_botorch_optimum(name: str) -> None:
    """From the same start, the lean L-BFGS-B stops where BoTorch's full fit stops."""
    model, _ = _model(name)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    start = {k: v.clone() for k, v in mll.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(mll)
    ref = -_gpytorch(mll, list(mll.parameters()))[0]
    mll.load_state_dict(start)
    mll.train()
    res = LeanObjective(mll).minimize(500)
    assert res.mll == pytest.approx(-_gpytorch(mll, list(mll.parameters()))[0], abs=TOL)
    assert res.mll == pytest.approx(ref, abs=1e-5)
    assert res.mll >= ref - 1e-7


def test_minimize_improves_and_respects_bounds() -> None:
    model, _ = _model("default-d2")
    _perturb(model, 3)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    objective = LeanObjective(mll)
    start = -objective.value_and_grad(objective.x0())[0]
    res = objective.minimize(3)
    assert res.iterations <= 3
    assert res.mll > start
    assert float(model.covar_module.lengthscale.detach().min()) >= 2.5e-2
    assert float(model.likelihood.noise.detach().min()) >= 1e-4


@pytest.mark.parametrize(
    "what", ["matern", "fixed-plus-learned-noise", "multi-output", "linear-mean"]
)
def test_unsupported_models_raise(what: str) -> None:
    X, Y = _data(7, 20, 2)
    if what == "matern":
        model = SingleTaskGP(X, Y, covar_module=gk.MaternKernel(ard_num_dims=2))
    elif what == "fixed-plus-learned-noise":  # fixed noise alone is supported
        lik = FixedNoiseGaussianLikelihood(
            torch.full((20,), 0.01, dtype=torch.float64), learn_additional_noise=True
        )
        model = SingleTaskGP(X, Y, likelihood=lik)
    elif what == "multi-output":
        model = SingleTaskGP(X, torch.cat([Y, -Y], -1))
    else:
        model = SingleTaskGP(X, Y, mean_module=LinearMean(2))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    with pytest.raises(OptionError):
        LeanObjective(mll)


def test_amortized_fit_uses_botorch_scipy_outside_the_lean_objective(amz: Amortizer) -> None:
    model = SingleTaskGP(*_data(8, 20, 2), mean_module=LinearMean(2))
    fit = AmortizedFit(amortizer=amz)
    fit(ExactMarginalLogLikelihood(model.likelihood, model))
    assert (fit.calls, fit.fallbacks, fit.slow_refines) == (1, 0, 1)
    assert not model.training


class _ScaledInputsGP(SingleTaskGP):
    """A model whose forward doubles its inputs: the lean objective cannot know that."""

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        return super().forward(2.0 * x)


def test_amortized_fit_falls_back_when_the_objective_differs(amz: Amortizer) -> None:
    model = _ScaledInputsGP(*_data(9, 20, 2))
    fit = AmortizedFit(amortizer=amz)
    fit(ExactMarginalLogLikelihood(model.likelihood, model))
    assert (fit.calls, fit.fallbacks) == (1, 1)
    assert "differs from the model's MLL" in fit.last_error


@pytest.mark.parametrize("d", [2, 6])
def test_amortized_fit_default_matches_model_mll(amz: Amortizer, d: int) -> None:
    """The default fit ends at a stationary point of the model's own objective."""
    model = SingleTaskGP(*_data(10 + d, 30, d))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    fit = AmortizedFit(amortizer=amz)
    fit(mll)
    assert (fit.fallbacks, fit.slow_refines) == (0, 0)
    model.train()
    objective = LeanObjective(mll)
    value, grad = objective.value_and_grad(objective.x0())
    ref_value, _ = _gpytorch(mll, objective.params)
    assert value == pytest.approx(ref_value, abs=TOL)
    # projected gradient small: free coordinates only (bounds on lengthscale and noise)
    x, (lo, _) = objective.x0(), _bounds(objective)
    free = ~((x <= lo + 1e-12) & (grad > 0))
    assert abs(grad[free] * abs(x[free]).clip(min=1.0)).max() < 1e-3


def _bounds(objective: LeanObjective):
    import numpy as np

    lo = np.array([-np.inf if b[0] is None else b[0] for b in objective.bounds])
    hi = np.array([np.inf if b[1] is None else b[1] for b in objective.bounds])
    return lo, hi


def test_grouped_priors_equal_scipy_densities() -> None:
    """The priors grouped by family (two on one value included) against scipy.stats log
    densities, and their derivatives against central differences."""
    from scipy import stats

    from amorgp.gpytorch.lean_rbf import _Priors

    terms = [
        ("lognormal", np.array([0, 1]), np.array([-0.5, 0.2]), np.array([0.7, 1.3])),
        ("normal", np.array([3]), np.array([0.4]), np.array([2.0])),
        ("gamma", np.array([2]), np.array([3.0]), np.array([6.0])),
        ("gamma", np.array([2]), np.array([1.5]), np.array([0.5])),  # a second prior on v[2]
    ]
    priors = _Priors(terms)
    v = np.array([0.3, 1.7, 0.45, -0.2])

    def oracle(x: np.ndarray) -> float:
        return float(
            stats.lognorm.logpdf(x[0], 0.7, scale=np.exp(-0.5))
            + stats.lognorm.logpdf(x[1], 1.3, scale=np.exp(0.2))
            + stats.norm.logpdf(x[3], 0.4, 2.0)
            + stats.gamma.logpdf(x[2], 3.0, scale=1 / 6.0)
            + stats.gamma.logpdf(x[2], 1.5, scale=1 / 0.5)
        )

    g = np.zeros(4)
    assert priors.add_to(v, g) == pytest.approx(oracle(v), rel=1e-12)
    h = 1e-6
    fd = [(oracle(v + h * e) - oracle(v - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
