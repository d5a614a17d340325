"""Torch-native lazy kernel operator: ``K(X1, X2)`` by row blocks, never formed whole.

:class:`BlockKernelOperator` implements the :class:`~amorgp.lazy_kernels.KernelOperator`
protocol with the dense evaluator of a kernel
(:class:`~amorgp.lazy_kernels.DimWiseKernel`, :class:`~amorgp.lazy_kernels.ExpressionKernel`)
applied to blocks of rows: ``K V`` is ``[K(X1_b, X2) V for each row block b]``, each block
evaluated, multiplied and freed before the next, so memory is ``O(b M)`` for blocks of
``b`` rows sized to a memory budget, instead of ``O(N M)``.  It runs wherever torch runs
(CPU, CUDA, any dtype) and needs no compiler: it is the large-``n`` backend where KeOps is
not installed or fails its probe (:func:`~amorgp.lazy_kernels.keops_usable`).

Gradients (with respect to the kernel parameters, both inputs and ``V``) flow by
recomputation: the forward pass keeps no block; the backward pass re-evaluates one block at a
time with its autograd graph (activation checkpointing per block), so the backward pass is
also ``O(b M)`` in memory.  The price is one extra evaluation of ``K`` per backward pass.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from amorgp.core.errors import DataError, OptionError
from amorgp.lazy_kernels.budgets import CHUNK_BYTES
from amorgp.lazy_kernels.operators import (
    EVALUATOR_MATRICES_PER_TERM,
    DenseKernel,
    PointsOperator,
    check_rhs,
)

__all__ = ["BLOCK_MEMORY_BUDGET", "BlockKernelOperator", "block_rows", "check_memory_budget"]

_UNLIMITED = float(2**62)
"""The byte count an infinite ``memory_budget`` stands for (no limit in practice)."""


def check_memory_budget(value: object, name: str = "memory_budget") -> float:
    """``value`` as a byte budget: a positive number; ``inf`` means no limit.

    Raises:
        OptionError: not a positive number (``nan``, ``0``, negative, a text).
    """
    if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value) > 0):
        raise OptionError(  # NaN fails the comparison
            f"{name} must be a positive number of bytes (inf: no limit), got {value!r}"
        )
    return min(float(value), _UNLIMITED)


BLOCK_MEMORY_BUDGET = CHUNK_BYTES
"""Default bytes one row block (its kernel values and the evaluator's working memory) may use."""

_MATRICES_NO_GRAPH = 4
"""Working memory of the dense evaluator per entry of its output without a graph on the
CPU, in matrices (:data:`~amorgp.lazy_kernels.EVALUATOR_MATRICES_NO_GRAPH`)."""
_MATRICES_NO_GRAPH_DEVICE = 12
"""The same on other devices (:data:`~amorgp.lazy_kernels.EVALUATOR_MATRICES_NO_GRAPH_DEVICE`)."""


def block_rows(
    columns: int,
    n_terms: int,
    dtype: torch.dtype,
    memory_budget: float,
    graph: bool,
    device: torch.device | str = "cpu",
) -> int:
    """Rows per block so that one block of ``columns`` columns and the dense evaluator's
    working memory (``EVALUATOR_MATRICES_PER_TERM * n_terms + 1`` matrices with a graph,
    at most 4 without on the CPU, 12 elsewhere) fit ``memory_budget`` bytes; at least 1."""
    item = torch.finfo(dtype).bits // 8
    matrices = EVALUATOR_MATRICES_PER_TERM * n_terms + 1
    if not graph:
        cpu = torch.device(device).type == "cpu"
        matrices = min(matrices, _MATRICES_NO_GRAPH if cpu else _MATRICES_NO_GRAPH_DEVICE)
    budget = min(float(memory_budget), _UNLIMITED)
    return max(1, int(budget // (item * matrices * max(columns, 1))))


class BlockKernelOperator(PointsOperator):
    """``K(X1, X2)`` of a dense kernel, applied by row blocks (see module doc).

    Args:
        kernel: a dense kernel (``kernel(X1, X2)``, ``kernel.diag(X)``, ``params``,
            ``n_terms``), e.g. :class:`~amorgp.lazy_kernels.DimWiseKernel`.
        X1: ``(N, D)`` inputs.
        X2: ``(M, D)`` inputs, or None for the symmetric ``K(X1, X1)``.
        memory_budget: bytes one block may use (sets the rows per block).
        rows: rows per block, overriding ``memory_budget``.

    ``matmul`` never forms ``K``; ``columns(index)`` evaluates only those columns
    (``O(N |index|)``); ``dense()`` forms the whole matrix (for blocks the caller sized, as
    the posterior's chunks of test points).

    Raises:
        DataError: inputs that are not ``(N, D)`` tensors.
        OptionError: a non-positive ``rows`` or ``memory_budget``.
    """

    def __init__(
        self,
        kernel: DenseKernel,
        X1: Tensor,
        X2: Tensor | None = None,
        *,
        memory_budget: float = BLOCK_MEMORY_BUDGET,
        rows: int | None = None,
    ) -> None:
        for name, X in (("X1", X1), ("X2", X2)):
            if X is not None and (not isinstance(X, Tensor) or X.ndim != 2):
                raise DataError(
                    f"{name} must be an (N, D) tensor, got {tuple(getattr(X, 'shape', ()))}"
                )
        if rows is not None and rows < 1:
            raise OptionError(f"rows must be >= 1, got {rows}")
        self.kernel = kernel
        self._X1 = X1
        self._X2 = X1 if X2 is None else X2
        self.memory_budget = check_memory_budget(memory_budget)
        self.rows = rows

    def block_size(self, graph: bool | None = None) -> int:
        """Rows per block of :meth:`matmul` (with an autograd graph or without; default:
        whether gradients are being recorded)."""
        if self.rows is not None:
            return self.rows
        if graph is None:
            graph = torch.is_grad_enabled() and self.requires_grad
        return block_rows(
            self.shape[1], self.kernel.n_terms, self.dtype, self.memory_budget, graph, self.device
        )

    def _cross(self, X1: Tensor) -> Tensor:
        return self.kernel(X1, self._X2)

    def matmul(self, V: Tensor) -> Tensor:
        V2, vec = check_rhs(V, self.shape[1])
        V2 = V2.to(dtype=self.dtype, device=self.device)
        graph = torch.is_grad_enabled() and (self.requires_grad or V2.requires_grad)
        b = self.block_size(graph)
        X2 = self._X2

        def block(X1b: Tensor, X2_: Tensor, V_: Tensor) -> Tensor:
            return self.kernel(X1b, X2_) @ V_

        if not graph:
            out = torch.cat([block(X1b, X2, V2) for X1b in self._X1.split(b)], 0)
        else:
            parts = [
                checkpoint(block, X1b, X2, V2, use_reentrant=False, preserve_rng_state=False)
                for X1b in self._X1.split(b)
            ]
            out = parts[0] if len(parts) == 1 else torch.cat(parts, 0)
        return out[:, 0] if vec else out

    def diag(self) -> Tensor:
        if self._X2 is not self._X1:
            raise OptionError("diag() needs a symmetric operator K(X, X) (X2 is X1)")
        return self.kernel.diag(self._X1)

    def dense(self) -> Tensor:
        return self.kernel(self._X1, None if self._X2 is self._X1 else self._X2)

    def columns(self, index: Tensor) -> Tensor:
        return self.kernel(self._X1, self._X2[index])

    def on(self, X1: Tensor, X2: Tensor | None = None) -> BlockKernelOperator:
        return BlockKernelOperator(
            self.kernel, X1, X2, memory_budget=self.memory_budget, rows=self.rows
        )

    def __repr__(self) -> str:
        return f"BlockKernelOperator({self.kernel!r}, shape={self.shape})"
