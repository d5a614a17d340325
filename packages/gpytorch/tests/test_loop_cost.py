"""What a Bayesian-optimisation loop pays per fit: the network's traced forward is
prepared once per amortizer (not on the second and third fits, not after a foreign fit),
and AmortizedFit's start without the amortizer's posterior equals the full pipeline's."""

from __future__ import annotations

import warnings

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

import amorgp.amortizer.networks.forward as forward
import amorgp.gpytorch.fit as fit_module
from amorgp.amortizer import Amortizer
from amorgp.gpytorch import AmortizedFit, initialize_gpytorch, model_data, read_kernel


def _data(seed: int, n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = (3.0 * X).sin().sum(-1, keepdim=True) + 0.05 * torch.randn(n, 1, generator=g)
    return X, y.to(torch.float64)


def _mll(X: torch.Tensor, y: torch.Tensor, **kwargs: object) -> ExactMarginalLogLikelihood:
    model = SingleTaskGP(X, y, **kwargs)  # type: ignore[arg-type]
    return ExactMarginalLogLikelihood(model.likelihood, model)


def _params(mll: ExactMarginalLogLikelihood) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in mll.named_parameters()}


def test_alternating_with_botorch_traces_the_network_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh amortizer in a loop that alternates BoTorch's fit_gpytorch_mll with the
    amortized fit: its forward is traced once, on the first fit, and the same traced
    graph serves every later fit (nothing rebuilt after a foreign fit)."""
    amz = Amortizer.from_pretrained(candidates=())
    traces: list[object] = []
    real_trace = torch.jit.trace

    def counting_trace(*args: object, **kwargs: object) -> object:
        traces.append(args[0])
        return real_trace(*args, **kwargs)

    monkeypatch.setattr(torch.jit, "trace", counting_trace)
    fit = AmortizedFit(amortizer=amz, refine_steps=3)
    fit(_mll(*_data(9, 10, 2)))  # the first fit prepares the forward
    assert len(traces) == 1
    assert callable(forward._TRACES[amz.model][1])
    seen = []
    for it in range(3):
        X, y = _data(it, 12 + it, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_gpytorch_mll(_mll(X, y))
        fit(_mll(X, y))
        initialize_gpytorch(_mll(X, y).model, amortizer=amz)
        seen.append(forward._TRACES[amz.model][1])
        assert len(traces) == 1, f"traced again at iteration {it}"
    assert fit.fallbacks == 0
    assert all(fn is seen[0] and callable(fn) for fn in seen)


def test_first_and_later_fits_are_identical() -> None:
    """The first start of a fresh amortizer (its forward prepared on that call) is
    bitwise the start of the later calls on the same data."""
    amz = Amortizer.from_pretrained(candidates=())
    X, y = _data(5, 20, 3)
    starts = []
    for _ in range(3):
        mll = _mll(X, y)
        initialize_gpytorch(mll.model, amortizer=amz)
        starts.append(_params(mll))
    for later in starts[1:]:
        assert all(torch.equal(later[k], starts[0][k]) for k in starts[0])


@pytest.mark.parametrize("kind", ["default", "scaled", "fixed"])
def test_start_without_posterior_matches_the_full_pipeline(kind: str) -> None:
    """AmortizedFit's start (the network's prediction without the amortizer's posterior
    and result pipeline) writes what initialize_gpytorch writes (Amortizer.infer):
    BoTorch's default model (noise calibrated alone), a ScaleKernel model (scale and
    noise calibrated by the amortizer) and a fixed-noise model."""
    amz = fit_module.warm_up(Amortizer.from_pretrained(candidates=()))
    X, y = _data(11, 25, 3)
    kwargs: dict[str, object] = {}
    if kind == "scaled":
        kwargs["covar_module"] = ScaleKernel(RBFKernel(ard_num_dims=3))
    if kind == "fixed":
        kwargs["train_Yvar"] = torch.full_like(y, 0.01)
    full, lean = _mll(X, y, **kwargs), _mll(X, y, **kwargs)
    res = initialize_gpytorch(full.model, amortizer=amz)
    ours = fit_module._initialize(lean.model, None, None, amz, 0, None, full=False)
    want, got = _params(full), _params(lean)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-12, atol=0.0, msg=k)
    assert (ours.noise, ours.calibrated, ours.network) == (res.noise, res.calibrated, res.network)
    torch.testing.assert_close(ours.params, res.params, rtol=1e-12, atol=0.0)
    # and the model's own MLL (GPyTorch) at the two starts is the same number
    Xm, _ = model_data(full.model)
    assert read_kernel(full.model.covar_module, Xm.shape[1]).structure == ours.kernel
    for mll in (full, lean):
        mll.train()
    with torch.no_grad():
        a = full(full.model(*full.model.train_inputs), full.model.train_targets)
        b = lean(lean.model(*lean.model.train_inputs), lean.model.train_targets)
    assert float(a) == pytest.approx(float(b), rel=1e-12, abs=1e-12)


def test_model_start_restores_every_parameter() -> None:
    """Where the model's own start scores higher, the fit refines exactly the model's
    parameters (restored as load_state_dict would)."""
    X, y = _data(2, 10, 2)
    mll = _mll(X, y)
    before = _params(mll)
    fit = AmortizedFit(refine_steps=0, calibrate=False)
    # a network start the model's start always beats: no calibration, a broken noise
    real = fit_module._initialize

    def worse(model, *args, **kwargs):
        out = real(model, *args, **kwargs)
        model.likelihood.noise = torch.tensor(50.0)
        return out

    fit_module._initialize = worse
    try:
        fit(mll)
    finally:
        fit_module._initialize = real
    assert fit.last_start == "model"
    after = _params(mll)
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_warm_up_runs_once_per_amortizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three forwards (eager, traced, optimised) the first time, none after; none with
    AMORGP_JIT=0 (the forward then stays eager)."""
    calls: list[int] = []
    real = Amortizer.predict_parameters

    def counting(self: Amortizer, *args: object, **kwargs: object) -> object:
        calls.append(id(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Amortizer, "predict_parameters", counting)
    amz = Amortizer.from_pretrained(candidates=())
    assert fit_module.warm_up(amz) is amz
    assert calls == [id(amz)] * 3
    fit_module.warm_up(amz)
    assert len(calls) == 3
    monkeypatch.setenv("AMORGP_JIT", "0")
    eager = Amortizer.from_pretrained(candidates=())
    fit_module.warm_up(eager)
    assert id(eager) not in calls
    assert eager.model not in forward._TRACES
