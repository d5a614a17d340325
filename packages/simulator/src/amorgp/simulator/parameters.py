"""Kernel parameters and observation noise drawn from the priors of kernel-grammar.

The priors are declared once, next to the parameter specs
(``base_symbol(name).params[i].prior`` and ``NOISE.prior``).  For a vocabulary
of ``V`` symbols with at most ``P`` parameters they are gathered into per-slot
tables ``shape (V + 1, P)`` and ``rate (V + 1, P)`` (every prior as a Gamma law,
``Exponential(b) = Gamma(1, b)``; row 0 is padding), so that a whole batch
``params (B, D, L, P)`` is one vectorised Gamma draw indexed by the symbol ids.
Slot order is the symbol's parameter order (variance first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from amorgp.kernel_grammar import FLOORS, NOISE, Vocabulary
from amorgp.lazy_kernels import UNUSED_SLOT_VALUE, slot_table
from amorgp.simulator.samplers import gamma_parameters, sample_gamma, sample_prior

__all__ = ["PriorTable", "sample_noise", "sample_parameters"]

UNUSED_VALUE = UNUSED_SLOT_VALUE
"""Value written into parameter slots that a symbol does not use (and into padding)."""


@dataclass(frozen=True)
class PriorTable:
    """Per-slot Gamma priors and floors of a vocabulary.

    Attributes:
        shape: ``(V + 1, P)`` float64 Gamma shapes (1.0 where unused).
        rate: ``(V + 1, P)`` float64 Gamma rates (1.0 where unused).
        floor: ``(V + 1, P)`` float64 transform floors of the slots' kinds (0 where unused).
        slot_mask: ``(V + 1, P)`` bool, True where the symbol has that parameter.
    """

    shape: np.ndarray
    rate: np.ndarray
    floor: np.ndarray
    slot_mask: np.ndarray

    @classmethod
    def from_vocabulary(cls, vocab: Vocabulary) -> PriorTable:
        """Gather the priors of every symbol of ``vocab`` in slot order."""
        slots = slot_table(vocab)
        laws = np.array([gamma_parameters(p) for p in slots.priors], dtype=np.float64)  # (K, 2)
        mask = slots.used.numpy()
        per_slot = laws[slots.prior_index.numpy()]  # (V + 1, P, 2)
        shape = np.where(mask, per_slot[..., 0], 1.0)
        rate = np.where(mask, per_slot[..., 1], 1.0)
        return cls(shape, rate, slots.floor.numpy().copy(), mask.copy())

    def tensors(self, device: torch.device | str) -> tuple[torch.Tensor, ...]:
        """``(shape, rate, floor, slot_mask)`` as tensors on ``device``."""
        return (
            torch.as_tensor(self.shape, dtype=torch.float64, device=device),
            torch.as_tensor(self.rate, dtype=torch.float64, device=device),
            torch.as_tensor(self.floor, dtype=torch.float64, device=device),
            torch.as_tensor(self.slot_mask, device=device),
        )


def sample_parameters(
    symbols: torch.Tensor,
    symbol_mask: torch.Tensor,
    table: PriorTable,
    generator: torch.Generator,
    *,
    clamp_to_floors: bool = True,
) -> tuple[torch.Tensor, int]:
    """Draw the parameters of every addend from its symbol's priors.

    Args:
        symbols: ``(B, D, L)`` int64 vocabulary ids (0 = padding).
        symbol_mask: ``(B, D, L)`` bool.
        table: the vocabulary's :class:`PriorTable`.
        generator: the random source.
        clamp_to_floors: raise draws below their kind's transform floor to the
            floor (so that every ground truth lies in the image of
            ``kernel_grammar.positive``).

    Returns:
        ``params (B, D, L, P)`` float64 (``UNUSED_VALUE`` in unused slots and
        padding) and the number of rejected Gamma proposals.
    """
    if symbols.shape != symbol_mask.shape:
        raise ValueError(
            f"symbols {tuple(symbols.shape)} and symbol_mask {tuple(symbol_mask.shape)} differ"
        )
    shape_t, rate_t, floor_t, slot_t = table.tensors(generator.device)
    if symbols.numel() and int(symbols.max()) >= shape_t.shape[0]:
        raise ValueError(f"symbol ids must lie in 0..{shape_t.shape[0] - 1}")
    ids = torch.where(symbol_mask, symbols, 0).to(generator.device)
    used = slot_t[ids] & symbol_mask.to(generator.device)[..., None]  # (B, D, L, P)
    # draw only the used slots (most of a padded batch is padding)
    draw = sample_gamma(shape_t[ids][used], rate_t[ids][used], generator)
    drawn = draw.values
    if clamp_to_floors:
        drawn = torch.maximum(drawn, floor_t[ids][used])
    values = torch.full(used.shape, UNUSED_VALUE, dtype=torch.float64, device=used.device)
    values[used] = drawn
    return values, draw.n_rejected


def sample_noise(
    batch_size: int, generator: torch.Generator, *, clamp_to_floors: bool = True
) -> torch.Tensor:
    """Draw ``batch_size`` observation-noise variances from ``NOISE.prior`` (float64)."""
    noise = sample_prior(NOISE.prior, (batch_size,), generator).values
    if clamp_to_floors:
        noise = noise.clamp_min(FLOORS[NOISE.kind])
    return noise
