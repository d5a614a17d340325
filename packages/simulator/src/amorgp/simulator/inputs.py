"""Input laws beyond the paper's uniform inputs: clusters, discrete levels, skew, mixtures.

The paper draws ``X ~ U[0, 1]^d``.  Real inputs are rarely uniform: designs have a
few discrete levels (and duplicated rows), measurements cluster, and marginals are
skewed.  These laws draw such inputs, column by column, vectorised over the batch
(no loop over datasets, dimensions or points):

============  ===================================================================
law           one column of one dataset
============  ===================================================================
``uniform``   ``x ~ U[0, 1]`` (the paper's law)
``clusters``  ``k ~ U{2..5}`` centres ``c_j ~ U[0, 1]``, widths ``s_j ~ U[0.01, 0.1]``;
              each point picks a centre uniformly, ``x = c_j + s_j z``, ``z ~ N(0, 1)``
``levels``    ``k ~ U{2..6}`` levels ``l_j ~ U[0, 1]``; each point picks one level
              (discrete designs, duplicated inputs)
``skewed``    ``x = u^a`` with ``log a ~ U[-log 4, log 4]``, ``u ~ U[0, 1]``, reflected
              (``1 - x``) with probability 1/2
``heavy``     ``x = z / sqrt(w / nu)``, Student-t with ``nu = 1.5`` degrees of freedom
              (``z ~ N(0, 1)``, ``w ~ Chi2(nu)``, drawn as ``2 Gamma(nu / 2)``): a few
              far points and most points bunched after the min-max scaling
============  ===================================================================

``mixed`` draws one of the first four laws per column, uniformly; ``realistic`` one of
all five (the ``realdata`` prior's law, :mod:`amorgp.simulator.realdata`); ``mixed-half`` gives a dataset
uniform inputs in every column with probability 1/2 and ``mixed`` columns otherwise (half
of the datasets are the paper's).  Every law other than
``uniform`` is followed by the normalisation real data gets (:mod:`amorgp.lazy_kernels`
data contract): each column min-max scaled to ``[0, 1]`` over the dataset's training
points (test points with the same map; a constant column maps to 0.5), so the
network sees simulated inputs exactly as it will see normalised real ones.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["INPUT_LAWS", "sample_input_columns"]

INPUT_LAWS: tuple[str, ...] = (
    "uniform",
    "clusters",
    "levels",
    "skewed",
    "heavy",
    "mixed",
    "mixed-half",
    "realistic",
)
_BASE = ("uniform", "clusters", "levels", "skewed")
_ALL = (*_BASE, "heavy")
_HEAVY_DOF = 1.5
_MAX_CLUSTERS, _MAX_LEVELS = 5, 6


def _pick(table: Tensor, count: Tensor, u: Tensor) -> Tensor:
    """Entry ``floor(u * count)`` of ``table (B, C, K)`` per point: ``u (B, T, C)`` -> ``(B, T, C)``."""
    idx = (u * count[:, None, :]).long().clamp_max(table.shape[-1] - 1)
    expanded = table[:, None, :, :].expand(-1, u.shape[1], -1, -1)
    return torch.gather(expanded, 3, idx[..., None]).squeeze(-1)


def _minmax(X: Tensor, train: Tensor) -> Tensor:
    """Each column of ``X (B, T, C)`` mapped to [0, 1] by its range over ``train (B, T)`` points."""
    inf = torch.tensor(math.inf, dtype=X.dtype, device=X.device)
    lo = torch.where(train[..., None], X, inf).amin(1, keepdim=True)
    hi = torch.where(train[..., None], X, -inf).amax(1, keepdim=True)
    span = hi - lo
    const = ~(span > 0)
    scaled = (X - lo) / torch.where(const, torch.ones_like(span), span)
    return torch.where(const, torch.full_like(X, 0.5), scaled)


def sample_input_columns(
    law: str, shape: tuple[int, int, int], train: Tensor, generator: torch.Generator
) -> Tensor:
    """Draw inputs ``(B, T, C)`` of law ``law`` (see the module docstring).

    Args:
        law: one of :data:`INPUT_LAWS` other than ``"uniform"`` (which the simulator
            draws itself, to keep the paper's random stream).
        shape: ``(B, T, C)`` datasets, points (training and test), columns.
        train: ``(B, T)`` bool, the training points the min-max scaling is fitted on.
        generator: the random source (its device is used).

    Returns:
        float64 inputs in ``[0, 1]`` on the training points (test points may fall outside).

    Raises:
        ValueError: an unknown law.
    """
    if law not in INPUT_LAWS or law == "uniform":
        raise ValueError(f"unknown input law {law!r}; choose one of {', '.join(INPUT_LAWS[1:])}")
    B, T, C = shape
    dev, f64 = generator.device, torch.float64

    def rand(*size: int) -> Tensor:
        return torch.rand(size, generator=generator, dtype=f64, device=dev)

    u_pick, u_base = rand(B, T, C), rand(B, T, C)
    z = torch.randn((B, T, C), generator=generator, dtype=f64, device=dev)
    # clusters
    k_c = 2 + (rand(B, C) * (_MAX_CLUSTERS - 1)).floor()
    centres, widths = rand(B, C, _MAX_CLUSTERS), 0.01 + 0.09 * rand(B, C, _MAX_CLUSTERS)
    clusters = _pick(centres, k_c, u_pick) + _pick(widths, k_c, u_pick) * z
    # levels
    k_l = 2 + (rand(B, C) * (_MAX_LEVELS - 1)).floor()
    levels = _pick(rand(B, C, _MAX_LEVELS), k_l, u_pick)
    # skewed marginals
    a = torch.exp((2 * rand(B, C) - 1) * math.log(4.0))[:, None, :]
    skewed = u_base**a
    skewed = torch.where(rand(B, C)[:, None, :] < 0.5, 1.0 - skewed, skewed)
    laws = [u_base, clusters, levels, skewed]
    if law in ("heavy", "realistic"):  # drawn last: the other laws keep their streams
        from amorgp.simulator.samplers import sample_gamma

        half = torch.full((B, T, C), _HEAVY_DOF / 2, dtype=f64, device=dev)
        w = 2.0 * sample_gamma(half, torch.ones_like(half), generator).values
        z_t = torch.randn((B, T, C), generator=generator, dtype=f64, device=dev)
        laws.append(z_t / (w / _HEAVY_DOF).sqrt().clamp_min(1e-12))
    candidates = torch.stack(laws)  # (4 or 5, B, T, C)
    if law == "realistic":
        which = (rand(B, C) * len(_ALL)).long().clamp_max(len(_ALL) - 1)
    elif law in ("mixed", "mixed-half"):
        which = (rand(B, C) * len(_BASE)).long().clamp_max(len(_BASE) - 1)
        if law == "mixed-half":  # uniform (law 0) in every column of half the datasets
            which = torch.where(rand(B)[:, None] < 0.5, torch.zeros_like(which), which)
    else:
        which = torch.full((B, C), _ALL.index(law), dtype=torch.long, device=dev)
    X = torch.gather(candidates, 0, which[None, :, None, :].expand(1, B, T, C)).squeeze(0)
    return _minmax(X, train)
