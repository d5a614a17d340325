"""Automatic differentiation variational inference (Kucukelbir et al., JMLR 2017).

ADVI fits a Gaussian ``q(zeta)`` in an *unconstrained* space ``zeta = T(theta)``
to the posterior of a model with joint density ``p(x, theta)``.  The target is

.. math::

    \\log p(x, T^{-1}(\\zeta)) + \\log |\\det J_{T^{-1}}(\\zeta)| ,

which is what a :data:`LogDensity` callable returns for a batch of ``zeta``.
:func:`positive_log_density` builds it for positive parameters from a
constrained log joint through the shared transform of
:mod:`amorgp.kernel_grammar.transforms` (``theta = floor + softplus(zeta)``,
``log |d theta / d zeta| = log sigmoid(zeta)``).

Families (paper §2.5):

* mean-field: ``q = N(mu, diag(exp(omega))^2)``, parameters ``(mu, omega)``;
* full-rank: ``q = N(mu, L L^T)`` with ``L`` lower triangular (any real entries,
  entropy through ``log |L_kk|``).

The ELBO is ``E_q[log p(x, T^{-1}(zeta)) + log |det J|] + H[q]`` with entropy
``H = sum omega + K/2 (1 + log 2 pi)`` (mean-field) or
``sum log |L_kk| + K/2 (1 + log 2 pi)`` (full-rank).  Gradients are
reparameterisation gradients with ``zeta = mu + exp(omega) * eta`` or
``zeta = mu + L eta``, ``eta ~ N(0, I)``, computed by autograd; the paper's
closed forms (its Eqs. 8-10) are

.. math::

    \\nabla_\\mu = E[g], \\quad
    \\nabla_\\omega = E[g \\odot \\eta] \\odot e^{\\omega} + 1, \\quad
    \\nabla_L = E[g \\eta^T] + (L^{-1})^T ,

with ``g = grad_zeta (log p + log |det J|)``; :func:`paper_gradients` evaluates
them and the tests check autograd against them.

Step sizes (paper §3.3, as Stan): per coordinate
``s_k <- alpha g_k^2 + (1 - alpha) s_k`` (``alpha = 0.1``, ``s_k = g_k^2`` at the
first step) and ``rho_k = eta i^(-1/2 + eps) / (tau + sqrt(s_k))`` with
``tau = 1``; the scale ``eta`` is chosen by a short adaptation run for each value
of ``{100, 10, 1, 0.1, 0.01}`` (stopping the search once the ELBO gets worse
after having improved).  Every ``eval_every`` iterations the ELBO is estimated
and its relative change ``|(L_t - L_{t-1}) / L_{t-1}|`` enters a circular buffer;
the run stops when the buffer's mean or median falls below ``tol_rel_obj``
(0.01).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from amorgp.kernel_grammar import ParamKind, positive

__all__ = [
    "ADVIResult",
    "Family",
    "LogDensity",
    "advi",
    "elbo_estimate",
    "paper_gradients",
    "positive_log_density",
]

LogDensity = Callable[[Tensor], Tensor]
"""Unconstrained log density: ``zeta (S, K) -> (S,)`` (``log p + log |det J|``)."""

Family = Literal["meanfield", "fullrank"]
ETA_GRID: tuple[float, ...] = (100.0, 10.0, 1.0, 0.1, 0.01)
_LOG2PI = math.log(2.0 * math.pi)


def positive_log_density(
    log_joint: Callable[[Tensor], Tensor], kinds: Sequence[ParamKind | str]
) -> LogDensity:
    """Unconstrained log density for a model whose parameters are all positive.

    Coordinate ``k`` is ``theta_k = positive(zeta_k, kinds[k])`` (the shared
    ``floor + softplus`` transform); the log-Jacobian of that map is
    ``sum_k log sigmoid(zeta_k)`` (``d softplus / dr = sigmoid``).

    Args:
        log_joint: constrained log joint ``theta (S, K) -> (S,)``.
        kinds: the parameter kind of each of the ``K`` coordinates.
    """
    kinds = [ParamKind(k) for k in kinds]

    def log_density(zeta: Tensor) -> Tensor:
        if zeta.shape[-1] != len(kinds):
            raise ValueError(f"expected {len(kinds)} coordinates, got {zeta.shape[-1]}")
        theta = torch.stack([positive(zeta[..., k], kind) for k, kind in enumerate(kinds)], -1)
        log_jac = torch.nn.functional.logsigmoid(zeta).sum(-1)
        return log_joint(theta) + log_jac

    return log_density


def _draw(family: Family, mu: Tensor, scale: Tensor, eta: Tensor) -> Tensor:
    """``zeta = mu + exp(omega) eta`` (mean-field) or ``mu + L eta`` (full-rank); eta ``(S, K)``."""
    if family == "meanfield":
        return mu + scale.exp() * eta
    return mu + eta @ torch.tril(scale).T


def _entropy(family: Family, scale: Tensor) -> Tensor:
    K = scale.shape[0]
    if family == "meanfield":
        return scale.sum() + 0.5 * K * (1.0 + _LOG2PI)
    return torch.diagonal(scale).abs().log().sum() + 0.5 * K * (1.0 + _LOG2PI)


def elbo_estimate(
    log_density: LogDensity, family: Family, mu: Tensor, scale: Tensor, eta: Tensor
) -> Tensor:
    """Monte-Carlo ELBO with the given standard-normal draws ``eta (S, K)``.

    Non-finite log densities (e.g. a failed Cholesky) make the estimate non-finite.

    Args:
        log_density: unconstrained log density.
        family: ``"meanfield"`` (``scale`` = omega ``(K,)``) or ``"fullrank"`` (``scale`` = L ``(K, K)``).
        mu: ``(K,)`` variational mean.
        scale: omega or L.
        eta: ``(S, K)`` standard-normal draws.
    """
    zeta = _draw(family, mu, scale, eta)
    return log_density(zeta).mean() + _entropy(family, scale)


def paper_gradients(
    grad_log_density: Callable[[Tensor], Tensor],
    family: Family,
    mu: Tensor,
    scale: Tensor,
    eta: Tensor,
) -> tuple[Tensor, Tensor]:
    """The paper's closed-form ELBO gradients (Kucukelbir et al. 2017, Eqs. 8-10).

    Args:
        grad_log_density: ``zeta (S, K) -> (S, K)`` gradient of the unconstrained log density.
        family, mu, scale, eta: as :func:`elbo_estimate`.

    Returns:
        ``(grad_mu (K,), grad_scale)`` with ``grad_scale`` ``(K,)`` (omega) or
        ``(K, K)`` lower triangular (L).
    """
    zeta = _draw(family, mu, scale, eta)
    g = grad_log_density(zeta)
    g_mu = g.mean(0)
    if family == "meanfield":
        return g_mu, (g * eta).mean(0) * scale.exp() + 1.0
    L = torch.tril(scale)
    g_L = (g[:, :, None] * eta[:, None, :]).mean(0) + torch.linalg.inv(L).T
    return g_mu, torch.tril(g_L)


@dataclass(frozen=True)
class ADVIResult:
    """A fitted Gaussian approximation in the unconstrained space.

    Attributes:
        family: ``"meanfield"`` or ``"fullrank"``.
        mean: ``(K,)`` variational mean ``mu``.
        scale_tril: ``(K, K)`` Cholesky factor of the covariance (diagonal for mean-field).
        elbo: final ELBO estimate (``n_elbo_samples`` draws).
        eta: the step-size scale used.
        iterations: optimisation iterations of the main run.
        converged: the relative-ELBO stopping rule fired.
        status: ``"converged (mean)"``, ``"converged (median)"``, ``"max_iters"`` or ``"failed"``.
        elbo_history: ``(iteration, ELBO)`` at every evaluation.
    """

    family: Family
    mean: Tensor
    scale_tril: Tensor
    elbo: float
    eta: float
    iterations: int
    converged: bool
    status: str
    elbo_history: list[tuple[int, float]] = field(default_factory=list)

    @property
    def covariance(self) -> Tensor:
        """``(K, K)`` covariance ``L L^T`` of ``q``."""
        return self.scale_tril @ self.scale_tril.T

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        """Draw ``n`` samples ``(n, K)`` of ``zeta`` from ``q``."""
        eta = torch.randn(
            n,
            self.mean.numel(),
            generator=generator,
            dtype=self.mean.dtype,
            device=self.mean.device,
        )
        return self.mean + eta @ self.scale_tril.T


class _StepSize:
    """The adaptive step-size sequence of ADVI, one state per parameter tensor."""

    def __init__(self, eta: float, alpha: float = 0.1, tau: float = 1.0, eps: float = 1e-16):
        self.eta, self.alpha, self.tau, self.eps = eta, alpha, tau, eps
        self.s: list[Tensor] | None = None
        self.i = 0

    def __call__(self, grads: Sequence[Tensor]) -> list[Tensor]:
        self.i += 1
        if self.s is None:
            self.s = [g * g for g in grads]
        else:
            self.s = [
                self.alpha * g * g + (1.0 - self.alpha) * s
                for g, s in zip(grads, self.s, strict=True)
            ]
        factor = self.eta * self.i ** (-0.5 + self.eps)
        return [factor * g / (self.tau + s.sqrt()) for g, s in zip(grads, self.s, strict=True)]


def _init_scale(family: Family, K: int, like: Tensor) -> Tensor:
    if family == "meanfield":
        return torch.zeros(K, dtype=like.dtype, device=like.device)
    return torch.eye(K, dtype=like.dtype, device=like.device)


def _run(
    log_density: LogDensity,
    family: Family,
    mu0: Tensor,
    eta: float,
    n_iters: int,
    n_grad_samples: int,
    generator: torch.Generator,
    on_eval: Callable[[int, Tensor, Tensor], bool] | None = None,
    eval_every: int = 100,
) -> tuple[Tensor, Tensor, int, bool]:
    """Stochastic gradient ascent on the ELBO; returns ``(mu, scale, iterations, ok)``."""
    mu = mu0.detach().clone()
    scale = _init_scale(family, mu.numel(), mu)
    steps = _StepSize(eta)
    for it in range(1, n_iters + 1):
        m = mu.clone().requires_grad_(True)
        s = scale.clone().requires_grad_(True)
        draws = torch.randn(
            n_grad_samples, mu.numel(), generator=generator, dtype=mu.dtype, device=mu.device
        )
        elbo = elbo_estimate(log_density, family, m, s, draws)
        if not torch.isfinite(elbo):
            return mu, scale, it, False
        g_mu, g_s = torch.autograd.grad(elbo, (m, s))
        if not (torch.isfinite(g_mu).all() and torch.isfinite(g_s).all()):
            return mu, scale, it, False
        if family == "fullrank":
            g_s = torch.tril(g_s)
        d_mu, d_s = steps([g_mu, g_s])
        mu = mu + d_mu
        scale = scale + d_s
        if on_eval is not None and it % eval_every == 0 and on_eval(it, mu, scale):
            return mu, scale, it, True
    return mu, scale, n_iters, True


def _elbo_value(
    log_density: LogDensity,
    family: Family,
    mu: Tensor,
    scale: Tensor,
    n: int,
    generator: torch.Generator,
) -> float:
    with torch.no_grad():
        draws = torch.randn(n, mu.numel(), generator=generator, dtype=mu.dtype, device=mu.device)
        return float(elbo_estimate(log_density, family, mu, scale, draws))


def advi(
    log_density: LogDensity,
    init: Tensor,
    *,
    family: Family = "meanfield",
    generator: torch.Generator,
    eta: float | None = None,
    n_grad_samples: int = 1,
    n_elbo_samples: int = 100,
    max_iters: int = 10_000,
    eval_every: int = 100,
    adapt_iters: int = 50,
    tol_rel_obj: float = 0.01,
) -> ADVIResult:
    """Fit a Gaussian ``q(zeta)`` to an unconstrained log density by ADVI.

    Args:
        log_density: ``zeta (S, K) -> (S,)``, the log joint plus log-Jacobian.
        init: ``(K,)`` initial variational mean (scale starts at the identity).
        family: ``"meanfield"`` or ``"fullrank"``.
        generator: source of every random draw.
        eta: step-size scale; ``None`` runs the search over ``{100, 10, 1, 0.1, 0.01}``.
        n_grad_samples: Monte-Carlo draws per gradient (the paper uses 1).
        n_elbo_samples: draws per ELBO evaluation of the stopping rule.
        max_iters: maximum iterations of the main run.
        eval_every: iterations between ELBO evaluations.
        adapt_iters: iterations per candidate ``eta`` in the search.
        tol_rel_obj: tolerance on the mean/median relative ELBO change.

    Returns:
        An :class:`ADVIResult`; ``status="failed"`` if no step size gave a finite ELBO.

    Raises:
        ValueError: bad arguments (unknown family, non-finite init, non-positive settings).
    """
    if family not in ("meanfield", "fullrank"):
        raise ValueError(f"family must be 'meanfield' or 'fullrank', got {family!r}")
    init = torch.as_tensor(init)
    if init.ndim != 1 or init.numel() == 0:
        raise ValueError(f"init must be a non-empty vector (K,), got shape {tuple(init.shape)}")
    if not torch.isfinite(init).all():
        raise ValueError("init contains NaN or infinite values")
    if (
        min(n_grad_samples, n_elbo_samples, max_iters, eval_every, adapt_iters) < 1
        or tol_rel_obj <= 0
    ):
        raise ValueError("sample counts, iteration counts and tol_rel_obj must be positive")
    init = init.to(torch.float64)
    K = init.numel()

    if eta is None:
        elbo_init = _elbo_value(
            log_density, family, init, _init_scale(family, K, init), n_elbo_samples, generator
        )
        best_eta, best = None, -math.inf
        for candidate in ETA_GRID:
            mu, scale, _, ok = _run(
                log_density, family, init, candidate, adapt_iters, n_grad_samples, generator
            )
            value = (
                _elbo_value(log_density, family, mu, scale, n_elbo_samples, generator)
                if ok
                else -math.inf
            )
            if not math.isfinite(value):
                continue
            if value < best and best > elbo_init:
                break
            if value > best:
                best, best_eta = value, candidate
        if best_eta is None:
            return ADVIResult(
                family,
                init,
                torch.diag(torch.ones_like(init)),
                math.nan,
                math.nan,
                0,
                False,
                "failed",
            )
        eta = best_eta

    history: list[tuple[int, float]] = []
    buffer: deque[float] = deque(maxlen=max(int(0.1 * max_iters / eval_every), 2))
    state = {"prev": math.nan, "status": "max_iters"}

    def on_eval(it: int, mu: Tensor, scale: Tensor) -> bool:
        value = _elbo_value(log_density, family, mu, scale, n_elbo_samples, generator)
        history.append((it, value))
        prev = state["prev"]
        state["prev"] = value
        if not (isinstance(prev, float) and math.isfinite(prev) and math.isfinite(value)):
            return False
        buffer.append(abs((value - prev) / prev))
        if statistics.fmean(buffer) < tol_rel_obj:
            state["status"] = "converged (mean)"
            return True
        if statistics.median(buffer) < tol_rel_obj:
            state["status"] = "converged (median)"
            return True
        return False

    mu, scale, iters, ok = _run(
        log_density, family, init, eta, max_iters, n_grad_samples, generator, on_eval, eval_every
    )
    status = str(state["status"]) if ok else "failed"
    elbo = _elbo_value(log_density, family, mu, scale, n_elbo_samples, generator)
    if family == "meanfield":
        L = torch.diag(scale.exp())
    else:  # flip column signs so the factor has a positive diagonal (same L L^T)
        L = torch.tril(scale)
        L = L * torch.where(torch.diagonal(L) < 0, -1.0, 1.0).to(L.dtype)
    return ADVIResult(
        family, mu, L, elbo, float(eta), iters, status.startswith("converged"), status, history
    )
