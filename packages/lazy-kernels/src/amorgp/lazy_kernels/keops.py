"""KeOps backend: a dimension-wise structure as one symbolic KeOps formula.

The whole kernel ``K(x, x') = prod_d sum_l k_{s_dl}(x_d, x'_d)`` is emitted as a
single KeOps formula with **packed inputs** — one ``X = Vi(D)``, one
``Y = Vj(D)``, one parameter vector ``T = Pm(n_theta)`` and the right-hand sides
``V = Vj(k)`` — and reduced on the fly (``sum_j K(x_i, y_j) V_j``), so memory is
``O((N + M) (D + k))`` instead of ``O(N M)``.  Because there are only four
inputs, the first backward pass compiles at most one gradient formula per input
(not one per kernel parameter).

Each elementary factor's formula is registered with its torch form
(:class:`~amorgp.lazy_kernels.elementary.KeOpsFormula`, see
:func:`~amorgp.lazy_kernels.register_keops_formula`); a structure using a factor without
one fails with an error naming the symbol.  Parameters enter the formula through
*derived* scalars computed in torch (``-1 / (2 l^2)``, ``pi / p``, ``sqrt(5) / l``, ...),
so gradients with respect to the constrained parameters flow through ordinary torch
autograd into KeOps' gradient with respect to ``T``.

Compiled formulas are cached in memory by ``(canonical structure, dtype, k)``
and on disk by KeOps (its build folder).  Compilation of a new formula runs
under an exclusive file lock in the build folder so concurrent processes do not
corrupt the cache.  The lock covers compilation only: the first call of a formula
first evaluates it (and, when gradients are wanted, its backward pass) on two
points under the lock, releases it, and only then evaluates the real input, so a
long evaluation never blocks other processes.  :func:`warm_up` compiles the
forward and backward formulas of given structures ahead of time (e.g. once in CI
before the tests).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from amorgp.core.errors import DataError
from amorgp.kernel_grammar import ELEMENTARY, DimWiseStructure, base_symbol
from amorgp.lazy_kernels.elementary import keops_elementary
from amorgp.lazy_kernels.operators import DenseKernelOperator, check_rhs
from amorgp.lazy_kernels.probe import keops_installed, keops_usable

if TYPE_CHECKING:
    from amorgp.lazy_kernels.structure import DimWiseKernel

__all__ = [
    "RHS_WIDTH",
    "KeOpsKernel",
    "KeOpsOperator",
    "keops_available",
    "keops_formula",
    "warm_up",
]

RHS_WIDTH = 16
"""Right-hand sides are processed in blocks of this many columns (or singly), so each
structure compiles at most two forward formulas whatever the number of columns."""

_GENRED: dict[tuple[str, str, int], Any] = {}
_WARM: set[tuple[str, str, int, bool]] = set()
"""Formulas compiled in this process: ``(structure, dtype, k, with gradients)``."""


def keops_available() -> bool:
    """True if pykeops is installed (found on the path, not imported).  Whether it works on a
    device is :func:`~amorgp.lazy_kernels.keops_usable` (a probe in a subprocess, since a
    broken installation can end the process with a signal)."""
    return keops_installed()


_LOCK_DEPTH = 0
"""How deeply this process holds the build lock (the lock is re-entrant in-process:
``flock`` on a second descriptor of the same file would block its own holder)."""


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """Exclusive inter-process lock on the KeOps build folder (POSIX ``flock``)."""
    global _LOCK_DEPTH
    if _LOCK_DEPTH:
        _LOCK_DEPTH += 1
        try:
            yield
        finally:
            _LOCK_DEPTH -= 1
        return
    import pykeops

    folder = pykeops.get_build_folder()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "amorgp.lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        _LOCK_DEPTH = 1
        try:
            yield
        finally:
            _LOCK_DEPTH = 0
            fcntl.flock(fh, fcntl.LOCK_UN)


def _compile(fn: Any, args: tuple[Tensor, ...], backend: str) -> None:
    """Compile ``fn`` (and the gradients the real call will need) on two points of ``args``.

    Each argument is cut to its first two rows (``T``, a parameter vector, is kept),
    detached, and marked for gradients like the original when autograd is on, so
    KeOps builds the same forward and backward binaries the real call uses.
    """
    grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
    tiny = []
    for i, a in enumerate(args):
        t = a.detach() if i == 2 else a.detach()[:2].clone()
        tiny.append(t.requires_grad_(grad and a.requires_grad))
    out = fn(*tiny, backend=backend)
    if grad:
        out.sum().backward()


def _plan(structure: DimWiseStructure) -> tuple[str, list[tuple[int, int, str, list[int]]], int]:
    """Formula text and, per derived scalar group, where its raw parameters come from."""
    terms_d: list[str] = []
    plan: list[tuple[int, int, str, list[int]]] = []  # (d, l, kind or "VAR", slots)
    n = 0

    def alias(k: int) -> list[str]:
        nonlocal n
        out = [f"Elem(T, {n + i})" for i in range(k)]
        n += k
        return out

    for d, addends in enumerate(structure.dims):
        r = f"(Elem(X, {d}) - Elem(Y, {d}))"
        xy = f"(Elem(X, {d}) * Elem(Y, {d}))"
        terms: list[str] = []
        for a, name in enumerate(addends):
            sym = base_symbol(name)
            names = sym.param_names
            (s2,) = alias(1)
            plan.append((d, a, "VAR", [0]))
            if len(sym.factors) == 1 and not ELEMENTARY[sym.factors[0]].variance_scales_all:
                (c2,) = alias(1)
                plan.append((d, a, "OFFSET", [names.index("offset")]))
                terms.append(f"({s2} * {xy} + {c2})")
                continue
            parts = [s2]
            for f in sym.factors:
                mapping = sym.factor_param_names(f)
                slots = [names.index(mapping[p.name]) for p in ELEMENTARY[f].params]
                ke = keops_elementary(f, sym.name)
                parts.append(ke.formula(r, xy, alias(ke.n_derived)))
                plan.append((d, a, f, slots))
            terms.append(" * ".join(parts))
        terms_d.append("(" + " + ".join(terms) + ")")
    return " * ".join(terms_d), plan, n


def keops_formula(structure: DimWiseStructure) -> str:
    """The KeOps formula text of ``structure`` (a scalar of ``X``, ``Y`` and ``T``)."""
    return _plan(structure)[0]


def _genred(structure: DimWiseStructure, dtype: torch.dtype, k: int) -> Any:
    from pykeops.torch import Genred

    key = (str(structure), str(dtype), k)
    if key not in _GENRED:
        formula, _, n_theta = _plan(structure)
        _GENRED[key] = Genred(
            f"({formula}) * V",
            [
                f"X = Vi({structure.n_dims})",
                f"Y = Vj({structure.n_dims})",
                f"T = Pm({n_theta})",
                f"V = Vj({k})",
            ],
            reduction_op="Sum",
            axis=1,
        )
    return _GENRED[key]


class KeOpsKernel:
    """A dimension-wise kernel evaluated lazily by KeOps.

    Args:
        structure: the dimension-wise structure (or its text with ``n_dims``).
        params: ``(D, L, P)`` positive parameters in the padded layout (as
            :class:`~amorgp.lazy_kernels.DimWiseKernel`).
        n_dims: number of dimensions for a dimension-free text.

    Raises:
        DataError: on a bad parameter shape.
    """

    def __init__(
        self, structure: DimWiseStructure | str, params: Tensor, n_dims: int | None = None
    ) -> None:
        if isinstance(structure, str):
            structure = DimWiseStructure.parse(structure, n_dims)
        D, L = structure.n_dims, structure.max_addends
        if not isinstance(params, Tensor) or params.ndim != 3 or tuple(params.shape[:2]) != (D, L):
            raise DataError(
                f"params must have shape (D, L, P) = ({D}, {L}, P) for {structure}, "
                f"got {tuple(getattr(params, 'shape', ()))}"
            )
        self.structure = structure
        self.params = params

    @cached_property
    def _plan(self) -> tuple[str, list[tuple[int, int, str, list[int]]], int]:
        return _plan(self.structure)

    def theta(self) -> Tensor:
        """The packed derived parameter vector ``T`` (differentiable w.r.t. ``params``)."""
        _, plan, _ = self._plan
        out: list[Tensor] = []
        for d, a, kind, slots in plan:
            p = self.params[d, a, slots]
            if kind in ("VAR", "OFFSET"):
                out.append(p[0])
            else:
                out.extend(keops_elementary(kind).derived(p))
        return torch.stack(out)

    def _call(self, X1: Tensor, X2: Tensor, theta: Tensor, V: Tensor) -> Tensor:
        k = V.shape[1]
        fn = _genred(self.structure, X1.dtype, k)
        key = (str(self.structure), str(X1.dtype), k)
        args = (X1.contiguous(), X2.contiguous(), theta, V.contiguous())
        backend = "CPU" if X1.device.type == "cpu" else "auto"
        grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
        if (*key, True) not in _WARM and (*key, grad) not in _WARM:
            with _build_lock():  # compilation only, never the real evaluation
                _compile(fn, args, backend)
            _WARM.add((*key, grad))
        return fn(*args, backend=backend)

    def matmul(self, X1: Tensor, X2: Tensor, V: Tensor) -> Tensor:
        """``K(X1, X2) @ V`` without forming ``K``: ``X1 (N, D)``, ``X2 (M, D)``, ``V (M, k)``
        or ``(M,)`` -> ``(N, k)`` or ``(N,)``.  Differentiable w.r.t. all inputs and params."""
        D = self.structure.n_dims
        for name, X in (("X1", X1), ("X2", X2)):
            if X.ndim != 2 or X.shape[1] != D:
                raise DataError(f"{name} must have shape (N, {D}), got {tuple(X.shape)}")
        vec = V.ndim == 1
        V2 = V[:, None] if vec else V
        if V2.shape[0] != X2.shape[0]:
            raise DataError(f"V has {V2.shape[0]} rows but X2 has {X2.shape[0]} points")
        if not keops_usable(X1.device):  # warned once: the torch block operator instead
            from amorgp.lazy_kernels.block import BlockKernelOperator

            return BlockKernelOperator(self.dense_kernel, X1, X2).matmul(V)
        dtype = X1.dtype
        theta = self.theta().to(dtype=dtype, device=X1.device)
        V2 = V2.to(dtype)
        k = V2.shape[1]
        width = 1 if k == 1 else RHS_WIDTH
        if k not in (1, width):
            pad = (-k) % width
            if pad:
                V2 = torch.cat([V2, V2.new_zeros(V2.shape[0], pad)], 1)
        chunks = [self._call(X1, X2, theta, c) for c in V2.split(width, dim=1)]
        out = (chunks[0] if len(chunks) == 1 else torch.cat(chunks, 1))[:, :k]
        return out[:, 0] if vec else out

    @cached_property
    def dense_kernel(self) -> DimWiseKernel:
        """The same kernel on the dense evaluator (diagonals, columns, small blocks)."""
        from amorgp.lazy_kernels.structure import DimWiseKernel

        return DimWiseKernel(self.structure, self.params)

    def operator(self, X1: Tensor, X2: Tensor | None = None) -> KeOpsOperator:
        """``K(X1, X2)`` as a :class:`~amorgp.lazy_kernels.KernelOperator` whose matvecs are
        KeOps reductions (``X2=None``: the symmetric ``K(X1, X1)``)."""
        return KeOpsOperator(self, X1, X2)


class KeOpsOperator(DenseKernelOperator):
    """``K(X1, X2)`` of a :class:`KeOpsKernel`: matvecs reduced on the fly by KeOps in
    ``O(N + M)`` memory; ``diag``, ``columns`` and ``dense`` (blocks the caller sized) by the
    dense evaluator of the same kernel, as in :class:`DenseKernelOperator`.

    Args:
        kernel: the KeOps kernel.
        X1: ``(N, D)`` inputs; X2: ``(M, D)`` inputs or None (symmetric).
    """

    def __init__(self, kernel: KeOpsKernel, X1: Tensor, X2: Tensor | None = None) -> None:
        super().__init__(kernel.dense_kernel, X1, X2)
        self.keops = kernel

    def matmul(self, V: Tensor) -> Tensor:
        check_rhs(V, self.shape[1])
        return self.keops.matmul(self.X1, self.X2, V)

    def on(self, X1: Tensor, X2: Tensor | None = None) -> KeOpsOperator:
        return KeOpsOperator(self.keops, X1, X2)

    def __repr__(self) -> str:
        return f"KeOpsOperator({str(self.keops.structure)!r}, shape={self.shape})"


def warm_up(
    structures: Sequence[DimWiseStructure | str],
    dtype: torch.dtype = torch.float64,
    n_rhs: Sequence[int] = (1, RHS_WIDTH),
    n_dims: int | None = None,
    backward: bool = True,
) -> None:
    """Compile (under the build-folder lock) the KeOps formulas of ``structures``.

    Runs a tiny forward pass, and a backward pass w.r.t. inputs, parameters and
    right-hand sides when ``backward`` is True, for every number of right-hand
    sides in ``n_rhs``, so later calls and concurrent processes find the binaries
    in KeOps' cache.  Does nothing (after the one warning of
    :func:`~amorgp.lazy_kernels.keops_usable`) where KeOps fails its probe on the CPU.
    """
    if not keops_usable("cpu"):
        return
    for s in structures:
        st = DimWiseStructure.parse(s, n_dims) if isinstance(s, str) else s
        P = max(len(base_symbol(x).params) for a in st.dims for x in a)
        params = torch.full((st.n_dims, st.max_addends, P), 0.5, dtype=dtype)
        params.requires_grad_(backward)
        X = torch.rand(3, st.n_dims, dtype=dtype, requires_grad=backward)
        for k in n_rhs:
            V = torch.ones(3, k, dtype=dtype, requires_grad=backward)
            with torch.set_grad_enabled(backward), _build_lock():
                out = KeOpsKernel(st, params).matmul(X, X, V)
                if backward:
                    out.sum().backward()
