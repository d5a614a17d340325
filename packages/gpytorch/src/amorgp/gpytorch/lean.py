"""A GPyTorch ``ExactGP``'s training objective in plain float64 torch, and L-BFGS-B on it.

BoTorch fits a model by minimising ``-ExactMarginalLogLikelihood(likelihood, model)(
model(*model.train_inputs), model.train_targets)``: with ``K`` the kernel matrix of the
(train-mode input-transformed) training inputs, ``sigma^2`` the likelihood's noise, ``m``
the mean and ``y`` the (outcome-transformed) targets,

    MLL = [ -1/2 r^T A^{-1} r - 1/2 log|A| - n/2 log(2 pi) + sum_priors log p(theta) ] / n,
    A = K + sigma^2 I,  r = y - m.

Through GPyTorch every evaluation pays for lazy kernel tensors, linear operators, the
multivariate normal and ``torch.distributions`` priors, far more than the dense algebra
costs at the sizes of Bayesian optimisation (``docs/benchmarks/botorch.md``).  :class:`LeanObjective`
reads the model once (kernel tree, mean, noise, priors, parameter constraints and the
bounds BoTorch's scipy fit uses; the modules as functions: :mod:`amorgp.gpytorch.lean_modules`)
and evaluates the same number and its gradient with
respect to the raw parameters directly; :meth:`LeanObjective.minimize` runs scipy's
L-BFGS-B on the flat raw-parameter vector and writes the result to the model once.

Supported: ``RBFKernel``, ``PeriodicKernel``, ``LinearKernel``, ``ConstantKernel``,
``ScaleKernel``, ``AdditiveKernel`` and ``ProductKernel`` (with ``active_dims``, non-batched);
``ConstantMean``/``ZeroMean``; a homoskedastic ``GaussianLikelihood`` or a
``FixedNoiseGaussianLikelihood`` without additional learned noise (BoTorch's
``SingleTaskGP(X, Y, train_Yvar=...)``: the known per-point noise is added to the kernel's
diagonal and is not a free hyperparameter); priors on any of their parameters; input
transforms without trainable parameters.  Anything else raises
:class:`~amorgp.core.errors.OptionError` when the objective is built.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from linear_operator.utils.errors import NanError, NotPSDError
from linear_operator.utils.warnings import NumericalWarning
from scipy.optimize import minimize
from torch import Tensor

from amorgp.core.errors import OptionError
from amorgp.gpytorch.lean_modules import Getter, Values, kernel_fn, mean_fn, prior_fn
from amorgp.gpytorch.lean_rbf import GPYTORCH_JITTER, RBFObjective
from amorgp.gpytorch.start_tuning import tune_start
from amorgp.lazy_kernels import Posterior
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood, GaussianLikelihood
from gpytorch.likelihoods.noise_models import FixedGaussianNoise, HomoskedasticNoise

__all__ = ["LeanObjective", "LeanResult"]


@dataclass
class LeanResult:
    """What :meth:`LeanObjective.minimize` did.

    Attributes:
        mll: the objective (``ExactMarginalLogLikelihood``, priors included) at the end.
        iterations: L-BFGS-B iterations run.
        evaluations: objective evaluations.
        message: scipy's stopping message.
        status: scipy's status: 0 converged, 1 iteration limit, 2 stopped abnormally
            (e.g. the line search failed; the parameters are the best found).
    """

    mll: float
    iterations: int
    evaluations: int
    message: str
    status: int = 0


class LeanObjective:
    """The model's ``ExactMarginalLogLikelihood`` (priors included) as a function of its
    trainable raw parameters, in float64 torch.

    Args:
        mll: a GPyTorch ``ExactMarginalLogLikelihood`` of a single-output, non-batched
            ``ExactGP`` (e.g. BoTorch's ``SingleTaskGP``).

    Raises:
        OptionError: a module, likelihood, mean or prior outside the supported set.
    """

    def __init__(self, mll: Any) -> None:
        model = mll.model
        self.model = model
        lik = mll.likelihood
        fixed = fixed_noise(lik)
        homoskedastic = (
            type(lik) is GaussianLikelihood and type(lik.noise_covar) is HomoskedasticNoise
        )
        if fixed is None and not homoskedastic:
            raise OptionError(
                f"{type(lik).__name__}: only a homoskedastic GaussianLikelihood or a "
                "FixedNoiseGaussianLikelihood without additional noise"
            )
        if list(model.added_loss_terms()):
            raise OptionError("a model with added loss terms")
        X, y = model.train_inputs[0], model.train_targets
        if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
            raise OptionError(
                f"a single-output, non-batched model; got inputs {tuple(X.shape)} and "
                f"targets {tuple(y.shape)}"
            )
        tf = getattr(model, "input_transform", None)
        if tf is not None and any(p.requires_grad for p in tf.parameters()):
            raise OptionError("an input transform with trainable parameters")
        with torch.no_grad():
            Xt = model.transform_inputs(X) if hasattr(model, "transform_inputs") else X
        self.X = Xt.detach().to(torch.float64)
        self.y = y.detach().to(torch.float64)
        #: the likelihood's noise module (None: the noise is fixed, :attr:`fixed_noise`)
        self.noise_module = None if fixed is not None else lik.noise_covar
        #: the known per-point noise variances ``(n,)`` of a fixed-noise likelihood
        self.fixed_noise = None if fixed is None else fixed.to(torch.float64)
        if self.fixed_noise is not None and self.fixed_noise.shape != self.y.shape:
            raise OptionError(
                f"fixed noise of shape {tuple(self.fixed_noise.shape)} for "
                f"{self.y.shape[0]} targets"
            )
        self.params = [p for _, p in mll.named_parameters() if p.requires_grad]
        self.bounds = _bounds(mll, self.params)
        self.closed_form: RBFObjective | None = None
        try:
            self.closed_form = RBFObjective(self)
            return
        except OptionError:
            pass
        self._kernel = kernel_fn(model.covar_module)
        self._mean = mean_fn(model.mean_module)
        self._priors = [
            prior_fn(name, mod, prior, closure)
            for name, mod, prior, closure, _ in model.named_priors()
        ]
        used: set[int] = set()
        with torch.no_grad():
            self._evaluate({}, used)
        unused = [p.shape for p in self.params if id(p) not in used]
        if unused:
            raise OptionError(f"trainable parameters the objective does not read: {unused}")

    # -- evaluation ---------------------------------------------------------------------
    def _evaluate(self, vals: Values, used: set[int] | None = None) -> Tensor:
        """The MLL (a 0-d tensor) with the raw parameters in ``vals`` (others: the model's)."""
        get = Getter(vals, used)
        X, y, n = self.X, self.y, self.y.shape[0]
        K = self._kernel(X, get)
        if self.noise_module is None:
            assert self.fixed_noise is not None
            K = K + torch.diag(self.fixed_noise)
            noise = torch.zeros((), dtype=torch.float64)
        else:
            noise = get(self.noise_module, "noise").reshape(())
        out = _gaussian_log_density(K, y - self._mean(X, get), noise)
        for prior in self._priors:
            out = out + prior(get)
        return out / n

    def x0(self) -> np.ndarray:
        """The model's trainable raw parameters, flattened (float64)."""
        return torch.cat([p.detach().reshape(-1) for p in self.params]).to(torch.float64).numpy()

    def write(self, theta: np.ndarray) -> None:
        """Write the flat raw parameters ``theta`` to the model."""
        with torch.no_grad():
            values = self._unflatten(torch.from_numpy(np.asarray(theta, dtype=np.float64)))
            for p, v in zip(self.params, values.values(), strict=True):
                p.copy_(v.to(p))

    def _unflatten(self, theta: Tensor) -> Values:
        vals, i = {}, 0
        for p in self.params:
            vals[id(p)] = theta[i : i + p.numel()].reshape(p.shape)
            i += p.numel()
        return vals

    def values(self, thetas: np.ndarray) -> np.ndarray:
        """``-MLL`` at each row of the flat raw parameters ``thetas (B, p)`` (``inf`` where
        it is not finite): one batched evaluation on the closed form, one evaluation per
        row otherwise."""
        thetas = np.atleast_2d(np.asarray(thetas, dtype=np.float64))
        if self.closed_form is not None:
            return self.closed_form.values(thetas)
        out = np.empty(thetas.shape[0])
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", NumericalWarning)
            for i, theta in enumerate(thetas):
                try:
                    value = -float(self._evaluate(self._unflatten(torch.from_numpy(theta))))
                except (NanError, NotPSDError):
                    value = math.inf
                out[i] = value if math.isfinite(value) else math.inf
        return out

    def box(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-element lower and upper bounds of the flat raw vector (``-inf``/``inf`` where
        none): BoTorch's scipy bounds."""
        return _lohi(self.bounds)

    def tune_start(self, theta: np.ndarray) -> tuple[np.ndarray, float]:
        """A better start near ``theta`` on this objective (priors included): the noise on a
        grid of :data:`~amorgp.gpytorch.start_tuning.NOISE_GRID` values, then a common factor on the RBF and Matern
        lengthscales (:data:`~amorgp.gpytorch.start_tuning.LENGTHSCALE_FACTORS`; where the kernel tree holds nothing
        else, with sums, products and scales), then the noise again, each pass one
        batched evaluation of :meth:`values` that keeps its best row only if it is better.

        The other hyperparameters (the relative lengthscales, variances, mean) stay as in
        ``theta``.  Parameters the model does not train are left out of the search.

        Returns:
            ``(theta', -MLL at theta')``: never worse than ``theta``.
        """
        return tune_start(self, theta)

    def value_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``(-MLL, -dMLL/dtheta)`` at the flat raw parameters ``theta`` (scipy's form)."""
        if self.closed_form is not None:
            return self.closed_form.value_and_grad(np.asarray(theta, dtype=np.float64))
        t = torch.from_numpy(np.asarray(theta, dtype=np.float64)).requires_grad_(True)
        loss = -self._evaluate(self._unflatten(t))
        (grad,) = torch.autograd.grad(loss, t)
        return float(loss.detach()), grad.numpy()

    def minimize(
        self,
        steps: int,
        *,
        ftol: float = 2.220446e-9,
        gtol: float = 1e-5,
    ) -> LeanResult:
        """At most ``steps`` iterations of scipy's L-BFGS-B from the model's current parameters; the
        result is written to the model.

        Bounds are those of BoTorch's scipy fit (the constraints that are not enforced by a
        transform, e.g. BoTorch's ``GreaterThan(..., transform=None)``).

        Args:
            steps: iterations at most (the stopping rules may end it earlier).
            ftol: stop when the relative decrease of ``-MLL`` is at most ``ftol``.
            gtol: stop when the projected gradient's largest entry is at most ``gtol``.

        Raises:
            FloatingPointError: a non-finite objective or parameter at the end.
        """
        lo, hi = _lohi(self.bounds)
        logc = lo > 0  # positive lower bound: the iterations run on log(raw)
        x0 = np.clip(self.x0(), lo, hi)
        u0 = np.where(logc, np.log(np.where(logc, x0, 1.0)), x0)
        with np.errstate(divide="ignore"):
            ulo = np.where(logc, np.log(np.where(logc, lo, 1.0)), lo)
            uhi = np.where(logc, np.log(np.where(logc, hi, 1.0)), hi)

        def fg(u: np.ndarray) -> tuple[float, np.ndarray]:
            x = np.where(logc, np.exp(u), u)
            f, g = self.value_and_grad(x)
            return f, np.where(logc, g * x, g)

        out = minimize(
            fg if logc.any() else self.value_and_grad,
            u0,
            jac=True,
            method="L-BFGS-B",
            bounds=[
                (a if np.isfinite(a) else None, b if np.isfinite(b) else None)
                for a, b in zip(ulo, uhi, strict=True)
            ],
            options={"maxiter": int(steps), "gtol": gtol, "ftol": ftol},
        )
        x, fun = np.clip(np.where(logc, np.exp(out.x), out.x), lo, hi), float(out.fun)
        if not (np.isfinite(fun) and np.isfinite(x).all()):
            raise FloatingPointError(f"non-finite objective {fun} in the L-BFGS refine")
        self.write(x)
        return LeanResult(-fun, int(out.nit), int(out.nfev), str(out.message), int(out.status))


def fixed_noise(likelihood: Any) -> Tensor | None:
    """The known per-point noise variances ``(n,)`` of a ``FixedNoiseGaussianLikelihood``
    without additional learned noise (BoTorch's ``SingleTaskGP(..., train_Yvar=...)``),
    else None."""
    if (
        type(likelihood) is FixedNoiseGaussianLikelihood
        and type(likelihood.noise_covar) is FixedGaussianNoise
        and getattr(likelihood, "second_noise_covar", None) is None
    ):
        return likelihood.noise_covar.noise.detach().reshape(-1)
    return None


def _gaussian_log_density(K: Tensor, r: Tensor, noise: Tensor) -> Tensor:
    """``log N(r; 0, K + sigma^2 I)`` (0-d) by :meth:`amorgp.lazy_kernels.Posterior.dense`,
    differentiable w.r.t. ``K``, ``r`` and ``noise`` (backward
    ``dlog/dA = (alpha alpha^T - A^{-1}) / 2``, ``dlog/dr = -alpha``).

    The factorisation retries as GPyTorch's ``psd_safe_cholesky`` does (absolute jitter
    ``1e-8, 1e-7, 1e-6`` only when plain Cholesky fails, warned as ``NumericalWarning``,
    as in the model's own likelihood); the jitter is a constant.

    Raises:
        NanError: ``K + sigma^2 I`` holds NaN (as GPyTorch).
        NotPSDError: not positive definite even with the largest jitter (as GPyTorch).
    """
    post = Posterior.dense(K, r, noise, jitter_ladder=GPYTORCH_JITTER)
    if post.any_failed:
        if bool(torch.isnan(post.A.detach()).any()):
            raise NanError(f"the {tuple(K.shape)} covariance K + sigma^2 I holds NaN")
        raise NotPSDError(
            f"Matrix not positive definite after repeatedly adding jitter up to "
            f"{GPYTORCH_JITTER[-1]:.1e}."
        )
    if float(post.jitter) > 0:
        warnings.warn(
            f"A not p.d., added jitter of {float(post.jitter):.1e} to the diagonal",
            NumericalWarning,
            stacklevel=2,
        )
    return post.log_marginal_likelihood()


def _bounds(mll: Any, params: list[Tensor]) -> list[tuple[float | None, float | None]]:
    """Per-element ``(lo, hi)`` of the flat raw vector: a constraint's bounds where no
    transform enforces it (BoTorch's convention), else unbounded."""
    found: dict[int, tuple[float | None, float | None]] = {}
    for _, p, c in mll.named_parameters_and_constraints():
        if c is None or c.enforced:
            continue
        lo, hi = float(c.lower_bound.min()), float(c.upper_bound.max())
        found[id(p)] = (lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None)
    out: list[tuple[float | None, float | None]] = []
    for p in params:
        out += [found.get(id(p), (None, None))] * p.numel()
    return out


def _lohi(bounds: list[tuple[float | None, float | None]]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([-np.inf if b[0] is None else b[0] for b in bounds])
    hi = np.array([np.inf if b[1] is None else b[1] for b in bounds])
    return lo, hi
