"""Closed-form value and gradient of the training objective for RBF (ARD) models.

BoTorch's default ``SingleTaskGP`` is ``RBFKernel`` with ARD (optionally under a
``ScaleKernel``), a ``ConstantMean`` and a homoskedastic ``GaussianLikelihood``.  For it
the objective of :class:`~amorgp.amortizer.bridge.lean.LeanObjective` and its gradient are
a handful of dense float64 operations, written here in NumPy without autograd:

    K = s exp(-Q / 2),  Q_ik = sum_j w_j (x_ij - x_kj)^2,  w_j = 1 / l_j^2,
    A = K + sigma^2 I,  r = y - c,  alpha = A^{-1} r,  W = (alpha alpha^T - A^{-1}) / 2,
    dL/d sigma^2 = tr W,   dL/ds = sum(W o K) / s,   dL/dc = sum(alpha),
    dL/dl_j = sum(W o K o D_j) / l_j^3,   D_j = (x_ij - x_kj)^2,

with ``L`` the log marginal likelihood; the priors' log-densities (LogNormal, Normal,
Gamma) and their derivatives are added, everything is divided by ``n``, and the chain rule
goes through each constraint (identity where BoTorch does not enforce it by a transform,
``softplus(raw) + lower`` where it does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gpytorch.kernels as gk
import numpy as np
import torch
from gpytorch.priors import GammaPrior, LogNormalPrior, NormalPrior
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import dpotrf, dpotri, dpotrs

from amorgp.kernel_grammar import OptionError

__all__ = ["RBFObjective"]

_LOG_2PI = math.log(2.0 * math.pi)
_KINDS = {"lengthscale", "outputscale", "noise", "constant"}


@dataclass
class _Slot:
    """One trainable raw parameter: where it lies in the flat vector and its transform."""

    kind: str
    start: int
    size: int
    lower: float  # softplus(raw) + lower where enforced
    enforced: bool


class RBFObjective:
    """``(-MLL, -dMLL/d raw)`` of an RBF model in NumPy (see the module docstring).

    Args:
        lean: the model's :class:`~amorgp.amortizer.bridge.lean.LeanObjective` (its data,
            trainable parameters and priors).

    Raises:
        OptionError: not an RBF / ScaleKernel(RBF) model with a constant or zero mean,
            a parameter with an unsupported constraint, or a prior outside LogNormal,
            Normal, Gamma.
    """

    def __init__(self, lean: Any) -> None:
        model = lean.model
        k = model.covar_module
        scale = k if type(k) is gk.ScaleKernel else None
        rbf = k.base_kernel if scale is not None else k
        if (
            type(rbf) is not gk.RBFKernel
            or any(m.active_dims is not None for m in (k, rbf))
            or rbf.batch_shape != torch.Size()
        ):
            raise OptionError("not an RBFKernel (optionally under a ScaleKernel) on all columns")
        owners = {
            id(rbf.raw_lengthscale): ("lengthscale", rbf),
            id(lean.noise_module.raw_noise): ("noise", lean.noise_module),
        }
        if scale is not None:
            owners[id(scale.raw_outputscale)] = ("outputscale", scale)
        mean = model.mean_module
        if hasattr(mean, "raw_constant"):
            owners[id(mean.raw_constant)] = ("constant", mean)
        self._fixed = {kind: _value(mod, kind) for kind, mod in owners.values()}
        self._fixed.setdefault("outputscale", np.ones(1))
        self._fixed.setdefault("constant", np.zeros(1))
        self.slots: list[_Slot] = []
        start = 0
        for p in lean.params:
            if id(p) not in owners:
                raise OptionError("a trainable parameter outside the RBF model")
            kind, mod = owners[id(p)]
            c = getattr(mod, f"raw_{kind}_constraint", None)
            lower, enforced = _transform(c)
            self.slots.append(_Slot(kind, start, p.numel(), lower, enforced))
            start += p.numel()
        self._priors = [
            _prior(lean.model, name, mod, prior, owners) for name, mod, prior in _named(model)
        ]
        X = lean.X.numpy()
        n, d = X.shape
        self.D = ((X[:, None, :] - X[None, :, :]) ** 2).reshape(n * n, d)
        self.y = lean.y.numpy()
        self.n = n
        self.M = np.tril(np.full((n, n), 2.0), -1) + np.eye(n)

    def value_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``(-MLL, -dMLL/dtheta)`` at the flat raw parameters ``theta``."""
        vals = dict(self._fixed)
        dvals: dict[str, np.ndarray | float] = {}
        for s in self.slots:
            raw = theta[s.start : s.start + s.size]
            if s.enforced:  # softplus(raw) + lower (linear above 20, as torch's)
                big = raw > 20.0
                vals[s.kind] = np.where(big, raw, np.logaddexp(0.0, raw)) + s.lower
                dvals[s.kind] = np.where(big, 1.0, 1.0 / (1.0 + np.exp(-raw)))
            else:
                vals[s.kind], dvals[s.kind] = raw, 1.0
        n = self.n
        ls, os = vals["lengthscale"], float(vals["outputscale"].reshape(-1)[0])
        noise = float(vals["noise"].reshape(-1)[0])
        w = np.broadcast_to(1.0 / ls.reshape(-1) ** 2, (self.D.shape[1],))
        E = np.exp(-0.5 * (self.D @ w)).reshape(n, n)
        A = os * E
        A.flat[:: n + 1] += noise
        try:
            L = _cholesky(A)
        except LinAlgError:  # let the line search step back
            return math.inf, np.zeros_like(theta)
        r = self.y - float(vals["constant"].reshape(-1)[0])
        alpha, _ = dpotrs(L, r, lower=1)
        Ainv, _ = dpotri(L, lower=1)  # lower triangle of A^{-1} (upper: leftovers)
        value = -0.5 * r @ alpha - np.log(np.diag(L)).sum() - 0.5 * n * _LOG_2PI
        # sums over symmetric matrices as sums over the lower triangle, weights self.M
        WE = (0.5 * self.M * (np.outer(alpha, alpha) - Ainv) * E).reshape(-1)
        grads = {
            "noise": np.full(1, 0.5 * (alpha @ alpha - np.trace(Ainv))),
            "outputscale": np.full(1, WE.sum()),
            "constant": np.full(1, alpha.sum()),
            "lengthscale": (os * (WE @ self.D)) / ls.reshape(-1) ** 3,
        }
        if ls.size == 1:
            grads["lengthscale"] = np.full(1, grads["lengthscale"].sum())
        for kind, log_density in self._priors:
            v, g = log_density(vals[kind].reshape(-1))
            value += v
            grads[kind] = grads[kind] + g
        out = np.empty(sum(s.size for s in self.slots))
        for s in self.slots:
            out[s.start : s.start + s.size] = -(grads[s.kind] * dvals[s.kind]).reshape(-1) / n
        return float(-value / n), out


