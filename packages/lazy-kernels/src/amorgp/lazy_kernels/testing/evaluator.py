"""Conformance suite of the batched evaluator (padded batches) and its fixtures.

Every check compares an evaluator with the signature of ``kernel_matrix_dimwise``
against an independent oracle: the numpy float64 reference formulas of
:mod:`amorgp.kernel_grammar.registry` (``BaseSymbol.reference``), dense linear algebra
or finite differences; batch-vs-loop and padding invariance are the padded-batch
contract.  Kernel operators have their own suite (:mod:`.operators`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from amorgp.kernel_grammar import ELEMENTARY, BaseSymbol, Vocabulary, base_symbol
from amorgp.lazy_kernels.dimwise import kernel_diag_dimwise, kernel_matrix_dimwise
from amorgp.lazy_kernels.testing.gpytorch_bridge import gpytorch_kernel_matrix

__all__ = [
    "CONFORMANCE_CHECKS",
    "DimWiseBatch",
    "Evaluator",
    "check_batch_equals_loop",
    "check_diag",
    "check_gpytorch",
    "check_gradients",
    "check_padding_invariance",
    "check_psd",
    "check_reference",
    "check_symmetry",
    "run_conformance",
    "all_base_symbols",
    "random_dimwise_batch",
    "random_symbol_params",
    "reference_diag_dimwise",
    "reference_kernel_dimwise",
]


def all_base_symbols() -> tuple[BaseSymbol, ...]:
    """Every registered base symbol: all elementary kernels of the registry (at the time of
    the call) and all their 2-gram products, so a newly registered kernel is tested too."""
    return tuple(Vocabulary.with_products(tuple(ELEMENTARY), "registered"))


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
    """A padded batch (``docs/architecture.md`` §3) of inputs and dimension-wise structures."""

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


# --------------------------------------------------------------------------- conformance suite

Evaluator = Callable[..., Tensor]
"""Signature of ``kernel_matrix_dimwise``: ``(X1, X2, symbols, symbol_mask, params, vocab,
dim_mask) -> (B, N, M)``; any backend with this signature can run the suite."""


def _symbol_batch(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    batch: int = 3,
    n: int = 8,
    m: int | None = None,
    dims: int = 2,
    dtype: torch.dtype = torch.float64,
) -> DimWiseBatch:
    """``symbol`` on every dimension (one addend), random inputs and parameters per element."""
    sym = base_symbol(symbol) if isinstance(symbol, str) else symbol
    vocab = Vocabulary((sym.name,), "single")
    g = generator
    X1 = torch.rand(batch, n, dims, generator=g, dtype=dtype)
    X2 = X1 if m is None else torch.rand(batch, m, dims, generator=g, dtype=dtype)
    symbols = torch.ones(batch, dims, 1, dtype=torch.int64)
    mask = torch.ones(batch, dims, 1, dtype=torch.bool)
    params = 0.3 + torch.rand(batch, dims, 1, len(sym.params), generator=g, dtype=dtype)
    return DimWiseBatch(X1, X2, symbols, mask, params, mask[..., 0].clone(), vocab)


def check_reference(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """Values equal the numpy float64 reference formula of the registry (rtol 1e-11)."""
    b = _symbol_batch(symbol, generator, m=5)
    K = evaluator(*b.args())
    np.testing.assert_allclose(
        K.detach().numpy(), reference_kernel_dimwise(b), rtol=1e-11, atol=1e-12
    )


def check_symmetry(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """``K(X, X)`` is symmetric to rounding."""
    b = _symbol_batch(symbol, generator)
    K = evaluator(*b.args()).detach()
    torch.testing.assert_close(K, K.transpose(1, 2), rtol=1e-13, atol=1e-14)


def check_psd(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """``K(X, X)`` is positive semi-definite: eigenvalues >= -1e-10 * largest."""
    b = _symbol_batch(symbol, generator, n=12)
    K = evaluator(*b.args()).detach()
    eig = torch.linalg.eigvalsh(0.5 * (K + K.transpose(1, 2)))
    assert bool((eig >= -1e-10 * eig[:, -1:].abs()).all()), f"{symbol}: negative eigenvalues {eig}"


def check_diag(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """``kernel_diag_dimwise`` equals the diagonal of the matrix."""
    b = _symbol_batch(symbol, generator)
    K = evaluator(*b.args()).detach()
    d = kernel_diag_dimwise(b.X1, b.symbols, b.symbol_mask, b.params, b.vocab, b.dim_mask)
    torch.testing.assert_close(d, torch.diagonal(K, dim1=1, dim2=2), rtol=1e-12, atol=1e-14)


def check_batch_equals_loop(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """Evaluating the batch at once equals evaluating each element alone."""
    b = _symbol_batch(symbol, generator, m=4)
    K = evaluator(*b.args()).detach()
    for i in range(b.X1.shape[0]):
        one = [a[i : i + 1] if isinstance(a, Tensor) else a for a in b.args()]
        torch.testing.assert_close(evaluator(*one).detach()[0], K[i], rtol=1e-13, atol=1e-15)


def check_padding_invariance(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """A padded dimension, a padded addend with garbage and padded points change nothing."""
    b = _symbol_batch(symbol, generator, m=4)
    K = evaluator(*b.args()).detach()
    B, N, D = b.X1.shape
    X1 = torch.cat([b.X1, torch.full((B, 2, D), 0.25, dtype=b.X1.dtype)], 1)
    X1 = torch.cat([X1, torch.full((B, N + 2, 1), 9.0, dtype=b.X1.dtype)], 2)
    X2 = torch.cat([b.X2, torch.full((B, b.X2.shape[1], 1), -3.0, dtype=b.X1.dtype)], 2)
    sym = torch.cat([b.symbols, torch.ones(B, D, 1, dtype=torch.int64)], 2)
    sym = torch.cat([sym, torch.ones(B, 1, 2, dtype=torch.int64)], 1)
    smask = torch.zeros(B, D + 1, 2, dtype=torch.bool)
    smask[:, :D, 0] = True
    par = torch.full((B, D + 1, 2, b.params.shape[3]), 5.0, dtype=b.params.dtype)
    par[:, :D, :1] = b.params
    dmask = torch.zeros(B, D + 1, dtype=torch.bool)
    dmask[:, :D] = True
    Kp = evaluator(X1, X2, sym, smask, par, b.vocab, dmask).detach()
    torch.testing.assert_close(Kp[:, :N], K, rtol=1e-13, atol=1e-15)


def check_gradients(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """float64 ``gradcheck`` (finite differences) w.r.t. both inputs and the parameters."""
    b = _symbol_batch(symbol, generator, batch=2, n=3, m=2, dims=2)
    X1 = b.X1.clone().requires_grad_()
    X2 = b.X2.clone().requires_grad_()
    P = b.params.clone().requires_grad_()

    def f(x1: Tensor, x2: Tensor, p: Tensor) -> Tensor:
        return evaluator(x1, x2, b.symbols, b.symbol_mask, p, b.vocab, b.dim_mask)

    assert torch.autograd.gradcheck(f, (X1, X2, P), eps=1e-6, atol=1e-7)


def check_gpytorch(
    symbol: BaseSymbol | str,
    generator: torch.Generator,
    evaluator: Evaluator = kernel_matrix_dimwise,
) -> None:
    """Agreement with the equivalent GPyTorch kernel (skipped where GPyTorch lacks a factor)."""
    sym = base_symbol(symbol) if isinstance(symbol, str) else symbol
    b = _symbol_batch(sym, generator, batch=1, n=7, m=5, dims=1)
    K = evaluator(*b.args()).detach()[0]
    named = dict(zip(sym.param_names, b.params[0, 0, 0].tolist()))
    ref = gpytorch_kernel_matrix(sym, b.X1[0, :, 0], b.X2[0, :, 0], named)
    if ref is None:
        return
    # GPyTorch forms distances from inner products and stores parameters through a
    # softplus constraint: agreement to ~1e-8 relative, not to rounding.
    torch.testing.assert_close(K, ref, rtol=1e-6, atol=1e-9)


CONFORMANCE_CHECKS: dict[str, Callable[[BaseSymbol | str, torch.Generator, Evaluator], None]] = {
    "reference": check_reference,
    "symmetry": check_symmetry,
    "psd": check_psd,
    "diag": check_diag,
    "batch_equals_loop": check_batch_equals_loop,
    "padding_invariance": check_padding_invariance,
    "gradients": check_gradients,
    "gpytorch": check_gpytorch,
}
"""Every check of the kernel conformance suite by name."""


def run_conformance(
    symbol: BaseSymbol | str, seed: int = 0, evaluator: Evaluator = kernel_matrix_dimwise
) -> None:
    """Run the whole conformance suite on one base symbol (raises AssertionError on failure)."""
    for i, check in enumerate(CONFORMANCE_CHECKS.values()):
        check(symbol, torch.Generator().manual_seed(seed + i), evaluator)
