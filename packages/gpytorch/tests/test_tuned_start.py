"""The network's start tuned on the model's own objective (priors included) and the race
of the two starts, against GPyTorch's own marginal log likelihood and scipy."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import PeriodicKernel, RBFKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from scipy.optimize import minimize_scalar

import amorgp.gpytorch.fit as fit_module
from amorgp.gpytorch import AmortizedFit, LeanObjective
from amorgp.gpytorch.start_tuning import LENGTHSCALE_FACTORS, NOISE_GRID


def _branin_like(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth noiseless function on the unit square (BoTorch's noise prior then keeps
    the noise near its mode, far from Type-2 ML's bound)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = (X[:, 1] - 1.3 * X[:, 0] ** 2 + 0.8 * X[:, 0]) ** 2 + 0.3 * (4.0 * X[:, 0]).cos()
    return X, y[:, None]


def _mll(model: SingleTaskGP) -> ExactMarginalLogLikelihood:
    return ExactMarginalLogLikelihood(model.likelihood, model)


def _gpytorch_mll(mll: ExactMarginalLogLikelihood) -> float:
    model = mll.model
    model.train()
    with torch.no_grad():
        return float(mll(model(*model.train_inputs), model.train_targets))


def _noise_optimum(mll: ExactMarginalLogLikelihood) -> tuple[float, float]:
    """The noise maximising GPyTorch's MLL (priors included) with everything else fixed:
    scipy's bounded search on log noise, GPyTorch evaluating."""
    model = mll.model
    lower = float(model.likelihood.noise_covar.raw_noise_constraint.lower_bound)

    def negative(log_noise: float) -> float:
        with torch.no_grad():
            model.likelihood.noise_covar.raw_noise.fill_(math.exp(log_noise))
        return -_gpytorch_mll(mll)

    out = minimize_scalar(negative, bounds=(math.log(lower * 1.01), 0.0), method="bounded")
    return math.exp(out.x), -float(out.fun)


def test_noise_pass_reaches_the_model_objectives_noise_optimum() -> None:
    """With the lengthscales held (not trainable), the tuned start's noise is the 1-D
    optimum of GPyTorch's MLL (priors included) to within one grid step, its MLL within
    0.01 nats per point of scipy's optimum, and above the start's."""
    X, y = _branin_like(0, 18)
    model = SingleTaskGP(X, y)
    model.covar_module.raw_lengthscale.requires_grad_(False)
    with torch.no_grad():
        model.covar_module.lengthscale = torch.tensor([[0.3, 0.4]], dtype=torch.float64)
        model.likelihood.noise = torch.tensor([0.5], dtype=torch.float64)
    mll = _mll(model)
    start = _gpytorch_mll(mll)
    objective = LeanObjective(mll)
    theta, value = objective.tune_start(objective.x0())
    objective.write(theta)
    tuned_noise = float(model.likelihood.noise)
    tuned = _gpytorch_mll(mll)
    assert -value == pytest.approx(tuned, abs=1e-7)
    best_noise, best = _noise_optimum(copy.deepcopy(mll))
    step = math.exp((math.log(1.0) - math.log(1.01e-4)) / (NOISE_GRID - 1))
    assert tuned > start + 0.1
    assert best - 0.01 <= tuned <= best + 1e-7
    assert best_noise / step <= tuned_noise <= best_noise * step


def test_lengthscale_pass_scales_every_lengthscale_by_one_factor() -> None:
    """The tuned start's lengthscales are the start's times one of the factors, their
    ratios kept; the result is never below the start by GPyTorch's MLL."""
    X, y = _branin_like(1, 20)
    model = SingleTaskGP(X, y)
    ls = torch.tensor([[0.05, 0.08]], dtype=torch.float64)
    with torch.no_grad():
        model.covar_module.lengthscale = ls
        model.likelihood.noise = torch.tensor([0.01], dtype=torch.float64)
    mll = _mll(model)
    start = _gpytorch_mll(mll)
    objective = LeanObjective(mll)
    objective.write(objective.tune_start(objective.x0())[0])
    ratio = (model.covar_module.lengthscale.detach() / ls).reshape(-1)
    assert float(ratio[0]) == pytest.approx(float(ratio[1]), rel=1e-12)
    assert min(abs(float(ratio[0]) - f) for f in LENGTHSCALE_FACTORS) < 1e-9
    assert float(ratio[0]) > 1.0  # short lengthscales on a smooth function: stretched
    assert _gpytorch_mll(mll) > start


def test_periodic_tree_keeps_its_lengthscales() -> None:
    """A kernel tree with a periodic kernel gets the noise searched, its lengthscales and
    period untouched."""
    X, y = _branin_like(2, 16)
    covar = ScaleKernel(RBFKernel(active_dims=[1]) + PeriodicKernel(active_dims=[0])).double()
    model = SingleTaskGP(X, y, covar_module=covar)
    before = {k: v.detach().clone() for k, v in model.covar_module.named_parameters()}
    mll = _mll(model)
    objective = LeanObjective(mll)
    objective.write(objective.tune_start(objective.x0())[0])
    after = dict(model.covar_module.named_parameters())
    assert all(torch.equal(after[k].detach(), v) for k, v in before.items())


