"""BoTorch models beyond the default one: fixed noise (``train_Yvar``) and ``ModelListGP``
fit by :class:`AmortizedFit` without an exception from the library, each against
BoTorch's ``fit_gpytorch_mll`` as the oracle; the better of the network's start and the
model's own start is refined."""

from __future__ import annotations

import copy
import logging
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("botorch")

import gpytorch.kernels as gk
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, MultiTaskGP, SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood, SumMarginalLogLikelihood

from amorgp.amortizer import Amortizer
from amorgp.gpytorch import AmortizedFit, LeanObjective
from amorgp.gpytorch.fit import FallbackWarning

TOL = 1e-8  # the lean objective against GPyTorch's (as in test_lean.py)
# the oracle's tolerance on MLL / n: L-BFGS-B's ftol on a smooth objective, with room for
# the two fits stopping at slightly different points of the same optimum
GAP = 2e-3


@pytest.fixture(scope="module")
def amz() -> Amortizer:
    return Amortizer.from_pretrained(candidates=())


def _data(seed: int, n: int = 24, d: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = (3.0 * X).sin().sum(-1) + 0.5 * X[:, 0] + 0.05 * torch.randn(n, generator=g).double()
    return X, y[:, None]


def _mll_value(mll: ExactMarginalLogLikelihood) -> float:
    """GPyTorch's own MLL (priors included, divided by n) of the model's parameters."""
    model = mll.model
    model.train()
    with torch.no_grad():
        return float(mll(model(*model.train_inputs), model.train_targets))


def _botorch_fit(model: SingleTaskGP) -> ExactMarginalLogLikelihood:
    """Fit ``model`` in place with BoTorch's ``fit_gpytorch_mll`` (its warnings silenced);
    returns the marginal log likelihood it fitted."""
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(mll)
    return mll


def _oracle(model: SingleTaskGP) -> float:
    """The MLL BoTorch's ``fit_gpytorch_mll`` reaches from the same model."""
    return _mll_value(_botorch_fit(copy.deepcopy(model)))


def _fixed(seed: int, d: int = 2, covar: gk.Kernel | None = None) -> SingleTaskGP:
    X, Y = _data(seed, d=d)
    g = torch.Generator().manual_seed(seed + 100)
    Yvar = 1e-3 + 1e-2 * torch.rand(Y.shape, generator=g, dtype=torch.float64)
    return SingleTaskGP(X, Y, train_Yvar=Yvar, covar_module=covar)


COVARS = {
    "default": lambda d: None,  # BoTorch's RBF with ARD: the closed form
    # (SE + PER) on column 0 times SE on each other column: the plain-torch lean objective
    "scaled-se-plus-per": lambda d: gk.ScaleKernel(
        gk.ProductKernel(
            gk.AdditiveKernel(gk.RBFKernel(active_dims=[0]), gk.PeriodicKernel(active_dims=[0])),
            *[gk.RBFKernel(active_dims=[j]) for j in range(1, d)],
        )
    ).double(),
}


@pytest.mark.parametrize("covar", sorted(COVARS))
def test_fixed_noise_objective_equals_gpytorch(covar: str) -> None:
    model = _fixed(1, covar=COVARS[covar](2))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    model.train()
    objective = LeanObjective(mll)
    assert objective.fixed_noise is not None
    x0 = objective.x0()
    value, grad = objective.value_and_grad(x0)
    params = [p for p in mll.parameters() if p.requires_grad]
    loss = -mll(model(*model.train_inputs), model.train_targets)
    reference = torch.autograd.grad(loss, params)
    assert value == pytest.approx(float(loss), abs=TOL)
    np.testing.assert_allclose(
        grad, torch.cat([r.reshape(-1) for r in reference]).numpy(), atol=1e-8, rtol=1e-6
    )
    # the batched values at two points equal GPyTorch's at each
    shifted = x0 + 0.3
    both = objective.values(np.stack([x0, shifted]))
    for p, v in zip(params, objective._unflatten(torch.from_numpy(shifted)).values(), strict=True):
        with torch.no_grad():
            p.copy_(v)
    assert both[0] == pytest.approx(float(loss), abs=TOL)
    assert both[1] == pytest.approx(-_mll_value(mll), abs=TOL)


@pytest.mark.parametrize("covar", sorted(COVARS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fixed_noise_fit_matches_botorch(amz: Amortizer, covar: str, seed: int) -> None:
    model = _fixed(seed, covar=COVARS[covar](2))
    noise = model.likelihood.noise.detach().clone()
    oracle = _oracle(model)
    fit = AmortizedFit(amortizer=amz)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert fit(mll) is mll
    assert (fit.calls, fit.fallbacks) == (1, 0)
    assert not model.training
    assert torch.equal(model.likelihood.noise, noise)  # the known noise is kept
    assert _mll_value(mll) >= oracle - GAP


@pytest.mark.parametrize("seed", [0, 1])
def test_model_list_fits_every_sub_model(amz: Amortizer, seed: int) -> None:
    X, Y = _data(seed, d=3)
    g = torch.Generator().manual_seed(seed + 7)
    Y2 = X.cos().sum(-1, keepdim=True) + 0.05 * torch.randn(Y.shape, generator=g).double()
    subs = [
        SingleTaskGP(X, Y),  # BoTorch's default
        SingleTaskGP(X, Y2, train_Yvar=torch.full_like(Y2, 2e-3)),  # fixed noise
        SingleTaskGP(X, Y2, covar_module=COVARS["scaled-se-plus-per"](3)),
    ]
    oracles = [_oracle(m) for m in subs]
    model = ModelListGP(*subs)
    mll = SumMarginalLogLikelihood(model.likelihood, model)
    starts = [_mll_value(sub) for sub in mll.mlls]
    fit = AmortizedFit(amortizer=amz)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert fit(mll) is mll
    assert (fit.calls, fit.fallbacks) == (3, 0)
    assert not model.training
    fitted = [_mll_value(sub) for sub in mll.mlls]
    # BoTorch's default and fixed-noise models: BoTorch's optimum
    for value, oracle in zip(fitted[:2], oracles[:2], strict=True):
        assert value >= oracle - GAP
    # the (SE + PER) x SE tree has several local optima (the lean refine from the default
    # start and BoTorch's fit from it end in different ones): fitted, above its start
    assert fitted[2] > starts[2]


def test_a_model_list_with_an_unsupported_sub_model_falls_back_for_that_one(
    amz: Amortizer,
) -> None:
    X, Y = _data(3)
    tasks = (torch.arange(X.shape[0]) % 2).double()[:, None]
    multi = MultiTaskGP(torch.cat([X, tasks], -1), Y, task_feature=-1)
    model = ModelListGP(SingleTaskGP(X, Y), multi)
    mll = SumMarginalLogLikelihood(model.likelihood, model)
    fit = AmortizedFit(amortizer=amz)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        fit(mll)
    assert (fit.calls, fit.fallbacks) == (2, 1)
    assert "HadamardGaussianLikelihood" in fit.last_error
    assert not model.training


def test_the_better_start_is_refined(amz: Amortizer, caplog: pytest.LogCaptureFixture) -> None:
    """A model already at BoTorch's optimum keeps that start (the network's cannot beat
    it); a model whose own start is poor gets the network's."""
    X, Y = _data(4, d=3)
    at_optimum = SingleTaskGP(X, Y)
    _botorch_fit(at_optimum)
    mll = ExactMarginalLogLikelihood(at_optimum.likelihood, at_optimum)
    optimum = _mll_value(mll)
    fit = AmortizedFit(refine_steps=0, amortizer=amz)
    with caplog.at_level(logging.DEBUG, logger="amorgp.gpytorch.fit"):
        fit(mll)
    assert (fit.last_start, fit.model_starts) == ("model", 1)
    assert _mll_value(mll) == pytest.approx(optimum, abs=1e-12)
    assert "refining the model's" in caplog.text

    poor = SingleTaskGP(X, Y)
    with torch.no_grad():
        poor.covar_module.lengthscale = torch.full((1, 3), 0.02, dtype=torch.float64)
        poor.likelihood.noise = torch.tensor([2.0], dtype=torch.float64)
    mll = ExactMarginalLogLikelihood(poor.likelihood, poor)
    before = _mll_value(mll)
    fit(mll)
    assert fit.last_start == "network"
    assert _mll_value(mll) > before


def test_the_model_start_is_what_the_lean_refine_from_it_reaches(amz: Amortizer) -> None:
    """Where the model's start wins, the fit is the lean refine from that start."""
    X, Y = _data(5, d=3)
    at_optimum = SingleTaskGP(X, Y)
    _botorch_fit(at_optimum)
    twin = copy.deepcopy(at_optimum)
    twin_mll = ExactMarginalLogLikelihood(twin.likelihood, twin)
    twin.train()
    reference = LeanObjective(twin_mll).minimize(50)
    mll = ExactMarginalLogLikelihood(at_optimum.likelihood, at_optimum)
    fit = AmortizedFit(amortizer=amz)
    fit(mll)
    assert fit.last_start == "model"
    for ours, theirs in zip(at_optimum.parameters(), twin.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    assert _mll_value(mll) == pytest.approx(reference.mll, abs=TOL)


def test_the_network_start_alone_when_asked(amz: Amortizer) -> None:
    X, Y = _data(4, d=3)
    model = SingleTaskGP(X, Y)
    _botorch_fit(model)
    fit = AmortizedFit(refine_steps=0, amortizer=amz, model_start=False)
    fit(ExactMarginalLogLikelihood(model.likelihood, model))
    assert (fit.last_start, fit.model_starts) == ("network", 0)
