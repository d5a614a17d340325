"""The amortizable kernel space: products over input dimensions of sums of base symbols.

A :class:`DimWiseStructure` is the paper's kernel structure

.. math::

    K(x, x') = \\prod_{d=0}^{D-1} \\sum_{l=0}^{L_d - 1} k_{s_{dl}}(x_d, x'_d; \\theta_{dl}),

where every ``s_dl`` is a base symbol (an elementary kernel or a 2-gram product
such as ``SE*LIN``) acting on input dimension ``d``.  It is stored as
``dims[d] = (s_d0, s_d1, ...)``: canonical base-symbol names, sorted per
dimension (elementary symbols first, each group in registry order, e.g.
``SE < LIN < PER < SE*LIN < SE*PER < LIN*PER``).  Repeated addends are kept:
``SE + SE`` has two independent sets of parameters.

:func:`amorgp.kernel_grammar.encoding.encode` turns a list of structures into the padded
integer arrays of the batch contract, ``symbols (B, D, L)`` (vocabulary ids, 0 = padding) and
``symbol_mask (B, D, L)``; :func:`~amorgp.kernel_grammar.encoding.decode` inverts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product as cartesian
from typing import Any, NamedTuple

import numpy as np

from amorgp.core.units import Unit
from amorgp.kernel_grammar.expressions import Atom, Expr, Product, Sum
from amorgp.kernel_grammar.parser import parse
from amorgp.kernel_grammar.registry import (
    ELEMENTARY,
    BaseSymbol,
    ParamSpec,
    Vocabulary,
    base_symbol,
)

__all__ = ["DimWiseStructure", "ParamName", "symbol_sort_key"]


def symbol_sort_key(name: str) -> tuple[int, tuple[int, ...]]:
    """Canonical order of base symbols: number of factors, then registry order of the factors."""
    order = list(ELEMENTARY)
    factors = base_symbol(name).factors
    return (len(factors), tuple(order.index(f) for f in factors))


class ParamName(NamedTuple):
    """Where one kernel parameter of a structure lives: ``params[dim, addend, slot]``.

    ``slot`` is the index of ``param`` in ``base_symbol(symbol).params``.
    """

    dim: int
    addend: int
    symbol: str
    param: str
    slot: int

    def __str__(self) -> str:
        return f"d{self.dim}.{self.addend}.{self.symbol}.{self.param}"


@dataclass(frozen=True)
class DimWiseStructure:
    """A product over input dimensions of sums of base symbols (frozen, hashable).

    Args:
        dims: per input dimension, the base-symbol names of its addends (any order,
            any case; stored canonical and sorted).

    Raises:
        ValueError: no dimension, a dimension without addends, or an invalid symbol.

    Example:
        >>> s = DimWiseStructure.parse("(SE*LIN + SE)@0 * (SE + PER)@1")
        >>> s.dims
        (('SE', 'SE*LIN'), ('SE', 'PER'))
        >>> str(s)
        '(SE + SE*LIN)@0 * (SE + PER)@1'
    """

    dims: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if isinstance(self.dims, str) or not isinstance(self.dims, Sequence):
            raise ValueError(
                "dims must be a sequence (one entry per input dimension) of sequences of "
                f"symbol names, got {self.dims!r}; use DimWiseStructure.parse for text"
            )
        if len(self.dims) == 0:
            raise ValueError("a structure needs at least one input dimension")
        canon: list[tuple[str, ...]] = []
        for d, addends in enumerate(self.dims):
            if isinstance(addends, str):
                raise ValueError(
                    f"dimension {d}: expected a sequence of symbol names, got the string "
                    f"{addends!r} (write ({addends!r},))"
                )
            if len(addends) == 0:
                raise ValueError(
                    f"dimension {d} has no addend; every input dimension needs at least one "
                    "base symbol"
                )
            try:
                names = [base_symbol(str(s)).name for s in addends]
            except ValueError as err:
                raise ValueError(f"dimension {d}: {err}") from None
            canon.append(tuple(sorted(names, key=symbol_sort_key)))
        object.__setattr__(self, "dims", tuple(canon))

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def parse(
        cls, text: str, n_dims: int | None = None, vocabulary: Vocabulary | None = None
    ) -> DimWiseStructure:
        """Parse text and convert it with :meth:`from_expr`.

        Args:
            text: kernel expression (see :func:`amorgp.kernel_grammar.parse`).
            n_dims: number of input dimensions; required when the text has no ``@``.
            vocabulary: if given, every symbol must belong to it.

        Raises:
            KernelSyntaxError: the text does not parse.
            ValueError: the expression is not in the dimension-wise space.
        """
        return cls.from_expr(parse(text, n_dims, vocabulary), n_dims, vocabulary)

    @classmethod
    def coerce(
        cls, kernel: str | DimWiseStructure, n_dims: int, vocabulary: Vocabulary | None = None
    ) -> DimWiseStructure:
        """The structure of ``kernel`` (text or a structure) for data with ``n_dims`` columns.

        Args:
            kernel: kernel text (parsed with :meth:`parse`) or a structure.
            n_dims: number of input columns of the data.
            vocabulary: if given, every symbol must belong to it.

        Raises:
            KernelSyntaxError: the text does not parse.
            ValueError: ``kernel`` is neither text nor a structure, its number of input
                dimensions differs from ``n_dims``, or a symbol is outside ``vocabulary``.
        """
        if isinstance(kernel, DimWiseStructure):
            s = kernel
        elif isinstance(kernel, str):  # (the vocabulary only shapes a syntax error's hint)
            s = cls.from_expr(parse(kernel, n_dims, vocabulary), n_dims)
        else:
            raise ValueError(f"a kernel is text or a DimWiseStructure, got {type(kernel).__name__}")
        if s.n_dims != n_dims:
            raise ValueError(
                f"kernel {s} has {s.n_dims} input dimension(s) but the data has {n_dims}"
            )
        if vocabulary is not None:
            s.check_vocabulary(vocabulary)
        return s

    @classmethod
    def from_expr(
        cls, expr: Expr, n_dims: int | None = None, vocabulary: Vocabulary | None = None
    ) -> DimWiseStructure:
        """Convert an expression that lies in the dimension-wise space.

        Within one input dimension, products of sums are distributed
        (``(SE + LIN) * PER`` -> ``SE*PER + LIN*PER``) and every product of two
        distinct elementary kernels becomes a 2-gram base symbol.  A dimension-free
        expression is used in every one of the ``n_dims`` dimensions.

        Args:
            expr: the expression.
            n_dims: number of input dimensions.  Required for a dimension-free
                expression; for an indexed one it defaults to ``max index + 1`` and
                every dimension ``0..n_dims-1`` must appear.
            vocabulary: if given, every resulting symbol must belong to it.

        Raises:
            ValueError: saying why the expression is not in the space (a sum across
                input dimensions, a product of 3 or more elementary kernels, a repeated
                factor such as ``SE*SE``, a dimension without a kernel, a symbol outside
                the vocabulary, an index ``>= n_dims``).
        """
        if not isinstance(expr, Expr):
            raise ValueError(f"expected a kernel expression (Expr), got {type(expr).__name__}")
        if n_dims is not None and (
            isinstance(n_dims, bool) or not isinstance(n_dims, int) or n_dims < 1
        ):
            raise ValueError(f"n_dims must be a positive integer, got {n_dims!r}")
        if not expr.is_indexed:
            if n_dims is None:
                raise ValueError(
                    f"{expr} has no '@' dimension indices, so it is the same structure in "
                    "every dimension: give n_dims"
                )
            symbols = _dimension_symbols(expr, None)
            structure = cls(tuple(symbols for _ in range(n_dims)))
        else:
            dims_used = sorted(d for d in expr.dims if d is not None)
            if n_dims is None:
                n_dims = dims_used[-1] + 1
            if dims_used[-1] >= n_dims:
                raise ValueError(
                    f"{expr} uses input dimension {dims_used[-1]} but the data has "
                    f"{n_dims} (indices are 0-based)"
                )
            factors = list(expr.children) if isinstance(expr, Product) else [expr]
            groups: dict[int, list[Expr]] = {}
            for f in factors:
                fd = sorted(d for d in f.dims if d is not None)
                if len(fd) > 1:
                    raise ValueError(
                        f"{f} combines input dimensions {fd} inside a sum; the dimension-wise "
                        "space is a product over dimensions of sums within one dimension "
                        "(e.g. (SE + PER)@0 * LIN@1)"
                    )
                groups.setdefault(fd[0], []).append(f)
            missing = [d for d in range(n_dims) if d not in groups]
            if missing:
                raise ValueError(
                    f"{expr} has no kernel on input dimension(s) {missing}; every one of the "
                    f"{n_dims} dimensions needs at least one base symbol"
                )
            per_dim = []
            for d in range(n_dims):
                g = groups[d]
                e = g[0] if len(g) == 1 else Product(g)
                per_dim.append(_dimension_symbols(e, d))
            structure = cls(tuple(per_dim))
        if vocabulary is not None:
            structure.check_vocabulary(vocabulary)
        return structure

    # -- views --------------------------------------------------------------------------
    @property
    def n_dims(self) -> int:
        """Number of input dimensions ``D``."""
        return len(self.dims)

    @property
    def n_addends(self) -> tuple[int, ...]:
        """Number of addends ``L_d`` per dimension."""
        return tuple(len(a) for a in self.dims)

    @property
    def max_addends(self) -> int:
        return max(self.n_addends)

    @property
    def is_uniform(self) -> bool:
        """True if every dimension has the same sum of symbols."""
        return all(a == self.dims[0] for a in self.dims)

    def symbols(self) -> list[BaseSymbol]:
        """All base symbols, dimension-major."""
        return [base_symbol(s) for a in self.dims for s in a]

    def check_vocabulary(self, vocabulary: Vocabulary) -> None:
        """Raise ``ValueError`` naming the first symbol that is not in ``vocabulary``."""
        for d, addends in enumerate(self.dims):
            for s in addends:
                if s not in vocabulary.symbols:
                    raise ValueError(
                        f"symbol {s} (input dimension {d}) is not in vocabulary "
                        f"{vocabulary.name!r} ({', '.join(vocabulary.symbols)})"
                    )

    def param_names(self) -> list[ParamName]:
        """Flat list of every kernel parameter, ordered by (dim, addend, slot).

        The order matches a padded parameter tensor ``params (D, L, P)`` read with its
        slot mask; the observation noise is not included (it is one per dataset).
        """
        return [
            ParamName(d, a, s, p.name, j)
            for d, addends in enumerate(self.dims)
            for a, s in enumerate(addends)
            for j, p in enumerate(base_symbol(s).params)
        ]

    def param_units(self) -> list[Unit]:
        """Like :meth:`param_names`, the :class:`~amorgp.core.units.Unit` of each (how its
        value maps to original units: :attr:`BaseSymbol.param_units`)."""
        return [base_symbol(n.symbol).param_units[n.slot] for n in self.param_names()]

    def param_specs(self) -> list[tuple[ParamName, ParamSpec]]:
        """Like :meth:`param_names`, each with its :class:`ParamSpec` (kind and prior)."""
        return [(n, base_symbol(n.symbol).params[n.slot]) for n in self.param_names()]

    @property
    def n_params(self) -> int:
        """Number of kernel parameters (noise excluded)."""
        return sum(len(base_symbol(s).params) for a in self.dims for s in a)

    def reference(self, X1: Any, X2: Any, params: Any) -> np.ndarray:
        """Dense numpy float64 kernel matrix, the oracle for batched/lazy evaluators.

        ``K[n, m] = prod_d sum_l k_{s_dl}(X1[n, d], X2[m, d]; params[d, l, :])`` computed
        with :meth:`BaseSymbol.reference` (plain loops; not for hot paths).

        Args:
            X1: ``(N, D)`` inputs (``D = n_dims``; a 1-D array is ``(N, 1)``).
            X2: ``(M, D)`` inputs.
            params: ``(D', L', P')`` constrained parameter values with ``D' >= n_dims``,
                ``L' >= max_addends`` and ``P'`` at least the slots of every symbol
                (slot order = ``base_symbol(name).params``); extra entries are ignored.

        Returns:
            ``(N, M)`` float64.

        Raises:
            ValueError: wrong shapes or non-finite inputs/parameters.
        """
        X1 = np.asarray(X1, dtype=np.float64)
        X2 = np.asarray(X2, dtype=np.float64)
        X1 = X1[:, None] if X1.ndim == 1 else X1
        X2 = X2[:, None] if X2.ndim == 1 else X2
        theta = np.asarray(params, dtype=np.float64)
        for name, arr in (("X1", X1), ("X2", X2)):
            if arr.ndim != 2 or arr.shape[1] != self.n_dims:
                raise ValueError(
                    f"{name} must have shape (N, {self.n_dims}) for {self}, got {arr.shape}"
                )
        n_slots = max(len(base_symbol(s).params) for a in self.dims for s in a)
        if (
            theta.ndim != 3
            or theta.shape[0] < self.n_dims
            or theta.shape[1] < self.max_addends
            or theta.shape[2] < n_slots
        ):
            raise ValueError(
                f"params must have shape (>= {self.n_dims}, >= {self.max_addends}, "
                f">= {n_slots}) for {self}, got {theta.shape}"
            )
        used = theta[: self.n_dims, : self.max_addends, :n_slots]
        if not (np.isfinite(X1).all() and np.isfinite(X2).all()):
            raise ValueError("X1 and X2 must be finite")
        K = np.ones((X1.shape[0], X2.shape[0]))
        for d, addends in enumerate(self.dims):
            S = np.zeros_like(K)
            for a, name in enumerate(addends):
                sym = base_symbol(name)
                values = used[d, a, : len(sym.params)]
                if not (np.isfinite(values).all() and (values > 0).all()):
                    raise ValueError(
                        f"parameters of {name} (dim {d}, addend {a}) must be finite and "
                        f"positive, got {values.tolist()}"
                    )
                S += sym.reference(X1[:, d], X2[:, d], dict(zip(sym.param_names, values)))
            K *= S
        return K

    def to_expr(self) -> Expr:
        """The equivalent fully indexed expression ``prod_d sum_l prod_factors Atom(f, d)``."""
        dim_exprs: list[Expr] = []
        for d, addends in enumerate(self.dims):
            terms: list[Expr] = []
            for s in addends:
                atoms: list[Expr] = [Atom(f, d) for f in base_symbol(s).factors]
                terms.append(atoms[0] if len(atoms) == 1 else Product(atoms))
            dim_exprs.append(terms[0] if len(terms) == 1 else Sum(terms))
        return dim_exprs[0] if len(dim_exprs) == 1 else Product(dim_exprs)

    def dim_text(self, d: int) -> str:
        """Text of the sum in dimension ``d`` without the index, e.g. ``SE + SE*LIN``."""
        return " + ".join(self.dims[d])

    def __str__(self) -> str:
        return str(self.to_expr())


def _monomials(e: Expr, too_long: Callable[[list[str]], None]) -> list[list[str]]:
    """Distribute ``e`` into a sum of monomials (lists of elementary kernel names).

    ``too_long`` is called (and must raise) as soon as a monomial of more than two
    factors appears, so products of many sums are never expanded in full.
    """
    if isinstance(e, Atom):
        return [[e.kernel]]
    if isinstance(e, Sum):
        return [m for c in e.children for m in _monomials(c, too_long)]
    assert isinstance(e, Product)
    out: list[list[str]] = [[]]
    for c in e.children:
        out = [a + b for a, b in cartesian(out, _monomials(c, too_long))]
        for m in out:
            if len(m) > 2:
                too_long(m)
    return out


def _dimension_symbols(e: Expr, d: int | None) -> tuple[str, ...]:
    where = "" if d is None else f" in input dimension {d}"

    def too_long(m: list[str]) -> None:
        raise ValueError(
            f"{e}{where} contains the product {'*'.join(m)} of {len(m)} elementary kernels "
            "(after distributing products of sums); base symbols have at most 2 factors"
        )

    symbols = []
    for m in _monomials(e, too_long):
        text = "*".join(m)
        if len(m) == 2 and m[0] == m[1]:
            raise ValueError(
                f"{e}{where} contains the product {text}, which repeats the factor {m[0]}; "
                "a base symbol is an elementary kernel or a product of two different ones"
            )
        symbols.append(base_symbol(text).name)
    return tuple(symbols)
