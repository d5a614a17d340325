"""A better start for :class:`~amorgp.gpytorch.lean.LeanObjective`: the noise and a common
lengthscale factor searched on the model's own objective, priors included
(:meth:`LeanObjective.tune_start <amorgp.gpytorch.lean.LeanObjective.tune_start>`,
used by :class:`~amorgp.gpytorch.fit.AmortizedFit` on the network's start)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

import gpytorch.kernels as gk

__all__ = ["LENGTHSCALE_FACTORS", "NOISE_GRID", "tune_start"]

NOISE_GRID = 16
"""Noise values :meth:`LeanObjective.tune_start` scores per pass (log-spaced, from the
noise constraint's lower bound, or ``1e-6`` of the targets' variance, to that variance)."""

LENGTHSCALE_FACTORS = (0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0)
"""Common factors on every RBF/Matern lengthscale that :meth:`LeanObjective.tune_start`
scores (for kernel trees of RBF and Matern kernels, their sums, products and scales)."""


def tune_start(objective: Any, theta: np.ndarray) -> tuple[np.ndarray, float]:
    """:meth:`LeanObjective.tune_start <amorgp.gpytorch.lean.LeanObjective.tune_start>` of
    ``objective`` (a :class:`~amorgp.gpytorch.lean.LeanObjective`)."""
    best = np.asarray(theta, dtype=np.float64).copy()
    best_value = math.inf  # theta itself is the first pass's last row
    noise, scales = _tunable(objective.model, objective.noise_module, objective.params)
    passes = ([noise] if noise else []) + ([None] if scales else [])
    passes += [noise] if noise and scales else []
    lo, hi = objective.box()
    vy = max(float(objective.y.var()), 1e-12) if objective.y.numel() > 1 else 1.0
    for which in passes:
        if which is None:  # the lengthscale factor
            cands = np.repeat(best[None], len(LENGTHSCALE_FACTORS), 0)
            for off, size, constraint in scales:
                sl = slice(off, off + size)
                value = _constrained(best[sl], constraint)
                factors = np.asarray(LENGTHSCALE_FACTORS)[:, None]
                cands[:, sl] = _raw(value[None, :] * factors, constraint)
        else:
            off, constraint = which[0]
            floor = float(lo[off]) if np.isfinite(lo[off]) else 0.0
            if constraint is not None and constraint.enforced:
                floor = float(constraint.lower_bound.max())
            low = max(floor * 1.01, 1e-6 * vy)
            grid = np.exp(np.linspace(math.log(low), math.log(max(vy, 10 * low)), NOISE_GRID))
            cands = np.repeat(best[None], NOISE_GRID, 0)
            cands[:, off] = _raw(grid[:, None], constraint)[:, 0]
        cands = np.clip(cands, lo, hi)
        if not math.isfinite(best_value):
            cands = np.concatenate([cands, best[None]])
        vals = objective.values(cands)
        i = int(np.argmin(vals))
        if vals[i] < best_value:
            best, best_value = cands[i].copy(), float(vals[i])
    if not passes:
        best_value = float(objective.values(best[None])[0])
    return best, best_value


Tunable = tuple[list[tuple[int, Any]], list[tuple[int, int, Any]]]


def _tunable(model: Any, noise_module: Any, params: list[Tensor]) -> Tunable:
    """Where :meth:`LeanObjective.tune_start` searches: ``([(offset, constraint)] of the
    trainable noise (empty if none), [(offset, size, constraint)] of the trainable RBF and
    Matern lengthscales)`` in the flat raw vector."""
    offsets, off = {}, 0
    for p in params:
        offsets[id(p)] = off
        off += p.numel()
    noise: list[tuple[int, Any]] = []
    raw_noise = None if noise_module is None else noise_module.raw_noise
    if raw_noise is not None and id(raw_noise) in offsets and raw_noise.numel() == 1:
        noise.append((offsets[id(raw_noise)], noise_module.raw_noise_constraint))
    modules = [m for m in model.covar_module.modules() if isinstance(m, gk.Kernel)]
    if not all(isinstance(m, _SCALED_TREE) for m in modules):
        return noise, []  # e.g. a periodic kernel: its period and lengthscales interact
    scales = [
        (offsets[id(m.raw_lengthscale)], m.raw_lengthscale.numel(), m.raw_lengthscale_constraint)
        for m in modules
        if isinstance(m, gk.RBFKernel | gk.MaternKernel) and id(m.raw_lengthscale) in offsets
    ]
    return noise, scales


_SCALED_TREE = (
    gk.RBFKernel,
    gk.MaternKernel,
    gk.ScaleKernel,
    gk.AdditiveKernel,
    gk.ProductKernel,
)
"""Kernel modules under which :meth:`LeanObjective.tune_start` scales the lengthscales."""


def _constrained(raw: np.ndarray, constraint: Any) -> np.ndarray:
    """Values of raw parameters (the constraint's transform where it is enforced)."""
    if constraint is None or not constraint.enforced:
        return raw
    return constraint.transform(torch.from_numpy(np.asarray(raw, dtype=np.float64))).numpy()


def _raw(value: np.ndarray, constraint: Any) -> np.ndarray:
    """Raw parameters of values (the constraint's inverse transform where it is enforced)."""
    if constraint is None or not constraint.enforced:
        return value
    raw = constraint.inverse_transform(torch.from_numpy(np.asarray(value, dtype=np.float64)))
    return raw.numpy()
