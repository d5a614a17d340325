"""Type-2 maximum likelihood and MAP for many (dataset, kernel) pairs at once.

Settings of the paper (Bitzer et al. 2023, Appendix A):

* ``GP-ML``: Adam, learning rate 0.1, at most 150 steps with early stopping on
  convergence; every kernel parameter starts at 1.0 and the noise standard
  deviation at 0.2.
* ``GP-ML (multi-start)``: 10 restarts drawn from the parameter priors; the
  restart with the best final objective wins.
* ``GP-ML (L-BFGS)``: ``torch.optim.LBFGS`` with a strong-Wolfe line search,
  one pair at a time (see :mod:`amorgp.diff_linalg.optim` for why).
* ``MAP``: any of the above with the log prior of the parameter specs added to
  the objective (paper Fig. 11).

The optimiser moves the raw values of the shared transform
(``theta = floor + softplus(raw)``, :mod:`amorgp.kernel_grammar.transforms`) by default, as
the paper's GPyTorch fits do; ``space="log"`` moves ``z = log(theta - floor)`` instead.
The objective and its optima are the same; in log space a step changes a lengthscale or a
period by a factor rather than by an amount, which suits warm starts whose parameters
are off by a factor (refinement of the amortizer's prediction runs there).

Adam runs on the whole padded batch (pairs x restarts) with one kernel
evaluation and one batched Cholesky per step; each element stops on its own.
A restart whose Cholesky fails or whose objective becomes non-finite is marked
failed and keeps its last finite iterate; a pair fails only if every restart
failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from amorgp.baselines.gp import (
    constrain,
    initial_raw,
    log_marginal_likelihood,
    log_of_raw,
    log_prior,
    prior_raw,
    raw_of_log,
    slot_kind,
    unconstrain,
)
from amorgp.diff_linalg.optim import batched_adam, lbfgs
from amorgp.lazy_kernels import PaddedBatch

__all__ = ["BatchFit", "Type2MLSettings", "fit_type2ml_batch"]

Optimizer = Literal["adam", "lbfgs"]
Space = Literal["softplus", "log"]


@dataclass(frozen=True)
class Type2MLSettings:
    """Optimiser settings (defaults: the paper's GP-ML).

    Attributes:
        optimizer: ``"adam"`` (batched) or ``"lbfgs"`` (per pair, strong Wolfe).
        map: add the log prior (MAP instead of Type-2 ML).
        restarts: number of starts per pair.
        init: ``"default"`` (parameters 1.0, noise std 0.2) or ``"prior"`` (drawn);
            with ``restarts > 1`` and ``"default"`` the first start is the default
            one and the others are drawn from the priors.
        lr: Adam step size.
        max_iters: maximum Adam steps or L-BFGS iterations.
        max_evals: L-BFGS only: maximum objective evaluations per start, line searches
            included (``None``: ``torch.optim.LBFGS``'s default ``max_iters * 5 // 4``).
        rtol: relative objective change of the Adam convergence test.
        patience: consecutive small changes needed to stop Adam.
        space: the variables the optimiser moves: ``"softplus"`` (the transform's raw
            values, the paper's) or ``"log"`` (``log(theta - floor)``); see the module
            docstring.
    """

    optimizer: Optimizer = "adam"
    map: bool = False
    restarts: int = 1
    init: Literal["default", "prior"] = "default"
    lr: float = 0.1
    max_iters: int = 150
    max_evals: int | None = None
    rtol: float = 1e-4
    patience: int = 5
    space: Space = "softplus"

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "lbfgs"):
            raise ValueError(f"optimizer must be 'adam' or 'lbfgs', got {self.optimizer!r}")
        if self.space not in ("softplus", "log"):
            raise ValueError(f"space must be 'softplus' or 'log', got {self.space!r}")
        if self.init not in ("default", "prior"):
            raise ValueError(f"init must be 'default' or 'prior', got {self.init!r}")
        if self.max_evals is not None and self.max_evals < 1:
            raise ValueError(f"max_evals must be >= 1 or None, got {self.max_evals}")
        if self.restarts < 1 or self.max_iters < 1 or self.lr <= 0:
            raise ValueError("restarts and max_iters must be >= 1 and lr > 0")


@dataclass(frozen=True)
class BatchFit:
    """Fitted hyperparameters of ``B`` pairs.

    Attributes:
        params: ``(B, D, L, P)`` constrained kernel parameters (normalised units).
        noise: ``(B,)`` noise variances.
        log_marginal_likelihood: ``(B,)`` exact log marginal likelihood at the fit.
        objective: ``(B,)`` maximised objective (LML, or LML + log prior for MAP).
        iterations: ``(B,)`` optimiser steps of the winning restart.
        converged: ``(B,)`` the winning restart met the stopping criterion.
        failed: ``(B,)`` every restart failed.
        failed_restarts: ``(B,)`` number of failed restarts.
        time_s: wall-clock time of the whole batch fit.
    """

    params: Tensor
    noise: Tensor
    log_marginal_likelihood: Tensor
    objective: Tensor
    iterations: Tensor
    converged: Tensor
    failed: Tensor
    failed_restarts: Tensor
    time_s: float

    def status(self, b: int) -> str:
        """``"converged"``, ``"max_iters"`` or ``"failed"`` for pair ``b``."""
        if bool(self.failed[b]):
            return "failed"
        return "converged" if bool(self.converged[b]) else "max_iters"


def _objective(
    batch: PaddedBatch, map_: bool, space: Space = "softplus"
) -> Callable[[Tensor, Tensor], Tensor]:
    def f(x: Tensor, x_noise: Tensor) -> Tensor:
        raw, raw_noise = (
            (x, x_noise) if space == "softplus" else (raw_of_log(x), raw_of_log(x_noise))
        )
        params, noise = constrain(batch, raw, raw_noise)
        value = log_marginal_likelihood(batch, params, noise)
        if map_:
            value = value + log_prior(batch, params, noise)
        return -value

    return f


def _first(f: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Sequence[Tensor]], Tensor]:
    return lambda p: f(p[0], p[1])[0]


def _warm_raw(batch: PaddedBatch, init: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Unconstrained values of a given start ``(params (B, D, L, P), noise (B,))``."""
    if not isinstance(init, tuple) or len(init) != 2:
        raise ValueError("init must be a tuple (params (B, D, L, P), noise (B,))")
    params, noise = (torch.as_tensor(t).to(batch.X) for t in init)
    B = batch.batch_size
    if tuple(params.shape) != batch.param_shape or tuple(noise.shape) != (B,):
        raise ValueError(
            f"init must have params of shape {batch.param_shape} and noise of shape ({B},), "
            f"got {tuple(params.shape)} and {tuple(noise.shape)}"
        )
    _, used = slot_kind(batch)
    if not bool(torch.isfinite(params[used]).all()) or not bool(torch.isfinite(noise).all()):
        raise ValueError("init contains NaN or infinite values")
    if bool((params[used] <= 0).any()) or bool((noise <= 0).any()):
        raise ValueError("init parameters and noise variances must be positive")
    return unconstrain(batch, params, noise)


def _starts(
    batch: PaddedBatch,
    s: Type2MLSettings,
    generator: torch.Generator | None,
    init: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Unconstrained starts of the repeated batch (element ``b * restarts + i``).

    ``init`` (given for the ``B / restarts`` pairs, already repeated) replaces the
    default start.
    """
    R = s.restarts
    warm = init is not None
    if (s.init == "default" or warm) and R == 1:
        return _warm_raw(batch, init) if init is not None else initial_raw(batch)
    if generator is None:
        raise ValueError("random restarts (init='prior' or restarts > 1) need a torch.Generator")
    raw, raw_noise = prior_raw(batch, generator)
    if s.init == "default" or warm:
        d_raw, d_noise = _warm_raw(batch, init) if init is not None else initial_raw(batch)
        first = torch.arange(batch.batch_size, device=batch.device) % R == 0
        raw = torch.where(first[:, None, None, None], d_raw, raw)
        raw_noise = torch.where(first, d_noise, raw_noise)
    return raw, raw_noise


def fit_type2ml_batch(
    batch: PaddedBatch,
    settings: Type2MLSettings | None = None,
    *,
    generator: torch.Generator | None = None,
    init: tuple[Tensor, Tensor] | None = None,
) -> BatchFit:
    """Fit every (dataset, kernel) pair of ``batch`` by Type-2 ML or MAP.

    Args:
        batch: ``B`` padded pairs (normalised data).
        settings: optimiser settings (default: paper GP-ML).
        generator: random source of prior-drawn restarts.
        init: warm start ``(params (B, D, L, P), noise (B,))``: constrained kernel
            parameters in the layout of :attr:`PaddedBatch.param_shape` (unused slots
            ignored) and noise variances, normalised units.  It replaces the
            default start (``settings.init``); with ``restarts > 1`` it is the first
            start of each pair and the others are drawn from the priors.

    Returns:
        A :class:`BatchFit`.

    Raises:
        ValueError: invalid batch, settings or ``init`` (shape, non-finite or
            non-positive values), or random restarts without a generator.
    """
    s = settings or Type2MLSettings()
    batch.validate()
    t0 = time.perf_counter()
    B, R = batch.batch_size, s.restarts
    big = batch.repeat(R) if R > 1 else batch
    if init is not None:
        _warm_raw(batch, init)  # validate against the un-repeated batch
        init = (init[0].repeat_interleave(R, 0), init[1].repeat_interleave(R, 0))
    raw0, noise0 = _starts(big, s, generator, init)
    if s.space == "log":
        raw0, noise0 = log_of_raw(raw0), log_of_raw(noise0)
    if s.optimizer == "adam":
        f = _objective(big, s.map, s.space)
        res = batched_adam(
            [raw0, noise0],
            lambda p: f(p[0], p[1]),
            lr=s.lr,
            max_iters=s.max_iters,
            rtol=s.rtol,
            patience=s.patience,
        )
        raw, raw_noise = res.params
        loss, iters, conv, failed = res.loss, res.iterations, res.converged, res.failed
    else:
        raws, noises, losses, its, convs, fails = [], [], [], [], [], []
        for b in range(big.batch_size):
            one = big.select(b)
            f1 = _objective(one, s.map, s.space)
            r = lbfgs(
                [raw0[b : b + 1], noise0[b : b + 1]],
                _first(f1),
                max_iters=s.max_iters,
                max_evals=s.max_evals,
            )
            raws.append(r.params[0])
            noises.append(r.params[1])
            losses.append(r.loss)
            its.append(r.iterations)
            convs.append(r.converged)
            fails.append(r.failed)
        raw, raw_noise = torch.cat(raws), torch.cat(noises)
        dev = raw.device
        loss = torch.tensor(losses, dtype=torch.float64, device=dev)
        iters = torch.tensor(its, device=dev)
        conv = torch.tensor(convs, device=dev)
        failed = torch.tensor(fails, device=dev) | ~torch.isfinite(loss)
    if s.space == "log":
        raw, raw_noise = raw_of_log(raw), raw_of_log(raw_noise)
    with torch.no_grad():
        params, noise = constrain(big, raw, raw_noise)
        lml = log_marginal_likelihood(big, params, noise)
        obj = lml + log_prior(big, params, noise) if s.map else lml
    failed = failed | ~torch.isfinite(obj)
    score = torch.where(failed, torch.full_like(obj, -torch.inf), obj).view(B, R)
    best = score.argmax(1)
    pick = torch.arange(B, device=best.device) * R + best
    failed_r = failed.view(B, R)
    all_failed = failed_r.all(1)
    elapsed = time.perf_counter() - t0
    return BatchFit(
        params=params[pick],
        noise=noise[pick],
        log_marginal_likelihood=lml[pick],
        objective=obj[pick],
        iterations=iters[pick],
        converged=conv[pick] & ~all_failed,
        failed=all_failed,
        failed_restarts=failed_r.sum(1),
        time_s=elapsed,
    )
