"""One kernel-operator protocol: ``K(X1, X2)`` as a linear operator, dense or lazy.

A :class:`KernelOperator` is a kernel bound to its inputs: the ``(N, M)`` matrix
``K_ij = k(x1_i, x2_j)`` that an exact GP or its :class:`~amorgp.lazy_kernels.Posterior`
uses through a handful of methods, whatever evaluates it:

=====================  ==============================================================
member                 meaning
=====================  ==============================================================
``shape``              ``(N, M)``
``dtype``, ``device``  of the inputs (and of every result)
``X1``, ``X2``         the inputs; ``X2 is X1`` for the symmetric training operator
``matmul(V)``          ``K V`` for ``V (M,)`` or ``(M, k)``, differentiable
``diag()``             ``k(x_i, x_i)`` ``(N,)`` of a symmetric operator, never forming ``K``
``dense()``            ``K`` ``(N, M)`` as a tensor
``columns(index)``     ``K[:, index]`` ``(N, |index|)`` in ``O(N |index|)`` memory
``on(X1, X2=None)``    the same kernel (same parameters, same implementation) on other inputs
``bytes_per_entry``    working memory of ``dense``/``columns`` per matrix entry
``requires_grad``      whether parameters or inputs record gradients
=====================  ==============================================================

Implementations: :class:`DenseKernelOperator` wraps any dense kernel with
``kernel(X1, X2) -> (N, M)`` and ``kernel.diag(X) -> (N,)`` — the batched evaluator's
:class:`~amorgp.lazy_kernels.DimWiseKernel` and the general
:class:`~amorgp.lazy_kernels.ExpressionKernel` — and stores ``K`` once evaluated (a matvec
is then one ``matmul``); :class:`~amorgp.lazy_kernels.keops.KeOpsOperator` never forms
``K``: its matvecs are KeOps reductions in ``O(N + M)`` memory;
:class:`~amorgp.lazy_kernels.BlockKernelOperator` never forms ``K`` either: its matvecs
evaluate it by row blocks with the dense evaluator, in ``O(block x M)`` memory.  Obtain them with
``kernel.operator(X1, X2)`` or :func:`kernel_operator`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from amorgp.core.errors import DataError, OptionError

__all__ = [
    "EVALUATOR_MATRICES_PER_TERM",
    "DenseKernel",
    "DenseKernelOperator",
    "KernelOperator",
]

EVALUATOR_MATRICES_PER_TERM = 6
"""Peak working memory of the dense batched evaluator per active addend, in matrices of
the output's size (forward, float64, CPU): measured 4.5-6.4 across SE and ``SE*LIN + PER``
at d = 4, 8 and n = 1000, 3000 (docs/benchmarks/lazy-kernels.md, section 1b)."""


@runtime_checkable
class KernelOperator(Protocol):
    """``K(X1, X2)``, an ``(N, M)`` kernel matrix used through products (see module doc)."""

    @property
    def shape(self) -> tuple[int, int]: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def X1(self) -> Tensor: ...

    @property
    def X2(self) -> Tensor: ...

    @property
    def bytes_per_entry(self) -> float: ...

    @property
    def requires_grad(self) -> bool: ...

    def matmul(self, V: Tensor) -> Tensor:
        """``K V``: ``V (M,)`` or ``(M, k)`` -> ``(N,)`` or ``(N, k)``."""
        ...

    def diag(self) -> Tensor:
        """``(N,)`` diagonal of a symmetric operator (``X2 is X1``)."""
        ...

    def dense(self) -> Tensor:
        """``(N, M)`` matrix."""
        ...

    def columns(self, index: Tensor) -> Tensor:
        """``K[:, index]``, ``(N, len(index))``."""
        ...

    def on(self, X1: Tensor, X2: Tensor | None = None) -> KernelOperator:
        """The same kernel on other inputs (``X2=None``: symmetric on ``X1``)."""
        ...


class DenseKernel(Protocol):
    """What :class:`DenseKernelOperator` needs of a kernel (DimWiseKernel, ExpressionKernel)."""

    @property
    def params(self) -> Tensor: ...

    @property
    def n_terms(self) -> int: ...

    def __call__(self, X1: Tensor, X2: Tensor | None = None) -> Tensor: ...

    def diag(self, X: Tensor) -> Tensor: ...


def check_rhs(V: Tensor, rows: int) -> tuple[Tensor, bool]:
    """``V`` as ``(rows, k)`` and whether it was a vector.

    Raises:
        DataError: if ``V`` is not a tensor of ``rows`` rows.
    """
    if not isinstance(V, Tensor) or V.ndim not in (1, 2):
        raise DataError(f"V must be an (M,) or (M, k) tensor, got {tuple(getattr(V, 'shape', ()))}")
    vec = V.ndim == 1
    V2 = V[:, None] if vec else V
    if V2.shape[0] != rows:
        raise DataError(f"V has {V2.shape[0]} rows but the operator has {rows} columns")
    return V2, vec


class PointsOperator:
    """What an operator of ``kernel`` on the points ``(X1, X2)`` reports of itself (shape,
    dtype, device, memory per entry, whether it records gradients): shared by the dense
    and the block operator."""

    kernel: DenseKernel
    _X1: Tensor
    _X2: Tensor

    @property
    def X1(self) -> Tensor:
        return self._X1

    @property
    def X2(self) -> Tensor:
        return self._X2

    @property
    def shape(self) -> tuple[int, int]:
        return (self._X1.shape[0], self._X2.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self._X1.dtype

    @property
    def device(self) -> torch.device:
        return self._X1.device

    @property
    def bytes_per_entry(self) -> float:
        item = torch.finfo(self.dtype).bits // 8
        return float(item * (EVALUATOR_MATRICES_PER_TERM * self.kernel.n_terms + 1))

    @property
    def requires_grad(self) -> bool:
        return any(t.requires_grad for t in (self.kernel.params, self._X1, self._X2))


class DenseKernelOperator(PointsOperator):
    """``K(X1, X2)`` of a dense kernel, evaluated at most once and kept.

    ``dense()`` evaluates ``kernel(X1, X2)`` the first time and stores it (with its
    autograd graph when gradients are being recorded); ``matmul`` multiplies the stored
    matrix; ``columns`` reads the stored matrix, or evaluates only the requested columns
    when it has not been formed.  A matrix stored without a graph is re-evaluated once if
    a later call records gradients (parameters or inputs that require grad).

    Args:
        kernel: a dense kernel (``kernel(X1, X2)``, ``kernel.diag(X)``, ``params``,
            ``n_terms``), e.g. :class:`~amorgp.lazy_kernels.DimWiseKernel`.
        X1: ``(N, D)`` inputs.
        X2: ``(M, D)`` inputs, or None for the symmetric ``K(X1, X1)``.
    """

    def __init__(self, kernel: DenseKernel, X1: Tensor, X2: Tensor | None = None) -> None:
        for name, X in (("X1", X1), ("X2", X2)):
            if X is not None and (not isinstance(X, Tensor) or X.ndim != 2):
                raise DataError(
                    f"{name} must be an (N, D) tensor, got {tuple(getattr(X, 'shape', ()))}"
                )
        self.kernel = kernel
        self._X1 = X1
        self._X2 = X1 if X2 is None else X2
        self._K: Tensor | None = None

    def dense(self) -> Tensor:
        records = torch.is_grad_enabled() and self.requires_grad
        if self._K is None or (records and self._K.grad_fn is None):
            self._K = self.kernel(self._X1, None if self._X2 is self._X1 else self._X2)
        return self._K

    def matmul(self, V: Tensor) -> Tensor:
        V2, vec = check_rhs(V, self.shape[1])
        out = self.dense() @ V2.to(self.dtype)
        return out[:, 0] if vec else out

    def diag(self) -> Tensor:
        if self._X2 is not self._X1:
            raise OptionError("diag() needs a symmetric operator K(X, X) (X2 is X1)")
        return self.kernel.diag(self._X1)

    def columns(self, index: Tensor) -> Tensor:
        if self._K is not None:
            return self._K[:, index]
        return self.kernel(self._X1, self._X2[index])

    def on(self, X1: Tensor, X2: Tensor | None = None) -> DenseKernelOperator:
        return DenseKernelOperator(self.kernel, X1, X2)

    def __repr__(self) -> str:
        return f"DenseKernelOperator({self.kernel!r}, shape={self.shape})"
