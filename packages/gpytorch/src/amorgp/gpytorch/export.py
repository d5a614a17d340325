"""Export an amortized (or refined) result as a BoTorch ``SingleTaskGP``."""

from __future__ import annotations

from typing import Any

import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import Standardize

from amorgp.core.data import as_real
from amorgp.core.errors import DataError, OptionError
from amorgp.core.fit import KernelFit
from amorgp.gpytorch.kernels import build_kernel
from amorgp.kernel_grammar import ELEMENTARY, ParamKind, base_symbol
from gpytorch.constraints import GreaterThan
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import ConstantMean

__all__ = ["NOISE_FLOOR", "to_gpytorch"]

#: Lower bound of the exported likelihood's noise (BoTorch's default 1e-4 would clip
#: small amortized noises).
NOISE_FLOOR = 1e-9


def to_gpytorch(result: KernelFit, train_X: Any = None, train_Y: Any = None) -> SingleTaskGP:
    """The float64 ``SingleTaskGP`` equal to ``result``'s GP, in original units.

    The model takes original inputs: ``Normalize`` with the result's fixed bounds
    ``[x_min, x_min + range]`` maps them to ``[0, 1]`` as the amortizer did.  BoTorch's
    ``Standardize`` divides by the sample standard deviation ``s_b = s_y sqrt(n / (n-1))``
    where amorgp uses the population one ``s_y``; the kernel variances of the first
    dimension's addends (and the offset ``c^2`` of a lone LIN addend there, by its
    registration) and the noise are
    multiplied by ``r = (s_y / s_b)^2``, so that the
    covariance in original units, ``s_y^2 (K + sigma^2 I)``, is the same.  The constant
    mean is ``(y_mean - m_b) / s_b`` (zero up to rounding).  The kernel has no priors, so
    ``ExactMarginalLogLikelihood * n`` is the log marginal likelihood of the standardised
    targets: ``result.log_marginal_likelihood_original + n log s_b``.

    Args:
        result: the fit (``KernelResult`` of the amortizer, or a baseline's fit).
        train_X: ``(n, d)`` original inputs (default: the result's own, un-normalised).
        train_Y: ``(n,)`` or ``(n, 1)`` original targets (default: the result's own).

    Returns:
        A ``SingleTaskGP`` in train mode holding the training data.

    Raises:
        OptionError: ``result`` is not a fit, or only one of ``train_X`` and ``train_Y``.
        DataError: no training data given or held; data of the wrong shape, complex,
            NaN or infinite; fewer than 2 points; constant targets.
    """
    if not isinstance(result, KernelFit):
        raise OptionError(
            f"to_gpytorch needs a fit result (KernelFit), got {type(result).__name__}"
        )
    norm = result.normalizer
    X, y = _training_data(result, train_X, train_Y)
    n, d = X.shape
    if d != result.kernel.n_dims or y.shape[0] != n:
        raise DataError(
            f"train_X {tuple(X.shape)} and train_Y {tuple(y.shape)} do not match the fit"
        )
    if n < 2:
        raise DataError(f"to_gpytorch needs at least 2 training points, got {n}")
    s_b = float(y.std())
    if not s_b > 0:
        raise DataError(
            "train_Y is constant: BoTorch's Standardize of the exported model needs "
            "targets that vary"
        )
    r = (norm.y_std / s_b) ** 2
    params = result.params.detach().to("cpu", torch.float64).clone()
    params = params[: result.kernel.n_dims, : result.kernel.max_addends]
    params[0, :, 0] *= r  # slot 0 is every base symbol's variance
    for ell, sym in enumerate(result.kernel.dims[0]):
        for i in _variance_like(sym):
            params[0, ell, i] *= r
    likelihood = GaussianLikelihood(noise_constraint=GreaterThan(NOISE_FLOOR)).double()
    likelihood.noise = torch.tensor(result.noise * r, dtype=torch.float64)
    mean = ConstantMean().double()
    mean.constant = torch.tensor((norm.y_mean - float(y.mean())) / s_b, dtype=torch.float64)
    bounds = torch.stack([norm.x_min, norm.x_min + norm.x_range]).to(torch.float64)
    model = SingleTaskGP(
        X,
        y[:, None],
        likelihood=likelihood,
        covar_module=build_kernel(result.kernel, params),
        mean_module=mean,
        input_transform=Normalize(d, bounds=bounds),
        outcome_transform=Standardize(m=1),
    )
    return model.double()


def _variance_like(symbol: str) -> list[int]:
    """The slots besides the variance that scale as a variance: the offset of a lone kernel
    whose variance does not scale all of it (LIN alone: ``s^2 x x' + c^2``)."""
    sym = base_symbol(symbol)
    if len(sym.factors) != 1 or ELEMENTARY[sym.factors[0]].variance_scales_all:
        return []
    return [i for i, p in enumerate(sym.params) if i > 0 and p.kind is ParamKind.OFFSET]


def _training_data(
    result: KernelFit, train_X: Any, train_Y: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    norm = result.normalizer
    if train_X is None and train_Y is None:
        try:
            gp = result.posterior  # type: ignore[attr-defined]
        except (AttributeError, ValueError):  # not an amortized result, or one without data
            raise DataError("the result holds no training data; pass train_X and train_Y") from None
        Xn = gp.X.detach().to("cpu", torch.float64)
        yn = gp.y.detach().to("cpu", torch.float64)
        X = norm.x_min + Xn * norm.x_range
        y = norm.y_mean + yn * norm.y_std
        return X, y
    if train_X is None or train_Y is None:
        raise OptionError("pass both train_X and train_Y, or neither (the result's own data)")
    X = as_real(train_X, "train_X", finite=True)
    X = X[:, None] if X.ndim == 1 else X
    if X.ndim != 2:
        raise DataError(f"train_X must have shape (n, d), got {tuple(X.shape)}")
    return X, as_real(train_Y, "train_Y", finite=True).reshape(-1)