def _cholesky(A: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor (upper triangle left as is); on failure GPyTorch's float64
    jitter ``1e-8 * 10^k``, ``k = 0, 1, 2``."""
    for k in range(-1, 3):
        jitter = 0.0 if k < 0 else 1e-8 * 10.0**k
        L, info = dpotrf(A + jitter * np.eye(A.shape[0]) if jitter else A, lower=1, clean=0)
        if info == 0:
            return L
    raise LinAlgError("the covariance is not positive definite, even with jitter")


def _value(mod: Any, kind: str) -> np.ndarray:
    with torch.no_grad():
        return getattr(mod, kind).detach().to(torch.float64).reshape(-1).numpy().copy()


def _transform(c: Any) -> tuple[float, bool]:
    """``(lower, enforced)`` of a constraint: identity, or softplus + a scalar lower bound."""
    if c is None or not c.enforced:
        return 0.0, False
    t = c._transform
    softplus = t is torch.nn.functional.softplus or (
        type(t) is torch.nn.Softplus and t.beta == 1.0 and t.threshold == 20.0
    )
    if math.isfinite(float(c.upper_bound.max())) or not softplus:
        raise OptionError(f"{type(c).__name__}: only softplus lower-bound constraints")
    return float(c.lower_bound.max()), True


def _named(model: Any) -> list[tuple[str, Any, Any]]:
    return [(name, mod, prior) for name, mod, prior, _, _ in model.named_priors()]


Density = Callable[[np.ndarray], tuple[float, np.ndarray]]


def _prior(model: Any, name: str, mod: Any, prior: Any, owners: dict) -> tuple[str, Density]:
    """``(kind, x -> (log p(x) summed, d log p / dx))`` of one registered prior."""
    stem = name.rsplit(".", 1)[-1].removesuffix("_prior")
    stem = "constant" if stem == "mean" else stem
    raw = getattr(mod, f"raw_{stem}", None)
    if raw is None or id(raw) not in owners or getattr(prior, "_transform", None) is not None:
        raise OptionError(f"prior {name} outside the closed forms")
    kind = owners[id(raw)][0]

    def arr(t: Any) -> np.ndarray:
        return torch.as_tensor(t, dtype=torch.float64).detach().reshape(-1).numpy().copy()

    if type(prior) is LogNormalPrior:
        mu, s = arr(prior.loc), arr(prior.scale)

        def lognormal(x: np.ndarray) -> tuple[float, np.ndarray]:
            z = (np.log(x) - mu) / s
            v = -np.log(x) - np.log(s) - 0.5 * _LOG_2PI - 0.5 * z * z
            return float(np.broadcast_to(v, x.shape).sum()), -(1.0 + z / s) / x

        return kind, lognormal
    if type(prior) is NormalPrior:
        mu, s = arr(prior.loc), arr(prior.scale)

        def normal(x: np.ndarray) -> tuple[float, np.ndarray]:
            z = (x - mu) / s
            v = -np.log(s) - 0.5 * _LOG_2PI - 0.5 * z * z
            return float(np.broadcast_to(v, x.shape).sum()), -z / s

        return kind, normal
    if type(prior) is GammaPrior:
        a, b = arr(prior.concentration), arr(prior.rate)
        lg = np.array([math.lgamma(float(t)) for t in a])

        def gamma(x: np.ndarray) -> tuple[float, np.ndarray]:
            v = a * np.log(b) + (a - 1.0) * np.log(x) - b * x - lg
            return float(np.broadcast_to(v, x.shape).sum()), (a - 1.0) / x - b

        return kind, gamma
    raise OptionError(f"prior {name}: {type(prior).__name__} has no closed form here")
