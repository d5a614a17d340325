"""Sparse variational GP regression (Hensman, Matthews & Ghahramani 2015), batched.

Whitened parameterisation: inducing values ``u = L_mm v`` with
``K_mm = L_mm L_mm^T`` and ``q(v) = N(m, S S^T)``, ``S`` lower triangular.  With
``A = L_mm^{-1} K_mn`` the marginals of ``q(f_n)`` are

.. math::

    \\mu_n = A_{:n}^T m, \\qquad
    s_n^2 = k_{nn} - \\|A_{:n}\\|^2 + \\|S^T A_{:n}\\|^2 ,

and the evidence lower bound (full batch) is

.. math::

    \\mathrm{ELBO} = \\sum_n \\Big[-\\tfrac12 \\log(2\\pi\\sigma^2)
        - \\frac{(y_n - \\mu_n)^2 + s_n^2}{2\\sigma^2}\\Big]
        - \\tfrac12\\big(\\|S\\|_F^2 + \\|m\\|^2 - M - \\log\\det(S S^T)\\big).

With inducing points equal to the training inputs and the optimal ``q`` the
bound equals the exact log marginal likelihood and the predictive equals the
exact posterior (tested).

Settings (paper Appendix A): ``I = ceil(0.5 n)`` inducing points initialised by
k-means (or a random subset), Adam with learning rate 0.03 for at most 500
full-batch iterations with early stopping, kernel parameters starting at 1.0
and the noise standard deviation at 0.2.  Kernel parameters, noise, inducing
inputs and the variational parameters are all learned.  Every pair of a
padded batch has its own number of inducing points (padded inducing points
form an identity block of ``K_mm``, have ``m = 0``, ``S = I`` and contribute
nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from amorgp.baselines.gp import constrain, initial_raw
from amorgp.diff_linalg import robust_cholesky
from amorgp.diff_linalg.optim import batched_adam
from amorgp.lazy_kernels import PaddedBatch, kernel_diag_dimwise, kernel_matrix_dimwise

__all__ = [
    "SVGPFit",
    "SVGPSettings",
    "fit_svgp_batch",
    "inducing_init",
    "svgp_elbo",
    "svgp_predictive",
]

_LOG2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class SVGPSettings:
    """SVGP settings (defaults: the paper's).

    Attributes:
        inducing_fraction: ``I = ceil(fraction * n)`` inducing points per dataset.
        init: ``"kmeans"`` (Lloyd's algorithm from a random subset) or ``"random"`` subset.
        kmeans_iters: Lloyd iterations.
        learn_inducing: optimise the inducing inputs.
        lr: Adam step size.
        max_iters: maximum Adam steps.
        rtol: relative ELBO change of the early-stopping test.
        patience: consecutive small changes needed to stop.
    """

    inducing_fraction: float = 0.5
    init: Literal["kmeans", "random"] = "kmeans"
    kmeans_iters: int = 20
    learn_inducing: bool = True
    lr: float = 0.03
    max_iters: int = 500
    rtol: float = 1e-5
    patience: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.inducing_fraction <= 1:
            raise ValueError(f"inducing_fraction must be in (0, 1], got {self.inducing_fraction}")
        if self.init not in ("kmeans", "random"):
            raise ValueError(f"init must be 'kmeans' or 'random', got {self.init!r}")


@dataclass(frozen=True)
class SVGPFit:
    """Fitted SVGPs of ``B`` pairs.

    Attributes:
        params: ``(B, D, L, P)`` kernel parameters.
        noise: ``(B,)`` noise variances.
        Z: ``(B, M, D)`` inducing inputs; ``z_mask (B, M)`` marks the real ones.
        m: ``(B, M)`` whitened variational mean.
        S: ``(B, M, M)`` lower-triangular whitened variational factor (padding: identity).
        elbo: ``(B,)`` final ELBO.
        iterations, converged, failed: per pair.
        time_s: wall-clock time of the whole batch fit.
    """

    params: Tensor
    noise: Tensor
    Z: Tensor
    z_mask: Tensor
    m: Tensor
    S: Tensor
    elbo: Tensor
    iterations: Tensor
    converged: Tensor
    failed: Tensor
    time_s: float

    def status(self, b: int) -> str:
        if bool(self.failed[b]):
            return "failed"
        return "converged" if bool(self.converged[b]) else "max_iters"


def inducing_init(
    batch: PaddedBatch,
    fraction: float,
    generator: torch.Generator,
    method: Literal["kmeans", "random"] = "kmeans",
    kmeans_iters: int = 20,
) -> tuple[Tensor, Tensor]:
    """Initial inducing inputs ``Z (B, M, D)`` and mask ``(B, M)``, ``M_b = ceil(fraction n_b)``.

    ``"random"`` picks a uniformly random subset of each dataset's points; ``"kmeans"``
    starts from that subset and runs Lloyd's algorithm (empty clusters keep their centre).
    """
    n = batch.point_mask.sum(1)
    counts = torch.ceil(fraction * n.to(torch.float64)).long().clamp_min(1)
    M = int(counts.max())
    keys = torch.rand(batch.point_mask.shape, generator=generator, dtype=torch.float64)
    keys = torch.where(batch.point_mask, keys, torch.full_like(keys, 2.0))
    order = keys.argsort(1)[:, :M]
    Z = torch.gather(batch.X, 1, order[..., None].expand(-1, -1, batch.X.shape[2]))
    z_mask = torch.arange(M)[None, :] < counts[:, None]
    if method == "kmeans":
        pm = batch.point_mask.to(batch.X.dtype)
        for _ in range(kmeans_iters):
            d2 = ((batch.X[:, None, :, :] - Z[:, :, None, :]) ** 2).sum(-1)  # (B, M, N)
            d2 = torch.where(z_mask[:, :, None], d2, torch.full_like(d2, torch.inf))
            assign = torch.nn.functional.one_hot(d2.argmin(1), M).to(batch.X.dtype)  # (B, N, M)
            assign = assign * pm[..., None]
            size = assign.sum(1)  # (B, M)
            centre = assign.transpose(1, 2) @ batch.X / size.clamp_min(1.0)[..., None]
            Z = torch.where((size > 0)[..., None], centre, Z)
    Z = torch.where(z_mask[..., None], Z, torch.zeros_like(Z))
    return Z, z_mask


def _factor(S_raw: Tensor, z_mask: Tensor) -> Tensor:
    zm = z_mask.to(S_raw.dtype)
    return torch.tril(S_raw) * (zm[:, :, None] * zm[:, None, :]) + torch.diag_embed(1.0 - zm)


def _whitened_projection(
    batch: PaddedBatch, params: Tensor, Z: Tensor, z_mask: Tensor, X: Tensor, x_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """``(A = L_mm^{-1} K_mx (B, M, N), failed (B,))`` with padding masked out."""
    zm = z_mask.to(Z.dtype)
    kw = dict(
        symbols=batch.symbols, symbol_mask=batch.symbol_mask, params=params, vocab=batch.vocab
    )
    Kmm = kernel_matrix_dimwise(Z, Z, dim_mask=batch.dim_mask, validate=False, **kw)  # type: ignore[arg-type]
    Kmm = Kmm * (zm[:, :, None] * zm[:, None, :]) + torch.diag_embed(1.0 - zm)
    chol = robust_cholesky(Kmm)
    Kmx = kernel_matrix_dimwise(Z, X, dim_mask=batch.dim_mask, validate=False, **kw)  # type: ignore[arg-type]
    Kmx = Kmx * (zm[:, :, None] * x_mask.to(Z.dtype)[:, None, :])
    return torch.linalg.solve_triangular(chol.L, Kmx, upper=False), chol.failed


def _marginals(
    batch: PaddedBatch,
    params: Tensor,
    Z: Tensor,
    z_mask: Tensor,
    m: Tensor,
    S: Tensor,
    X: Tensor,
    x_mask: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    A, failed = _whitened_projection(batch, params, Z, z_mask, X, x_mask)
    mean = (A * m[:, :, None]).sum(1)
    kxx = kernel_diag_dimwise(
        X, batch.symbols, batch.symbol_mask, params, batch.vocab, batch.dim_mask, validate=False
    )
    SA = S.transpose(1, 2) @ A
    var = (kxx - (A * A).sum(1) + (SA * SA).sum(1)).clamp_min(0.0)
    return mean, var, failed


def svgp_elbo(
    batch: PaddedBatch,
    params: Tensor,
    noise: Tensor,
    Z: Tensor,
    z_mask: Tensor,
    m: Tensor,
    S_raw: Tensor,
) -> Tensor:
    """``(B,)`` SVGP evidence lower bound (module docstring); NaN where ``K_mm`` fails.

    Args:
        batch: the training data and structures.
        params: ``(B, D, L, P)`` kernel parameters; ``noise (B,)`` variances.
        Z: ``(B, M, D)`` inducing inputs, ``z_mask (B, M)``.
        m: ``(B, M)`` whitened mean; ``S_raw (B, M, M)`` (its lower triangle is ``S``).
    """
    zm = z_mask.to(m.dtype)
    m = m * zm
    S = _factor(S_raw, z_mask)
    mean, var, failed = _marginals(batch, params, Z, z_mask, m, S, batch.X, batch.point_mask)
    pm = batch.point_mask.to(m.dtype)
    s2 = noise[:, None]
    ell = -0.5 * (_LOG2PI + torch.log(s2)) - ((batch.y - mean) ** 2 + var) / (2.0 * s2)
    ell = (ell * pm).sum(1)
    diag = torch.diagonal(S, dim1=1, dim2=2)
    kl = 0.5 * ((S * S).sum((1, 2)) + (m * m).sum(1) - S.shape[1] - 2.0 * diag.abs().log().sum(1))
    value = ell - kl
    return torch.where(failed, torch.full_like(value, float("nan")), value)


def svgp_predictive(
    fit: SVGPFit, batch: PaddedBatch, X_new: Tensor, *, include_noise: bool = True
) -> tuple[Tensor, Tensor]:
    """Predictive ``(mean (B, M'), var (B, M'))`` at ``X_new (B, M', D)`` (normalised units)."""
    S = _factor(fit.S, fit.z_mask)
    m = fit.m * fit.z_mask.to(fit.m.dtype)
    ones = torch.ones(X_new.shape[:2], dtype=torch.bool, device=X_new.device)
    mean, var, _ = _marginals(batch, fit.params, fit.Z, fit.z_mask, m, S, X_new, ones)
    if include_noise:
        var = var + fit.noise[:, None]
    return mean, var


def fit_svgp_batch(
    batch: PaddedBatch, settings: SVGPSettings | None = None, *, generator: torch.Generator
) -> SVGPFit:
    """Fit an SVGP to every (dataset, kernel) pair of ``batch`` at once (Adam, full batch).

    Raises:
        ValueError: invalid batch or settings.
    """
    s = settings or SVGPSettings()
    batch.validate()
    t0 = time.perf_counter()
    Z0, z_mask = inducing_init(batch, s.inducing_fraction, generator, s.init, s.kmeans_iters)
    raw0, noise0 = initial_raw(batch)
    B, M = z_mask.shape
    m0 = torch.zeros(B, M, dtype=torch.float64)
    S0 = torch.eye(M, dtype=torch.float64).expand(B, M, M).clone()

    def objective(p: Sequence[Tensor]) -> Tensor:
        raw, raw_noise, m, S_raw = p[:4]
        Z = p[4] if s.learn_inducing else Z0
        params, noise = constrain(batch, raw, raw_noise)
        return -svgp_elbo(batch, params, noise, Z, z_mask, m, S_raw)

    start = [raw0, noise0, m0, S0] + ([Z0] if s.learn_inducing else [])
    res = batched_adam(
        start,
        objective,
        lr=s.lr,
        max_iters=s.max_iters,
        rtol=s.rtol,
        patience=s.patience,
    )
    raw, raw_noise, m, S_raw = res.params[:4]
    Z = res.params[4] if s.learn_inducing else Z0
    with torch.no_grad():
        params, noise = constrain(batch, raw, raw_noise)
        elbo = svgp_elbo(batch, params, noise, Z, z_mask, m, S_raw)
    failed = res.failed | ~torch.isfinite(elbo)
    return SVGPFit(
        params,
        noise,
        Z,
        z_mask,
        m * z_mask.to(m.dtype),
        _factor(S_raw, z_mask),
        elbo,
        res.iterations,
        res.converged & ~failed,
        failed,
        time.perf_counter() - t0,
    )
