"""The parts a kernel matrix of the refinement is assembled from: each addend's kernel and
its derivatives (:class:`Derivative`, an elementary factor's by :func:`unit_and_grads`),
the sum of a dimension's addends (:func:`dimension_sum`) and the product over the
dimensions with each dimension's complement (:func:`sum_products`).  Element-wise on
whatever shape the pairwise values have (``(..., n, n)`` matrices, or the packed pairs of
:mod:`amorgp.amortizer.stages.packed`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import ELEMENTARY

__all__ = ["Derivative", "absorbs", "dimension_sum", "sum_products", "unit_and_grads"]


class Derivative(NamedTuple):
    """The derivative of an addend ``k`` with respect to ``theta[param]``: ``scale * k *
    matrix`` where ``scale`` is given (relative: ``matrix`` is ``d log k / d theta / scale``,
    ``None`` for ones; ``scale`` a factor per row), else ``matrix`` itself (dense)."""

    param: int
    scale: Tensor | None
    matrix: Tensor | None


def absorbs(shape: torch.Size, other: torch.Size) -> bool:
    """Whether a tensor of ``shape`` holds its sum with one of ``other`` in place (``other``
    broadcasts to ``shape``), by comparing the sizes (``torch.broadcast_shapes`` goes
    through symbolic shapes, dear on a hot path of small matrices)."""
    if len(other) > len(shape):
        return False
    return all(b == 1 or b == a for a, b in zip(shape[len(shape) - len(other) :], other))


def sum_products(sums: dict[int, Tensor]) -> tuple[Tensor, dict[int, Tensor | None]]:
    """``K``, the product of the dimensions' sums ``S_j``, and for every dimension the
    product of the others' (``None`` for a kernel of one dimension): prefix and suffix
    products, ``3 D`` element-wise products for ``D`` dimensions rather than ``D^2``."""
    dims = list(sums)
    prefix: list[Tensor | None] = []
    acc: Tensor | None = None
    for j in dims:
        prefix.append(acc)
        acc = sums[j] if acc is None else acc * sums[j]
    assert acc is not None
    K = acc
    other: dict[int, Tensor | None] = {}
    acc = None
    for t in range(len(dims) - 1, -1, -1):
        p = prefix[t]
        other[dims[t]] = p if acc is None else (acc if p is None else p * acc)
        acc = sums[dims[t]] if acc is None else sums[dims[t]] * acc
    return K, other


def dimension_sum(kernels: list[Tensor]) -> Tensor:
    """The sum of a dimension's addend kernels (the addend itself where it is alone)."""
    total = kernels[0]
    for k in kernels[1:]:
        total = total + k
    return total


def unit_and_grads(
    factor: str, p: dict[str, Tensor], r: Tensor, r2: Tensor, xx: Tensor
) -> tuple[Tensor, list[tuple[str, Tensor]]]:
    """The unit factor ``kt`` of an elementary kernel and its derivatives ``[(elementary
    parameter name, dkt / d theta)]``: in closed form where its lazy-kernels registration
    has one (:attr:`amorgp.lazy_kernels.TorchElementary.unit_and_grads`), else by
    forward-mode differentiation of its torch form (:func:`amorgp.lazy_kernels.torch_elementary`):
    a new base kernel needs no code here.  ``r``, ``r2``, ``xx``: the ``(n, n)``
    differences, squares and products.
    """
    from amorgp.lazy_kernels import torch_elementary

    form = torch_elementary(factor)
    if form.unit_and_grads is not None:
        return form.unit_and_grads(p, r, r2, xx)
    names = [q.name for q in ELEMENTARY[factor].params]

    def unit(theta: Tensor) -> Tensor:
        if form.log_unit_r is not None:
            return form.log_unit_r(r, theta).exp()
        if form.log_unit_r2 is not None:
            return form.log_unit_r2(r2, theta).exp()
        if form.unit_xx is not None:
            return form.unit_xx(xx, theta)
        raise OptionError(
            f"refinement needs elementary kernel {factor!r} as a function of r, r^2 or x x' "
            "(log_unit_r, log_unit_r2 or unit_xx of its TorchElementary), or its "
            "unit_and_grads"
        )

    theta = torch.stack([p[n] for n in names])
    jac = torch.func.jacfwd(unit)(theta)  # (n, n, k)
    return unit(theta), [(n, jac[..., i]) for i, n in enumerate(names)]
