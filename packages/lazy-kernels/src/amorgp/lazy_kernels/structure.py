"""Single-structure kernels: a dimension-wise structure or a general expression.

* :class:`DimWiseKernel` — one :class:`~amorgp.kernel_grammar.DimWiseStructure`
  ``K(x, x') = prod_d sum_l k_{s_dl}(x_d, x'_d; theta_dl)`` with its parameters
  ``(D, L, P)`` (or named, ``"d0.1.SE*LIN.se_lengthscale"``); evaluated by the
  batched evaluator with a batch of one, so both paths share one implementation.
* :class:`ExpressionKernel` — any sum/product expression of the grammar, also
  outside the dimension-wise space (e.g. ``SE@0 * SE@1 + PER@0``), with **one
  parameter set per atom**: every atom is an elementary kernel with its own
  variance, ``(variance, *params)`` in registry order (LIN: ``s^2 x x' + c^2``).
  Atoms of the same elementary kind are evaluated together in one vectorised call,
  then combined along the tree.  A dimension-free expression is the product over
  dimensions of the expression on each dimension (as in the grammar), with
  independent atoms per dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

from amorgp.core.errors import DataError, OptionError
from amorgp.kernel_grammar import (
    Atom,
    DimWiseStructure,
    Expr,
    Product,
    Sum,
    Vocabulary,
    base_symbol,
    encode,
    parse,
)
from amorgp.lazy_kernels.dimwise import kernel_diag_dimwise, kernel_matrix_dimwise
from amorgp.lazy_kernels.operators import DenseKernelOperator
from amorgp.lazy_kernels.tables import compile_symbol, evaluate_symbol

__all__ = ["DimWiseKernel", "ExpressionKernel"]


def _as_inputs(X: Tensor, n_dims: int, name: str) -> Tensor:
    if not isinstance(X, Tensor):
        raise DataError(f"{name} must be a torch tensor, got {type(X).__name__}")
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise DataError(f"{name} must have shape (N, D), got {tuple(X.shape)}")
    if X.shape[1] < n_dims:
        raise DataError(
            f"the kernel uses {n_dims} input dimensions but {name} has only {X.shape[1]} "
            "(a dimension index exceeds the data)"
        )
    if X.shape[1] > n_dims:
        raise DataError(f"{name} has {X.shape[1]} dimensions but the kernel has {n_dims}")
    if not X.is_floating_point():
        raise DataError(f"{name} must be floating point, got {X.dtype}")
    if not bool(torch.isfinite(X).all()):
        raise DataError(f"{name} contains NaN or infinite values")
    return X


class DimWiseKernel:
    """One dimension-wise structure with its parameters.

    Args:
        structure: a :class:`DimWiseStructure` or its text (``"SE + PER"`` needs
            ``n_dims``; ``"(SE*LIN + SE)@0 * PER@1"`` does not).
        params: ``(D, L, P)`` tensor in the padded layout (slot order of each
            symbol, ``L = structure.max_addends``, ``P >= vocab.max_params``), or a
            mapping from parameter names (``str(ParamName)``, e.g.
            ``"d0.1.SE*LIN.se_lengthscale"``) to values; every parameter must be given.
        n_dims: number of input dimensions for a dimension-free text.
        dtype: dtype of the parameter tensor built from a mapping (float64).

    Raises:
        KernelSyntaxError: unparsable structure.
        DataError: wrong parameter shape, non-positive or non-finite parameters.
        OptionError: unknown or missing parameter names.

    Example:
        >>> k = DimWiseKernel("SE + PER", {...}, n_dims=1)  # doctest: +SKIP
        >>> K = k(X)  # (N, N)
    """

    def __init__(
        self,
        structure: DimWiseStructure | str,
        params: Tensor | Mapping[str, float | Tensor],
        n_dims: int | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if isinstance(structure, str):
            structure = DimWiseStructure.parse(structure, n_dims)
        if not isinstance(structure, DimWiseStructure):
            raise OptionError(f"structure must be a DimWiseStructure or text, got {structure!r}")
        self.structure = structure
        symbols = sorted({s for a in structure.dims for s in a}, key=lambda s: (len(s), s))
        self.vocab = Vocabulary(tuple(symbols), "structure")
        sym, mask = encode([structure], self.vocab)
        self._symbols = torch.as_tensor(sym)
        self._mask = torch.as_tensor(mask)
        D, L = structure.n_dims, structure.max_addends
        P = self.vocab.max_params
        if isinstance(params, Tensor):
            if params.ndim != 3 or tuple(params.shape[:2]) != (D, L) or params.shape[2] < P:
                raise DataError(
                    f"params must have shape (D, L, P) = ({D}, {L}, >= {P}) for {structure}, "
                    f"got {tuple(params.shape)}"
                )
            self.params = params[..., :P]
        elif isinstance(params, Mapping):
            self.params = self._from_named(params, dtype)
        else:
            raise DataError(f"params must be a tensor or a mapping, got {type(params).__name__}")
        used = (
            torch.as_tensor(self.vocab.param_kind_table()[1])[self._symbols[0]]
            & self._mask[0][..., None]
        )
        vals = self.params[used.to(self.params.device)]
        if not bool(torch.isfinite(vals).all()) or not bool((vals > 0).all()):
            raise DataError(f"every parameter of {structure} must be finite and positive")

    def _from_named(self, named: Mapping[str, float | Tensor], dtype: torch.dtype) -> Tensor:
        names = self.structure.param_names()
        known = {str(n): n for n in names}
        unknown = sorted(set(named) - set(known))
        if unknown:
            raise OptionError(
                f"unknown parameter names {unknown} for {self.structure}; expected {list(known)}"
            )
        missing = [k for k in known if k not in named]
        if missing:
            raise OptionError(f"missing parameters {missing} for {self.structure}")
        D, L, P = self.structure.n_dims, self.structure.max_addends, self.vocab.max_params
        values = [torch.as_tensor(named[str(n)], dtype=dtype).reshape(()) for n in names]
        flat = torch.ones(D * L * P, dtype=dtype)
        idx = torch.tensor([(n.dim * L + n.addend) * P + n.slot for n in names])
        return flat.index_put((idx,), torch.stack(values)).reshape(D, L, P)

    def named_params(self) -> dict[str, Tensor]:
        """Every parameter by name (``str(ParamName)``), as 0-d tensors."""
        return {str(n): self.params[n.dim, n.addend, n.slot] for n in self.structure.param_names()}

    @property
    def n_terms(self) -> int:
        """Addends summed over dimensions (sets the dense evaluator's working memory)."""
        return sum(len(addends) for addends in self.structure.dims)

    def operator(self, X1: Tensor, X2: Tensor | None = None) -> DenseKernelOperator:
        """``K(X1, X2)`` as a :class:`~amorgp.lazy_kernels.KernelOperator` (dense evaluator;
        ``X2=None``: the symmetric ``K(X1, X1)``)."""
        return DenseKernelOperator(self, X1, X2)

    def padded(self) -> tuple[Tensor, Tensor, Tensor]:
        """``symbols (1, D, L)``, ``symbol_mask (1, D, L)`` and ``params (1, D, L, P)``
        in this kernel's own vocabulary ``self.vocab``."""
        return self._symbols, self._mask, self.params[None]

    def __call__(self, X1: Tensor, X2: Tensor | None = None) -> Tensor:
        """Kernel matrix ``(N, M)`` for ``X1 (N, D)`` and ``X2 (M, D)`` (default ``X1``)."""
        D = self.structure.n_dims
        X1 = _as_inputs(X1, D, "X1")
        X2 = X1 if X2 is None else _as_inputs(X2, D, "X2")
        sym, mask, par = self._on(X1)
        return kernel_matrix_dimwise(
            X1[None], X2[None], sym, mask, par.to(X1.dtype), self.vocab, validate=False
        )[0]

    def diag(self, X: Tensor) -> Tensor:
        """Diagonal ``k(x_n, x_n)``, ``(N,)``, without forming the matrix."""
        X = _as_inputs(X, self.structure.n_dims, "X")
        sym, mask, par = self._on(X)
        return kernel_diag_dimwise(X[None], sym, mask, par.to(X.dtype), self.vocab, validate=False)[
            0
        ]

    def _on(self, X: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return (
            self._symbols.to(X.device),
            self._mask.to(X.device),
            self.params[None].to(X.device),
        )

    def __repr__(self) -> str:
        return f"DimWiseKernel({str(self.structure)!r})"


class ExpressionKernel:
    """A general sum/product kernel expression with one parameter set per atom.

    Args:
        expr: an :class:`~amorgp.kernel_grammar.Expr` or its text.
        params: ``(A, P)`` tensor, row ``i`` the parameters of atom ``i`` (order of
            :attr:`atoms`; ``(variance, *params)`` of its elementary kernel), or a
            sequence of ``A`` mappings from parameter name to value.
        n_dims: number of input dimensions (required for a dimension-free expression).

    Raises:
        ValueError: bad expression, wrong number of atoms or parameters, missing
            names, non-positive or non-finite values.
    """

    def __init__(
        self,
        expr: Expr | str,
        params: Tensor | Sequence[Mapping[str, float]],
        n_dims: int | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if isinstance(expr, str):
            expr = parse(expr, n_dims)
        if not isinstance(expr, Expr):
            raise ValueError(f"expr must be an Expr or text, got {expr!r}")
        if not expr.is_indexed:
            if n_dims is None:
                raise ValueError(f"{expr} has no '@' indices: give n_dims")
            expr = expr.at(0) if n_dims == 1 else Product([expr.at(d) for d in range(n_dims)])
        used = sorted(d for d in expr.dims if d is not None)
        self.n_dims = n_dims if n_dims is not None else used[-1] + 1
        if used[-1] >= self.n_dims:
            raise ValueError(
                f"{expr} uses input dimension {used[-1]} but n_dims is {self.n_dims} "
                "(a dimension index exceeds the data)"
            )
        self.expr = expr
        self.atoms: tuple[Atom, ...] = tuple(expr.atoms())
        sizes = [len(base_symbol(a.kernel).params) for a in self.atoms]
        P = max(sizes)
        A = len(self.atoms)
        if isinstance(params, Tensor):
            if params.ndim != 2 or params.shape[0] != A or params.shape[1] < P:
                raise ValueError(
                    f"params must have shape (atoms, P) = ({A}, >= {P}), got {tuple(params.shape)}"
                )
            self.params = params[:, :P]
        else:
            rows = list(params)
            if len(rows) != A:
                raise ValueError(f"{expr} has {A} atoms but {len(rows)} parameter sets were given")
            table = torch.ones(A, P, dtype=dtype)
            for i, (atom, row) in enumerate(zip(self.atoms, rows)):
                names = base_symbol(atom.kernel).param_names
                if set(row) != set(names):
                    raise ValueError(
                        f"atom {i} ({atom.kernel}@{atom.dim}) needs parameters {list(names)}, "
                        f"got {sorted(row)}"
                    )
                table[i, : len(names)] = torch.tensor([float(row[n]) for n in names], dtype=dtype)
            self.params = table
        mask = torch.arange(P)[None, :] < torch.tensor(sizes)[:, None]
        vals = self.params[mask.to(self.params.device)]
        if not bool(torch.isfinite(vals).all()) or not bool((vals > 0).all()):
            raise DataError(f"every parameter of {expr} must be finite and positive")

    @property
    def n_terms(self) -> int:
        """Number of atoms (sets the dense evaluation's working memory)."""
        return len(self.atoms)

    def operator(self, X1: Tensor, X2: Tensor | None = None) -> DenseKernelOperator:
        """``K(X1, X2)`` as a :class:`~amorgp.lazy_kernels.KernelOperator` (``X2=None``:
        the symmetric ``K(X1, X1)``)."""
        return DenseKernelOperator(self, X1, X2)

    @cached_property
    def _groups(self) -> list[tuple[str, np.ndarray]]:
        kinds: dict[str, list[int]] = {}
        for i, a in enumerate(self.atoms):
            kinds.setdefault(a.kernel, []).append(i)
        return [(k, np.asarray(v)) for k, v in kinds.items()]

    def _atom_values(self, X1: Tensor, X2: Tensor | None) -> list[Tensor]:
        params = self.params.to(device=X1.device, dtype=X1.dtype)
        out: list[Tensor | None] = [None] * len(self.atoms)
        for kind, idx in self._groups:
            dims = torch.as_tensor([self.atoms[i].dim for i in idx], device=X1.device)
            xa = X1[:, dims].T  # (A_k, N)
            if X2 is None:
                x1, x2 = xa, xa
            else:
                x1, x2 = xa[:, :, None], X2[:, dims].T[:, None, :]
            vals = evaluate_symbol(compile_symbol(kind), x1, x2, params[torch.as_tensor(idx)])
            for j, i in enumerate(idx.tolist()):
                out[i] = vals[j]
        return [v for v in out if v is not None]

    def _combine(self, e: Expr, values: list[Tensor], counter: list[int]) -> Tensor:
        if isinstance(e, Atom):
            counter[0] += 1
            return values[counter[0] - 1]
        assert isinstance(e, Sum | Product)
        parts = [self._combine(c, values, counter) for c in e.children]
        acc = parts[0]
        for p in parts[1:]:
            acc = acc + p if isinstance(e, Sum) else acc * p
        return acc

    def __call__(self, X1: Tensor, X2: Tensor | None = None) -> Tensor:
        """Kernel matrix ``(N, M)`` for ``X1 (N, D)`` and ``X2 (M, D)`` (default ``X1``)."""
        X1 = _as_inputs(X1, self.n_dims, "X1")
        X2 = X1 if X2 is None else _as_inputs(X2, self.n_dims, "X2")
        return self._combine(self.expr, self._atom_values(X1, X2), [0])

    def diag(self, X: Tensor) -> Tensor:
        """Diagonal ``k(x_n, x_n)``, ``(N,)``."""
        X = _as_inputs(X, self.n_dims, "X")
        return self._combine(self.expr, self._atom_values(X, None), [0])

    def __repr__(self) -> str:
        return f"ExpressionKernel({str(self.expr)!r})"
