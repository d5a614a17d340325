"""A BoTorch fit that falls back to ``fit_gpytorch_mll`` says why, once per cause; a
bug propagates instead of being hidden by a fallback."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("botorch")

from botorch.models import SingleTaskGP
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

import amorgp.gpytorch.fit as fit_module
from amorgp.gpytorch.fit import AmortizedFit, FallbackWarning, fit_amortized


def _matern_model(seed: int) -> ExactMarginalLogLikelihood:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(20, 2, dtype=torch.float64, generator=g)
    Y = X.sin().sum(-1, keepdim=True)
    # nu=1.5: outside the vocabulary (MAT52, nu=2.5, is inside)
    model = SingleTaskGP(X, Y, covar_module=ScaleKernel(MaternKernel(nu=1.5, ard_num_dims=2)))
    return ExactMarginalLogLikelihood(model.likelihood, model)


def test_a_fallback_warns_with_its_reason_once_per_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fit_module, "_WARNED", set())
    fit = AmortizedFit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(_matern_model(0))
        fit(_matern_model(1))
        fit_amortized(_matern_model(2))
    ours = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(ours) == 1  # one cause: one warning, not one per fit
    assert "MaternKernel" in str(ours[0].message)
    assert "fit_gpytorch_mll" in str(ours[0].message)
    assert fit.fallbacks == 2
    assert "MaternKernel" in fit.last_error


class _Buggy:
    """An amortizer with a bug (a TypeError): never a reason to fall back silently."""

    calibrate = True

    def __getattr__(self, name: str) -> None:
        raise TypeError("a bug in the caller")


def test_an_unexpected_error_propagates() -> None:
    fit = AmortizedFit(amortizer=_Buggy())  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(3)
    X = torch.rand(15, 1, dtype=torch.float64, generator=g)
    model = SingleTaskGP(X, X.sin())
    with pytest.raises(TypeError, match="a bug in the caller"):
        fit(ExactMarginalLogLikelihood(model.likelihood, model))
    assert fit.fallbacks == 0
