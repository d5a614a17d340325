"""The GPyTorch/BoTorch bridge against GPyTorch's own likelihood and predictive."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

pytest.importorskip("gpytorch")
pytest.importorskip("botorch")

import gpytorch.kernels as gk
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from gpytorch.mlls import ExactMarginalLogLikelihood

from amorgp.amortizer import Amortizer
from amorgp.core.errors import OptionError
from amorgp.gpytorch import (
    AmortizedFit,
    build_kernel,
    fit_amortized,
    initialize_gpytorch,
    model_data,
    read_kernel,
    to_gpytorch,
)
from amorgp.kernel_grammar import DimWiseStructure, base_symbol
from amorgp.lazy_kernels import DimWiseKernel, Posterior

TOL = 1e-8


@pytest.fixture(scope="module")
def amz() -> Amortizer:
    return Amortizer.from_pretrained()


def _data(g: torch.Generator, n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.rand(n, d, generator=g, dtype=torch.float64) * 4.0 - 1.0
    y = (
        (2.0 * X).sin().sum(-1)
        + 0.5 * X[:, 0]
        + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    )
    return X, 3.0 * y + 7.0


def _mll_times_n(model: SingleTaskGP) -> tuple[float, bool]:
    """GPyTorch's MLL times n, and whether GPyTorch had to add jitter to factor K."""
    model.train()
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        value = (
            float(mll(model(*model.train_inputs), model.train_targets))
            * model.train_targets.numel()
        )
    jittered = any("jitter" in str(w.message) for w in caught)
    return value, jittered


@pytest.mark.parametrize(
    ("kernel", "d"),
    [
        ("SE", 1),
        ("SE*LIN + PER", 1),
        ("LIN*PER + SE", 2),
        ("SE", 3),
        ("SE*LIN + PER", 3),
        ("LIN + PER", 1),
    ],
)
@pytest.mark.parametrize("refine", [0, 3])
def test_export_round_trip(amz: Amortizer, kernel: str, d: int, refine: int) -> None:
    g = torch.Generator().manual_seed(d * 7 + refine)
    X, y = _data(g, 40, d)
    res = amz.infer(X, y, kernel, refine=refine)
    model = to_gpytorch(res)
    s_b = float(y.std())  # BoTorch's Standardize: sample standard deviation
    expect = res.log_marginal_likelihood_original + y.numel() * math.log(s_b)
    got, jittered = _mll_times_n(model)
    # a nearly singular K (tiny predicted noise) may make GPyTorch add 1e-8 jitter that
    # amorgp's Cholesky did not need; the two then differ by about jitter * tr(K^-1)
    tol = 1e-4 if jittered else TOL
    assert got == pytest.approx(expect, abs=tol)
    model.eval()
    Xt = torch.rand(9, d, generator=g, dtype=torch.float64) * 5.0 - 1.5
    post = model.posterior(Xt)
    mean, var = res.predict(Xt, include_noise=False)
    torch.testing.assert_close(post.mean[:, 0], mean, atol=tol, rtol=0)
    torch.testing.assert_close(post.variance[:, 0], var, atol=tol, rtol=0)
    post_y = model.posterior(Xt, observation_noise=True)
    _, var_y = res.predict(Xt)
    torch.testing.assert_close(post_y.variance[:, 0], var_y, atol=tol, rtol=0)


@pytest.mark.parametrize("symbol", ["SE", "LIN", "PER", "SE*LIN", "SE*PER", "LIN*PER"])
def test_build_kernel_matches_dense_and_reads_back(symbol: str) -> None:
    g = torch.Generator().manual_seed(1)
    s = DimWiseStructure(((symbol, "SE"), ("PER",)))
    P = max(len(base_symbol(x).params) for x in (symbol, "SE", "PER"))
    params = torch.rand(2, 2, P, generator=g, dtype=torch.float64) + 0.3
    X = torch.rand(15, 2, generator=g, dtype=torch.float64)
    k = build_kernel(s, params)
    with torch.no_grad():
        got = k(X).to_dense()
    torch.testing.assert_close(
        got, DimWiseKernel(s, params).operator(X).dense(), atol=1e-12, rtol=0
    )
    back = read_kernel(k, 2).read()
    for pn in s.param_names():
        assert float(back[pn.dim, pn.addend, pn.slot]) == pytest.approx(
            float(params[pn.dim, pn.addend, pn.slot]), rel=1e-12
        )


def _amorgp_lml(
    kmap_params: torch.Tensor, structure: DimWiseStructure, noise: float, X, y
) -> float:
    gp = Posterior.from_kernel(DimWiseKernel(structure, kmap_params), X, y, noise)
    return float(gp.log_marginal_likelihood())


def _likelihood_term(model: SingleTaskGP) -> float:
    """GPyTorch's log marginal likelihood without the priors' terms."""
    model.train()
    with torch.no_grad():
        out = model(*model.train_inputs)
        return float(model.likelihood(out).log_prob(model.train_targets))


