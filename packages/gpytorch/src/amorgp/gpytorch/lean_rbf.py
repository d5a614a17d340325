"""Closed-form value and gradient of the training objective for RBF (ARD) models.

BoTorch's default ``SingleTaskGP`` is ``RBFKernel`` with ARD (optionally under a
``ScaleKernel``), a ``ConstantMean`` and a homoskedastic ``GaussianLikelihood``.  For it
the objective of :class:`~amorgp.gpytorch.lean.LeanObjective` and its gradient are
a handful of dense float64 operations, written here in NumPy without autograd (the
factor of ``A``, ``alpha`` and ``A^{-1}`` from :meth:`amorgp.lazy_kernels.Posterior.dense`):

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
from typing import Any

import numpy as np
import torch

import gpytorch.kernels as gk
from amorgp.core.errors import OptionError
from amorgp.lazy_kernels import Posterior
from gpytorch.priors import GammaPrior, LogNormalPrior, NormalPrior

__all__ = ["GPYTORCH_JITTER", "RBFObjective"]

_LOG_2PI = math.log(2.0 * math.pi)
GPYTORCH_JITTER = (1e-8, 1e-7, 1e-6)
"""GPyTorch's float64 Cholesky jitter ladder (``psd_safe_cholesky``: absolute jitter, three
tries, only where plain Cholesky fails)."""


class RBFObjective:
    """``(-MLL, -dMLL/d raw)`` of an RBF model in NumPy (see the module docstring).

    The hyperparameters live in one value vector ``v = [l (k), s, sigma^2, c]`` (``k`` = 1
    or ``d`` lengthscales; fixed entries keep the model's values); the trainable raw
    parameters map into it by index, the priors act on index sets of it.

    Args:
        lean: the model's :class:`~amorgp.gpytorch.lean.LeanObjective` (its data,
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
        X = lean.X.numpy()
        n, d = X.shape
        nls = rbf.raw_lengthscale.numel()
        if nls not in (1, d):
            raise OptionError(f"{nls} lengthscales for {d} input columns")
        mean = model.mean_module
        holders = [("lengthscale", rbf, 0)]
        if lean.noise_module is not None:
            holders += [("noise", lean.noise_module, nls + 1)]
        # a fixed-noise likelihood: the known per-point noise on K's diagonal, sigma^2 = 0
        self.fixed = None if lean.fixed_noise is None else lean.fixed_noise.numpy()
        holders += [("outputscale", scale, nls)] if scale is not None else []
        holders += [("constant", mean, nls + 2)] if hasattr(mean, "raw_constant") else []
        self.v0 = np.array([1.0] * (nls + 1) + [0.0 if self.fixed is not None else 1.0, 0.0])
        owners: dict[int, tuple[Any, int, int]] = {}  # id(raw) -> (constraint, start, size)
        for kind, mod, start in holders:
            raw = getattr(mod, f"raw_{kind}")
            self.v0[start : start + raw.numel()] = _value(mod, kind)
            owners[id(raw)] = (getattr(mod, f"raw_{kind}_constraint", None), start, raw.numel())
        idx: list[int] = []
        low: list[float] = []
        enf: list[bool] = []
        for p in lean.params:
            if id(p) not in owners:
                raise OptionError("a trainable parameter outside the RBF model")
            c, start, size = owners[id(p)]
            lower, enforced = _transform(c)
            idx += range(start, start + size)
            low += [lower] * size
            enf += [enforced] * size
        self.idx, self.low, self.enf = np.array(idx), np.array(low), np.array(enf, dtype=bool)
        self.priors = _Priors([_prior(*item, owners) for item in _named(model)])
        self.D = ((X[:, None, :] - X[None, :, :]) ** 2).reshape(n * n, d)
        if nls == 1:  # one lengthscale for all columns
            self.D = self.D.sum(1, keepdims=True)
        self.Dh = -0.5 * self.D
        self.y = lean.y.numpy()
        self.n, self.nls = n, nls

    def _values(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
        """The value vector(s) ``v`` of the raw parameters ``theta`` (``(p,)`` or
        ``(B, p)``) and ``dv/dtheta``."""
        v = np.broadcast_to(self.v0, (*theta.shape[:-1], self.v0.size)).copy()
        dv: np.ndarray | float = 1.0
        if self.enf.any():  # softplus(raw) + lower (linear above 20, as torch's)
            big = theta > 20.0
            sp = np.where(big, theta, np.logaddexp(0.0, theta)) + self.low
            v[..., self.idx] = np.where(self.enf, sp, theta)
            dv = np.where(self.enf & ~big, 1.0 / (1.0 + np.exp(-theta)), 1.0)
        else:
            v[..., self.idx] = theta
        return v, dv

    def values(self, thetas: np.ndarray) -> np.ndarray:
        """``-MLL`` at each row of ``thetas (B, p)`` in one batched evaluation (one batched
        Cholesky); ``inf`` where a matrix cannot be factored."""
        n, nls = self.n, self.nls
        V, _ = self._values(np.asarray(thetas, dtype=np.float64))
        ls, os = V[:, :nls], V[:, nls]
        K = os[:, None, None] * np.exp((1.0 / (ls * ls)) @ self.Dh.T).reshape(-1, n, n)
        if self.fixed is not None:
            K[:, np.arange(n), np.arange(n)] += self.fixed
        post = Posterior.dense(
            torch.from_numpy(K),
            torch.from_numpy(self.y[None, :] - V[:, nls + 2 : nls + 3]),
            torch.from_numpy(V[:, nls + 1].copy()),
            jitter_ladder=GPYTORCH_JITTER,
        )
        lml = post.log_marginal_likelihood().numpy()
        lml = lml + np.array([self.priors.add_to(v, np.zeros(v.size)) for v in V])
        out = -lml / n
        return np.where(np.isfinite(out), out, np.inf)

    def value_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``(-MLL, -dMLL/dtheta)`` at the flat raw parameters ``theta``."""
        n, nls = self.n, self.nls
        v, dv = self._values(theta)
        ls, os, noise = v[:nls], v[nls], v[nls + 1]
        E = np.exp(self.Dh @ (1.0 / (ls * ls))).reshape(n, n)
        r = self.y - v[nls + 2]
        K = os * E
        if self.fixed is not None:
            K[np.diag_indices(n)] += self.fixed
        post = Posterior.dense(
            torch.from_numpy(K),
            torch.from_numpy(r),
            float(noise),
            jitter_ladder=GPYTORCH_JITTER,
        )
        if post.any_failed:  # let the line search step back
            return math.inf, np.zeros_like(theta)
        alpha, Ainv, L = post.alpha.numpy(), post.inverse().numpy(), post.L.numpy()
        value = -0.5 * (r @ alpha) - np.log(L.diagonal()).sum() - 0.5 * n * _LOG_2PI
        # (alpha alpha^T - A^{-1}) o E: symmetric (A^{-1} is the full symmetric inverse)
        W = alpha[:, None] * alpha
        W -= Ainv
        W *= E
        WE = W.reshape(-1)
        g = np.empty(nls + 3)
        g[:nls] = (0.5 * os) * (WE @ self.D) / ls**3
        g[nls] = 0.5 * WE.sum()
        g[nls + 1] = 0.5 * (alpha @ alpha - Ainv.trace())
        g[nls + 2] = alpha.sum()
        value += self.priors.add_to(v, g)
        return float(-value / n), -(g[self.idx] * dv) / n


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


class _Priors:
    """The registered priors grouped by family, each family evaluated in one vector
    operation: ``add_to(v, g)`` returns the summed log density at the value vector ``v``
    and adds its derivatives to ``g``."""

    def __init__(self, terms: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]) -> None:
        self.groups: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, float, bool]] = []
        for family in ("lognormal", "normal", "gamma"):
            chosen = [t for t in terms if t[0] == family]
            if not chosen:
                continue
            pos = np.concatenate([t[1] for t in chosen])
            a = np.concatenate([t[2] for t in chosen])
            b = np.concatenate([t[3] for t in chosen])
            if family == "gamma":
                const = float((a * np.log(b)).sum() - sum(math.lgamma(float(t)) for t in a))
            else:
                const = float((-np.log(b) - 0.5 * _LOG_2PI).sum())
            repeated = len(np.unique(pos)) < len(pos)  # two priors on one value
            self.groups.append((family, pos, a, b, const, repeated))

    def add_to(self, v: np.ndarray, g: np.ndarray) -> float:
        total = 0.0
        for family, pos, a, b, const, repeated in self.groups:
            x = v[pos]
            if family == "lognormal":  # a = loc, b = scale (of log x)
                lx = np.log(x)
                z = (lx - a) / b
                total += const - float((lx + 0.5 * z * z).sum())
                dx = -(1.0 + z / b) / x
            elif family == "normal":  # a = loc, b = scale
                z = (x - a) / b
                total += const - 0.5 * float((z * z).sum())
                dx = -z / b
            else:  # gamma: a = concentration, b = rate
                total += const + float(((a - 1.0) * np.log(x) - b * x).sum())
                dx = (a - 1.0) / x - b
            if repeated:
                np.add.at(g, pos, dx)
            else:
                g[pos] += dx
        return total


def _prior(
    name: str, mod: Any, prior: Any, owners: dict[int, tuple[Any, int, int]]
) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """``(family, positions in the value vector, first parameters, second parameters)`` of
    one registered prior (LogNormal: loc and scale; Normal: loc and scale; Gamma:
    concentration and rate), broadcast to the positions."""
    stem = name.rsplit(".", 1)[-1].removesuffix("_prior")
    stem = "constant" if stem == "mean" else stem
    raw = getattr(mod, f"raw_{stem}", None)
    if raw is None or id(raw) not in owners or getattr(prior, "_transform", None) is not None:
        raise OptionError(f"prior {name} outside the closed forms")
    _, start, size = owners[id(raw)]
    pos = np.arange(start, start + size)

    def arr(t: Any) -> np.ndarray:
        out = torch.as_tensor(t, dtype=torch.float64).detach().reshape(-1).numpy()
        if out.size not in (1, size):
            raise OptionError(f"prior {name}: parameters of shape {out.shape} for {size} values")
        return np.broadcast_to(out, (size,)).copy()

    if type(prior) is LogNormalPrior:
        return "lognormal", pos, arr(prior.loc), arr(prior.scale)
    if type(prior) is NormalPrior:
        return "normal", pos, arr(prior.loc), arr(prior.scale)
    if type(prior) is GammaPrior:
        return "gamma", pos, arr(prior.concentration), arr(prior.rate)
    raise OptionError(f"prior {name}: {type(prior).__name__} has no closed form here")
