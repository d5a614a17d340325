"""GPyTorch modules as plain float64 torch functions of their raw parameters, for
:class:`~amorgp.gpytorch.lean.LeanObjective`: a kernel tree as a function of the inputs
(:func:`kernel_fn`), the mean (:func:`mean_fn`) and each registered prior's log-density
(:func:`prior_fn`, closed forms of the common priors in :func:`log_density`), all reading
the parameters through a :class:`Getter` (the constrained value of each raw parameter, from
the values of the current evaluation where present).  Modules outside the supported set
raise :class:`~amorgp.core.errors.OptionError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

import gpytorch.kernels as gk
from amorgp.core.errors import OptionError
from gpytorch.means import ConstantMean, ZeroMean
from gpytorch.priors import GammaPrior, LogNormalPrior, NormalPrior

__all__ = ["Getter", "Kernel", "Values", "kernel_fn", "log_density", "mean_fn", "prior_fn"]

_LOG_2PI = math.log(2.0 * math.pi)

Values = dict[int, Tensor]  # id(raw parameter) -> its value in the current evaluation


class Getter:
    """``get(module, name)``: the constrained value of ``module.raw_<name>``, read from
    ``vals`` where present (marking the parameter in ``used``)."""

    def __init__(self, vals: Values, used: set[int] | None) -> None:
        self.vals, self.used = vals, used

    def __call__(self, mod: Any, name: str) -> Tensor:
        raw = getattr(mod, f"raw_{name}")
        if self.used is not None:
            self.used.add(id(raw))
        value = self.vals.get(id(raw), raw)
        constraint = getattr(mod, f"raw_{name}_constraint", None)
        return value if constraint is None else constraint.transform(value)


Kernel = Callable[[Tensor, Getter], Tensor]


def kernel_fn(k: Any, own_columns: bool = True) -> Kernel:
    """The dense ``(n, n)`` kernel matrix of module ``k`` as a function of ``(X, get)``.

    ``own_columns=False``: ``k``'s ``active_dims`` are not applied (GPyTorch's
    ``ScaleKernel`` calls its base kernel's ``forward`` on the columns it selected).
    """
    if getattr(k, "batch_shape", torch.Size()) != torch.Size():
        raise OptionError(f"a batched {type(k).__name__}")
    cols = None if k.active_dims is None or not own_columns else k.active_dims.tolist()

    def pick(X: Tensor) -> Tensor:
        return X if cols is None else X[:, cols]

    if type(k) is gk.ScaleKernel:
        base = kernel_fn(k.base_kernel, own_columns=False)
        return lambda X, get: get(k, "outputscale") * base(pick(X), get)
    if type(k) in (gk.AdditiveKernel, gk.ProductKernel):
        kids = [kernel_fn(c) for c in k.kernels]
        add = type(k) is gk.AdditiveKernel

        def combine(X: Tensor, get: Getter) -> Tensor:
            out = kids[0](pick(X), get)
            for c in kids[1:]:
                out = out + c(pick(X), get) if add else out * c(pick(X), get)
            return out

        return combine
    if type(k) is gk.RBFKernel:

        def rbf(X: Tensor, get: Getter) -> Tensor:
            Z = pick(X) / get(k, "lengthscale")
            diff = Z[:, None, :] - Z[None, :, :]
            return torch.exp(-0.5 * (diff * diff).sum(-1))

        return rbf
    if type(k) is gk.PeriodicKernel:

        def per(X: Tensor, get: Getter) -> Tensor:
            Xk = pick(X)
            arg = (Xk[:, None, :] - Xk[None, :, :]) * (math.pi / get(k, "period_length"))
            return torch.exp(-2.0 * (arg.sin().pow(2) / get(k, "lengthscale")).sum(-1))

        return per
    if type(k) is gk.LinearKernel:
        return lambda X, get: get(k, "variance") * (pick(X) @ pick(X).T)
    if type(k) is gk.ConstantKernel:
        return lambda X, get: get(k, "constant") * torch.ones(X.shape[0], X.shape[0], dtype=X.dtype)
    raise OptionError(f"{type(k).__name__} has no lean evaluation")


def mean_fn(m: Any) -> Callable[[Tensor, Getter], Tensor | float]:
    if type(m) is ZeroMean:
        return lambda X, get: 0.0
    if type(m) is ConstantMean and m.raw_constant.numel() == 1:
        return lambda X, get: get(m, "constant").reshape(())
    raise OptionError(f"{type(m).__name__} has no lean evaluation (ConstantMean, ZeroMean)")


def prior_fn(name: str, mod: Any, prior: Any, closure: Any) -> Callable[[Getter], Tensor]:
    """The summed log-density of one registered prior as a function of ``get``.

    The parameter is the one of ``mod`` whose constrained value equals what the prior's
    closure reads (tried: the prior's name without ``_prior``, then every raw parameter).
    """
    stem = name.rsplit(".", 1)[-1].removesuffix("_prior")
    target = closure(mod).detach()
    raws = [n.removeprefix("raw_") for n, _ in mod.named_parameters(recurse=False)]
    for cand in [stem, *raws]:
        if not hasattr(mod, f"raw_{cand}"):
            continue
        with torch.no_grad():
            value = Getter({}, None)(mod, cand)
        if value.shape == target.shape and torch.equal(value, target):
            density = log_density(prior)
            return lambda get: density(get(mod, cand)).sum()
    raise OptionError(f"prior {name}: cannot tell which parameter it reads")


def log_density(prior: Any) -> Callable[[Tensor], Tensor]:
    """Closed forms of the common priors (torch.distributions' validation skipped)."""
    if getattr(prior, "_transform", None) is None:
        if type(prior) is LogNormalPrior:
            mu, s = prior.loc, prior.scale
            return lambda x: (
                -x.log() - s.log() - 0.5 * _LOG_2PI - (x.log() - mu).pow(2) / (2.0 * s * s)
            )
        if type(prior) is NormalPrior:
            mu, s = prior.loc, prior.scale
            return lambda x: -s.log() - 0.5 * _LOG_2PI - (x - mu).pow(2) / (2.0 * s * s)
        if type(prior) is GammaPrior:
            a, b = prior.concentration, prior.rate
            return lambda x: a * b.log() + (a - 1.0) * x.log() - b * x - torch.lgamma(a)
    return prior.log_prob
