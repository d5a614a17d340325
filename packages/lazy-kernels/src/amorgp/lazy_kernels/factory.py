"""The factory of kernel operators by backend: :func:`kernel_operator`.

It sits above the operator modules (:mod:`~amorgp.lazy_kernels.operators`,
:mod:`~amorgp.lazy_kernels.block`, :mod:`~amorgp.lazy_kernels.keops`,
:mod:`~amorgp.lazy_kernels.structure`), which do not import it.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from amorgp.core.errors import OptionError
from amorgp.lazy_kernels.block import BLOCK_MEMORY_BUDGET, BlockKernelOperator
from amorgp.lazy_kernels.keops import KeOpsKernel
from amorgp.lazy_kernels.operators import DenseKernel, DenseKernelOperator, KernelOperator
from amorgp.lazy_kernels.probe import keops_usable
from amorgp.lazy_kernels.structure import DimWiseKernel

__all__ = ["kernel_operator"]


def kernel_operator(
    kernel: DenseKernel,
    X1: Tensor,
    X2: Tensor | None = None,
    backend: str = "dense",
    memory_budget: float | None = None,
) -> KernelOperator:
    """The operator of ``kernel`` on ``(X1, X2)`` evaluated by ``backend``.

    Args:
        kernel: a dense kernel (:class:`~amorgp.lazy_kernels.DimWiseKernel` for ``"keops"``).
        X1: ``(N, D)``; X2: ``(M, D)`` or None (symmetric).
        backend: ``"dense"`` (:class:`DenseKernelOperator`), ``"keops"``
            (:class:`~amorgp.lazy_kernels.keops.KeOpsOperator`) or ``"block"``
            (:class:`~amorgp.lazy_kernels.BlockKernelOperator`).  ``"keops"`` where KeOps
            fails its probe on ``X1``'s device (:func:`~amorgp.lazy_kernels.keops_usable`,
            which warns) gives the block operator.
        memory_budget: bytes one row block of the block operator may use (default
            :data:`~amorgp.lazy_kernels.block.BLOCK_MEMORY_BUDGET`).

    Raises:
        OptionError: unknown backend, or KeOps for a kernel that is not dimension-wise.
    """
    make = _OPERATORS.get(backend)
    if make is None:
        raise OptionError(f"unknown operator backend {backend!r}; use 'dense', 'keops' or 'block'")
    return make(kernel, X1, X2, memory_budget)


def _dense(
    kernel: DenseKernel, X1: Tensor, X2: Tensor | None, memory_budget: float | None
) -> KernelOperator:
    return DenseKernelOperator(kernel, X1, X2)


def _block(
    kernel: DenseKernel, X1: Tensor, X2: Tensor | None, memory_budget: float | None
) -> KernelOperator:
    budget = BLOCK_MEMORY_BUDGET if memory_budget is None else memory_budget
    return BlockKernelOperator(kernel, X1, X2, memory_budget=budget)


def _keops(
    kernel: DenseKernel, X1: Tensor, X2: Tensor | None, memory_budget: float | None
) -> KernelOperator:
    if not keops_usable(X1.device):
        return _block(kernel, X1, X2, memory_budget)
    if not isinstance(kernel, DimWiseKernel):
        raise OptionError(f"the KeOps backend needs a DimWiseKernel, got {type(kernel).__name__}")
    return KeOpsKernel(kernel.structure, kernel.params).operator(X1, X2)


_OPERATORS: dict[
    str, Callable[[DenseKernel, Tensor, Tensor | None, float | None], KernelOperator]
] = {"dense": _dense, "block": _block, "keops": _keops}
"""The operator constructor of each backend name."""