def _tree(name: str):
    if name == "default":  # BoTorch's default: RBF with ARD, no ScaleKernel
        return None
    if name == "scaled-ard":
        return gk.ScaleKernel(gk.RBFKernel(ard_num_dims=2))
    if name == "se*lin+per":
        lin = gk.LinearKernel() + gk.ConstantKernel()
        return gk.ScaleKernel(gk.RBFKernel() * lin) + gk.ScaleKernel(gk.PeriodicKernel())
    if name == "root-scale":
        return gk.ScaleKernel(
            (gk.RBFKernel(active_dims=[0]) + gk.PeriodicKernel(active_dims=[0]))
            * gk.RBFKernel(active_dims=[1])
        )
    lin = gk.AdditiveKernel(gk.LinearKernel(active_dims=[0]), gk.ConstantKernel(active_dims=[0]))
    return gk.ProductKernel(  # "lin+se x ard"
        gk.AdditiveKernel(
            lin, gk.ScaleKernel(gk.RBFKernel(active_dims=[0])), gk.PeriodicKernel(active_dims=[0])
        ),
        gk.RBFKernel(ard_num_dims=2, active_dims=[1, 2]),
    )


@pytest.mark.parametrize(
    ("name", "d"),
    [
        ("default", 1),
        ("default", 3),
        ("scaled-ard", 2),
        ("se*lin+per", 1),
        ("root-scale", 2),
        ("lin+se x ard", 3),
    ],
)
def test_initialize_in_place(amz: Amortizer, name: str, d: int) -> None:
    covar = _tree(name)
    g = torch.Generator().manual_seed(10 + d)
    X, y = _data(g, 30, d)
    model = SingleTaskGP(X, y[:, None], covar_module=covar, input_transform=Normalize(d)).double()
    res = initialize_gpytorch(model, X, y[:, None], amortizer=amz)
    kmap = read_kernel(model.covar_module, d)
    assert kmap.structure == res.kernel
    Xm, ym = model_data(model)
    noise = float(model.likelihood.noise.detach())
    expect = _amorgp_lml(kmap.read(), kmap.structure, noise, Xm, ym)
    assert _likelihood_term(model) == pytest.approx(expect, abs=TOL)
    # inputs after Normalize are [0, 1]: lengthscales land as the network predicted them
    if covar is None:
        ls = model.covar_module.lengthscale.detach().reshape(-1)
        want = res.params[:d, 0, 1].clamp_min(0.025 * (1 + 1e-6))
        torch.testing.assert_close(ls, want.to(ls), rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "covar",
    [
        gk.MaternKernel(nu=1.5),  # MAT52 (nu=2.5) is in the vocabulary, nu=1.5 is not
        gk.LinearKernel(),  # a linear kernel over both columns is a sum over columns
        gk.RBFKernel(active_dims=[0]) + gk.RBFKernel(active_dims=[1]),
        gk.RBFKernel(active_dims=[0]),
    ],
)
def test_initialize_outside_vocabulary(amz: Amortizer, covar) -> None:
    g = torch.Generator().manual_seed(3)
    X, y = _data(g, 20, 2)
    model = SingleTaskGP(X, y[:, None], covar_module=covar).double()
    with pytest.raises(OptionError):
        initialize_gpytorch(model, amortizer=amz)


def test_fit_amortized_improves_on_start_and_counts(amz: Amortizer) -> None:
    g = torch.Generator().manual_seed(5)
    X, y = _data(g, 40, 2)
    model = SingleTaskGP(X, y[:, None])
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    fit = AmortizedFit(refine_steps=5, amortizer=amz)
    initialize_gpytorch(model, amortizer=amz)
    start = -_neg(mll)
    assert fit(mll) is mll
    assert not model.training
    assert -_neg(mll) >= start - 1e-9
    assert (fit.calls, fit.fallbacks) == (1, 0)


def _neg(mll: ExactMarginalLogLikelihood) -> float:
    model = mll.model
    model.train()
    with torch.no_grad():
        return -float(mll(model(*model.train_inputs), model.train_targets))


class _Broken:
    """An amortizer whose every use (its forward pass included) fails."""

    calibrate = True

    def __getattr__(self, name: str) -> None:
        raise RuntimeError("network failed")


def test_fit_amortized_falls_back() -> None:
    g = torch.Generator().manual_seed(6)
    X, y = _data(g, 20, 1)
    model = SingleTaskGP(X, y[:, None])
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    fit = AmortizedFit(amortizer=_Broken())  # type: ignore[arg-type]
    fit(mll)
    assert (fit.calls, fit.fallbacks) == (1, 1)
    assert "network failed" in fit.last_error
    assert not model.training
    assert math.isfinite(_neg(mll))


