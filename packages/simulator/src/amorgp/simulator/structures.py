"""Sampling dimension-wise kernel structures as padded integer tensors.

A structure of ``d`` dimensions is ``K(x, x') = prod_{i<d} sum_{j} k_{s_ij}(x_i, x'_i)``.
In a batch it is ``symbols (B, D, L)`` of vocabulary ids (``0`` = padding) with
``symbol_mask (B, D, L)``; addends of a dimension are distinct and sorted by id
(the canonical order, so equal structures have equal tensors).

The law (paper, Appendix A, with the documented deviations of
:mod:`amorgp.simulator.config`): per dimension ``L_i ~ Geometric(p_addends)``
clipped to ``min(max_addends, V)``, then ``L_i`` distinct symbols uniformly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from amorgp.simulator.config import SimulatorConfig
from amorgp.simulator.samplers import sample_geometric, sample_subsets

__all__ = [
    "NegativeDraw",
    "sample_negative_structures",
    "sample_structures",
    "structures_equal",
]


def _check_dims(n_dims: torch.Tensor, width: int, config: SimulatorConfig) -> None:
    if n_dims.ndim != 1:
        raise ValueError(f"n_dims must have shape (B,), got {tuple(n_dims.shape)}")
    if n_dims.numel() and bool((n_dims < 1).any() or (n_dims > config.d_max).any()):
        raise ValueError(f"n_dims must lie in 1..{config.d_max}")
    if n_dims.numel() and int(n_dims.max()) > width:
        raise ValueError(f"dimension width {width} < largest n_dims {int(n_dims.max())}")


def sample_structures(
    n_dims: torch.Tensor,
    config: SimulatorConfig,
    generator: torch.Generator,
    *,
    max_dims: int | None = None,
    max_addends: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one structure per batch element with the given numbers of dimensions.

    Args:
        n_dims: ``(B,)`` int, the dimension ``d`` of each element (``1..d_max``).
        config: the simulator configuration (vocabulary, addend law).
        generator: the random source.
        max_dims: ``D`` of the output (default ``max(n_dims)``).
        max_addends: ``L`` of the output (default: the largest drawn count).

    Returns:
        ``symbols (B, D, L)`` int64 and ``symbol_mask (B, D, L)`` bool; dimensions
        ``>= n_dims[b]`` are all padding.
    """
    n_dims = n_dims.to(device=generator.device, dtype=torch.int64)
    width = int(n_dims.max()) if max_dims is None and n_dims.numel() else (max_dims or 0)
    _check_dims(n_dims, width, config)
    counts = sample_geometric(config.p_addends, (n_dims.numel(), width), generator)
    counts = counts.clamp_max(config.addend_cap)
    dim_mask = torch.arange(width, device=n_dims.device) < n_dims[:, None]
    counts = torch.where(dim_mask, counts, 0)
    return sample_subsets(counts, len(config.vocabulary), generator, width=max_addends)


def structures_equal(symbols_a: torch.Tensor, symbols_b: torch.Tensor) -> torch.Tensor:
    """Element-wise equality of canonical (sorted, zero-padded) structures.

    The two tensors may differ in their ``L`` width (padding is ignored).

    Returns:
        ``(B,)`` bool.
    """
    width = max(symbols_a.shape[-1], symbols_b.shape[-1])
    a = torch.nn.functional.pad(symbols_a, (0, width - symbols_a.shape[-1]))
    b = torch.nn.functional.pad(symbols_b, (0, width - symbols_b.shape[-1]))
    if a.shape != b.shape:
        raise ValueError(f"structure batches differ in shape: {a.shape} vs {b.shape}")
    return (a == b).flatten(1).all(dim=1)


@dataclass(frozen=True)
class NegativeDraw:
    """Result of :func:`sample_negative_structures`.

    Attributes:
        symbols: ``(B, D, L)`` structures presented with the data.
        symbol_mask: ``(B, D, L)`` bool.
        is_positive: ``(B,)`` bool, True where ``symbols`` is the data's structure.
        n_fallback: requested negatives that stayed positive (all candidates collided).
    """

    symbols: torch.Tensor
    symbol_mask: torch.Tensor
    is_positive: torch.Tensor
    n_fallback: int


def sample_negative_structures(
    true_symbols: torch.Tensor,
    n_dims: torch.Tensor,
    want_positive: torch.Tensor,
    config: SimulatorConfig,
    generator: torch.Generator,
    *,
    max_addends: int | None = None,
) -> NegativeDraw:
    """The structures presented with the data: the true one or a distinct other one.

    For each element with ``want_positive[b] = False``, a structure is drawn from
    the same law with the same ``d``, conditioned on differing from
    ``true_symbols[b]``: ``config.negative_rounds`` candidates are drawn for all
    elements at once and the first differing one is taken (exact rejection).  An
    element whose candidates all coincide with the truth (probability about
    ``q^rounds`` for a collision probability ``q``) keeps the true structure, is
    reported positive and counted in ``n_fallback``.

    Args:
        true_symbols: ``(B, D, L)`` canonical structures of the data.
        n_dims: ``(B,)`` dimension of each element.
        want_positive: ``(B,)`` bool, the requested pair type.
        config: the simulator configuration.
        generator: the random source.
        max_addends: ``L`` of the output (default: the largest addend count).

    Returns:
        :class:`NegativeDraw`.
    """
    batch, width = true_symbols.shape[0], true_symbols.shape[1]
    rounds = config.negative_rounds
    tiled = n_dims.repeat(rounds)
    cand, _ = sample_structures(tiled, config, generator, max_dims=width)
    lw = max(cand.shape[-1], true_symbols.shape[-1])
    cand = torch.nn.functional.pad(cand, (0, lw - cand.shape[-1]))
    truth = torch.nn.functional.pad(true_symbols, (0, lw - true_symbols.shape[-1]))
    cand = cand.reshape(rounds, batch, width, lw)
    differs = ~structures_equal(cand.flatten(0, 1), truth.repeat(rounds, 1, 1)).reshape(
        rounds, batch
    )
    found = differs.any(dim=0)
    first = differs.to(torch.int8).argmax(dim=0)
    chosen = cand[first, torch.arange(batch, device=cand.device)]
    use_negative = (~want_positive) & found
    symbols = torch.where(use_negative[:, None, None], chosen, truth)
    n_fallback = int(((~want_positive) & ~found).sum())
    largest = int((symbols > 0).sum(dim=-1).max()) if symbols.numel() else 0
    if max_addends is None:
        max_addends = largest
    if max_addends < largest:
        raise ValueError(f"max_addends {max_addends} < largest addend count {largest}")
    symbols = torch.nn.functional.pad(symbols, (0, max(0, max_addends - lw)))[..., :max_addends]
    return NegativeDraw(symbols, symbols > 0, ~use_negative, n_fallback)
