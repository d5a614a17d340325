"""Reusable checks and fixtures for kernel evaluators (a conformance suite).

Everything here compares a torch evaluator against an independent oracle: the
numpy float64 reference formulas of :mod:`amorgp.kernel_grammar.registry`
(``BaseSymbol.reference``), dense linear algebra or finite differences.  Other
packages (and new base symbols) reuse these checks, so a symbol is tested the day
it is registered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from amorgp.kernel_grammar import EXTENDED_VOCABULARY, BaseSymbol, Vocabulary, base_symbol

__all__ = [
    "DimWiseBatch",
    "all_base_symbols",
    "random_dimwise_batch",
    "random_symbol_params",
    "reference_diag_dimwise",
    "reference_kernel_dimwise",
]


def all_base_symbols() -> tuple[BaseSymbol, ...]:
    """Every registered base symbol: all elementary kernels and all their 2-gram products."""
    return tuple(EXTENDED_VOCABULARY)


def random_symbol_params(
    symbol: BaseSymbol | str, generator: torch.Generator, low: float = 0.3, high: float = 1.5
) -> dict[str, float]:
    """Positive parameters of ``symbol`` drawn uniformly from ``[low, high]``."""
    sym = base_symbol(symbol) if isinstance(symbol, str) else symbol
    vals = low + (high - low) * torch.rand(
        len(sym.params), generator=generator, dtype=torch.float64
    )
    return dict(zip(sym.param_names, vals.tolist()))


@dataclass
class DimWiseBatch:
    """A padded batch (ARCHITECTURE §3) of inputs and dimension-wise structures."""

    X1: Tensor
    X2: Tensor
    symbols: Tensor
    symbol_mask: Tensor
    params: Tensor
    dim_mask: Tensor
    vocab: Vocabulary

    def args(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Vocabulary, Tensor]:
        """Positional arguments of ``kernel_matrix_dimwise``."""
        return (
            self.X1,
            self.X2,
            self.symbols,
            self.symbol_mask,
            self.params,
            self.vocab,
            self.dim_mask,
        )


def random_dimwise_batch(
    vocab: Vocabulary,
    generator: torch.Generator,
    *,
    batch: int = 4,
    n: int = 6,
    m: int = 5,
    dims: int = 3,
    addends: int = 3,
    dtype: torch.dtype = torch.float64,
    x_low: float = 0.0,
    x_high: float = 1.0,
) -> DimWiseBatch:
    """A random padded batch with ragged dimensions and addends.

    Every batch element has at least one active dimension and every active
    dimension at least one addend; padded ids are 0 and padded parameter slots
    hold garbage (large values) to expose leaks.
    """
    g = generator
    X1 = x_low + (x_high - x_low) * torch.rand(batch, n, dims, generator=g, dtype=dtype)
    X2 = x_low + (x_high - x_low) * torch.rand(batch, m, dims, generator=g, dtype=dtype)
    dim_mask = torch.rand(batch, dims, generator=g) < 0.7
    dim_mask[:, 0] = True
    symbol_mask = torch.rand(batch, dims, addends, generator=g) < 0.6
    symbol_mask[:, :, 0] = True
    symbol_mask &= dim_mask[..., None]
    symbols = torch.randint(1, len(vocab) + 1, (batch, dims, addends), generator=g)
    symbols = torch.where(symbol_mask, symbols, torch.zeros_like(symbols))
    params = 0.3 + 1.2 * torch.rand(
        batch, dims, addends, vocab.max_params, generator=g, dtype=dtype
    )
    _, slot_mask = vocab.param_kind_table()
    used = torch.as_tensor(slot_mask)[symbols] & symbol_mask[..., None]
    params = torch.where(used, params, torch.full_like(params, 1e3))
    return DimWiseBatch(X1, X2, symbols, symbol_mask, params, dim_mask, vocab)


def _reference(batch: DimWiseBatch, diag: bool) -> np.ndarray:
    X1 = batch.X1.detach().double().numpy()
    X2 = X1 if diag else batch.X2.detach().double().numpy()
    B, N, D = X1.shape
    M = X2.shape[1]
    out = np.ones((B, N, M))
    for b in range(B):
        for d in range(D):
            if not batch.dim_mask[b, d]:
                continue
            acc = np.zeros((N, M))
            for a in range(batch.symbols.shape[2]):
                if not batch.symbol_mask[b, d, a]:
                    continue
                sym = batch.vocab.symbol(int(batch.symbols[b, d, a]))
                vals = batch.params[b, d, a].detach().double().tolist()
                acc += sym.reference(X1[b, :, d], X2[b, :, d], dict(zip(sym.param_names, vals)))
            out[b] *= acc
    return np.diagonal(out, axis1=1, axis2=2).copy() if diag else out


def reference_kernel_dimwise(batch: DimWiseBatch) -> np.ndarray:
    """Dense numpy float64 oracle ``(B, N, M)`` of a padded batch, looping over everything."""
    return _reference(batch, diag=False)


def reference_diag_dimwise(batch: DimWiseBatch) -> np.ndarray:
    """Numpy float64 oracle ``(B, N)`` of the diagonals ``k_b(X1[b, n], X1[b, n])``."""
    return _reference(batch, diag=True)