def test_fit_amortized_function(amz: Amortizer) -> None:
    g = torch.Generator().manual_seed(8)
    X, y = _data(g, 25, 2)
    model = SingleTaskGP(X, y[:, None])
    mll = fit_amortized(
        ExactMarginalLogLikelihood(model.likelihood, model), amortizer=amz, refine_steps=0
    )
    assert mll.model is model
    assert not model.training


@pytest.mark.parametrize("tree", ["default", "scaled-ard"])
def test_calibrated_start_raises_the_models_own_likelihood(amz: Amortizer, tree: str) -> None:
    """``calibrate=True`` writes a start whose GPyTorch likelihood is at least the plain
    start's, with a ``ScaleKernel`` (scale and noise) and without one (BoTorch's default:
    the noise alone), and ``AmortizedFit(calibrate=True)`` fits from it."""
    g = torch.Generator().manual_seed(4)
    X, y = _data(g, 40, 2)
    values = []
    for calibrate in (False, True):
        model = SingleTaskGP(
            X, y[:, None], covar_module=_tree(tree), input_transform=Normalize(2)
        ).double()
        res = initialize_gpytorch(model, amortizer=amz, calibrate=calibrate)
        assert res.calibrated is calibrate
        values.append(_likelihood_term(model))
    assert values[1] >= values[0] - 1e-6
    # one calibration per start: with the scale where the tree holds one, else the noise
    import amorgp.amortizer.stages.calibrate as cal_module

    calls: list[bool] = []

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(bool(kwargs.get("scale", True)))
        return real(*args, **kwargs)

    import amorgp.amortizer.stages.pipeline as pipeline_module

    def counted_rows(*args: object, **kwargs: object) -> object:
        calls.append(True)  # the pipeline's batched calibration of scale and noise
        return real_rows(*args, **kwargs)

    def counted_evaluated(*args: object, **kwargs: object) -> object:
        calls.append(True)  # the same, on matrices it evaluates itself
        return real_evaluated(*args, **kwargs)

    real = cal_module.calibrate
    real_rows = pipeline_module.calibrate_rows
    real_evaluated = pipeline_module.evaluate_and_calibrate
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cal_module, "calibrate", counted)
        mp.setattr(pipeline_module, "calibrate_rows", counted_rows)
        mp.setattr(pipeline_module, "evaluate_and_calibrate", counted_evaluated)
        model = SingleTaskGP(
            X, y[:, None], covar_module=_tree(tree), input_transform=Normalize(2)
        ).double()
        initialize_gpytorch(model, amortizer=amz, calibrate=True)
    assert calls == [tree == "scaled-ard"]
    model = SingleTaskGP(
        X, y[:, None], covar_module=_tree(tree), input_transform=Normalize(2)
    ).double()
    assert initialize_gpytorch(model, amortizer=amz).calibrated is amz.calibrate  # its setting
    model = SingleTaskGP(X, y[:, None], input_transform=Normalize(2)).double()
    fit = AmortizedFit(refine_steps=5, amortizer=amz, calibrate=True)
    fit(ExactMarginalLogLikelihood(model.likelihood, model))
    assert fit.fallbacks == 0
    assert math.isfinite(_likelihood_term(model))


def test_holds_accepts_the_same_kernel_only() -> None:
    """The read-back check: variances may move between dimensions (a root ScaleKernel
    books the product on one), nothing else may change."""
    from amorgp.gpytorch.initialize import _holds
    from amorgp.kernel_grammar import DimWiseStructure

    s = DimWiseStructure.parse("SE + PER", 2)  # per dimension: SE (var, ls), PER (var, ls, p)
    want = torch.tensor(
        [[[0.5, 0.3, 0.0], [0.2, 0.7, 1.5]], [[2.0, 0.4, 0.0], [1.0, 0.9, 0.8]]],
        dtype=torch.float64,
    )
    moved = want.clone()
    moved[0, :, 0] *= 4.0  # dimension 0's addends x4, dimension 1's / 4: the same kernel
    moved[1, :, 0] /= 4.0
    assert _holds(s, want.clone(), want)
    assert _holds(s, moved, want)
    scaled = want.clone()
    scaled[0, :, 0] *= 4.0  # the kernel x4
    assert not _holds(s, scaled, want)
    split = want.clone()
    split[0, 0, 0] *= 4.0  # one addend's share changed
    split[1, :, 0] /= 4.0
    assert not _holds(s, split, want)
    other = want.clone()
    other[1, 1, 2] *= 1.01  # a period
    assert not _holds(s, other, want)


def test_export_without_training_data_names_what_to_pass() -> None:
    """A fit that holds no training data (here a baselines result) needs train_X/train_Y."""
    from amorgp.baselines import fit
    from amorgp.core.errors import DataError

    g = torch.Generator().manual_seed(3)
    X, y = _data(g, 20, 1)
    res = fit(X, y, "SE", method="gp-ml")
    with pytest.raises(DataError, match="pass train_X and train_Y"):
        to_gpytorch(res)