def test_race_never_ends_below_the_model_starts_race(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the race, the fit's MLL (GPyTorch's) is at least what RACE_STEPS iterations
    from the model's own start reach; the refined start is the one the race chose."""
    for seed in range(4):
        X, y = _branin_like(10 + seed, 12 + 3 * seed)
        model = SingleTaskGP(X, y)
        reference = copy.deepcopy(model)
        objective = LeanObjective(_mll(reference))
        objective.minimize(fit_module.RACE_STEPS)
        after_race = _gpytorch_mll(_mll(reference))
        fit = AmortizedFit()
        mll = _mll(model)
        fit(mll)
        assert _gpytorch_mll(mll) >= after_race - 1e-9
        assert fit.last_start in ("model", "network")
        assert fit.model_starts == (fit.last_start == "model")
    assert fit.calls == 1


def test_race_is_skipped_without_iterations() -> None:
    """With refine_steps at most RACE_STEPS the better start by its score is kept: the
    written start's MLL equals the better of the two scores."""
    X, y = _branin_like(3, 15)
    model = SingleTaskGP(X, y)
    own = _gpytorch_mll(_mll(copy.deepcopy(model)))
    fit = AmortizedFit(refine_steps=0)
    mll = _mll(model)
    fit(mll)
    value = _gpytorch_mll(mll)
    assert value >= own - 1e-12
    assert (fit.last_start == "network") == bool(fit.network_better)
    assert np.isfinite(value)


def test_a_start_that_fails_in_the_race_leaves_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start whose race iterations reach a non-finite objective drops out: the fit goes
    on from the other start, without falling back, and ends finite."""
    X, y = _branin_like(4, 14)
    model = SingleTaskGP(X, y)
    real = LeanObjective.minimize
    calls: list[int] = []

    def failing_first(self: LeanObjective, steps: int, **kwargs: float) -> object:
        calls.append(steps)
        if len(calls) == 1:  # the model's start's race
            raise FloatingPointError("non-finite objective")
        return real(self, steps, **kwargs)

    monkeypatch.setattr(LeanObjective, "minimize", failing_first)
    fit = AmortizedFit()
    mll = _mll(model)
    fit(mll)
    assert (fit.fallbacks, fit.last_start, fit.model_starts) == (0, "network", 0)
    assert calls[:2] == [fit_module.RACE_STEPS] * 2
    assert math.isfinite(_gpytorch_mll(mll))


def test_enforced_constraints_are_searched_through_their_transforms() -> None:
    """A plain GPyTorch ExactGP (softplus-enforced noise and lengthscale constraints): the
    tuned lengthscales are the start's times one of the factors in constrained units, the
    noise stays inside its constraint, and GPyTorch's MLL does not fall."""
    import gpytorch

    class Exact(gpytorch.models.ExactGP):
        def __init__(self, X: torch.Tensor, y: torch.Tensor) -> None:
            super().__init__(X, y, gpytorch.likelihoods.GaussianLikelihood())
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=2)
            )

        def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    X, y = _branin_like(5, 20)
    y = (y[:, 0] - y.mean()) / y.std()
    model = Exact(X, y).double()
    with torch.no_grad():
        model.covar_module.base_kernel.lengthscale = torch.tensor([[0.05, 0.07]])
        model.likelihood.noise = torch.tensor([0.3])
    assert model.likelihood.noise_covar.raw_noise_constraint.enforced
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    start = _gpytorch_mll(mll)
    ls = model.covar_module.base_kernel.lengthscale.detach().clone()
    objective = LeanObjective(mll)
    objective.write(objective.tune_start(objective.x0())[0])
    ratio = (model.covar_module.base_kernel.lengthscale.detach() / ls).reshape(-1)
    assert float(ratio[0]) == pytest.approx(float(ratio[1]), rel=1e-9)
    assert min(abs(float(ratio[0]) - f) for f in LENGTHSCALE_FACTORS) < 1e-9
    assert float(model.likelihood.noise) >= 1e-4
    assert _gpytorch_mll(mll) > start


def test_evaluations_count_every_call_of_the_lean_objective_in_the_iterations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """last_evaluations is the number of objective calls scipy's L-BFGS-B made (both
    starts' race and the refine), counted here by wrapping the objective; evaluations
    sums them over fits; without iterations both stay 0."""
    real = LeanObjective.value_and_grad
    calls = {"n": 0}

    def counted(self: LeanObjective, theta: np.ndarray) -> tuple[float, np.ndarray]:
        calls["n"] += 1
        return real(self, theta)

    monkeypatch.setattr(LeanObjective, "value_and_grad", counted)
    fit = AmortizedFit()
    seen = []
    for seed in range(2):
        X, y = _branin_like(20 + seed, 14)
        calls["n"] = 0
        fit(_mll(SingleTaskGP(X, y)))
        seen.append(calls["n"])
        assert fit.last_evaluations == calls["n"] > 2 * fit_module.RACE_STEPS
    assert fit.evaluations == sum(seen)
    none = AmortizedFit(refine_steps=0)
    none(_mll(SingleTaskGP(*_branin_like(3, 15))))
    assert (none.last_evaluations, none.evaluations) == (0, 0)
