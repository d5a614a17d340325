"""Kernel expressions: an AST of elementary kernels on input dimensions.

An expression is built from :class:`Atom` leaves (one elementary kernel, e.g.
``SE``, acting on one input dimension ``d`` or, when ``dim is None``, on every
input dimension in the same way) with ``+`` and ``*``:

>>> from amorgp.kernel_grammar.expressions import Atom
>>> se, lin, per = Atom("SE"), Atom("LIN"), Atom("PER")
>>> e = per + se * lin + se
>>> str(e)
'SE + PER + SE*LIN'
>>> e == se + lin * se + per
True

``+`` and ``*`` build *flattened* n-ary :class:`Sum` and :class:`Product` nodes
whose children are kept in a canonical order, so equal kernels written in a
different order compare (and hash) equal, and ``str()`` gives one canonical
text that :func:`amorgp.kernel_grammar.parse` reads back
(``parse(str(e)) == e``).  Repeated children are kept (``SE + SE`` is a sum of
two squared-exponential kernels with their own parameters, not ``SE``).

An expression is either *dimension-free* (every atom has ``dim=None``: the same
structure in every input dimension) or *fully indexed* (every atom names its
input dimension); mixing the two raises ``ValueError``.

Canonical order: children are sorted by (input dimensions used, node kind
``Atom < Product < Sum``, then elementary kernels in registry order
``SE, LIN, PER, MAT52, RQ`` / children recursively).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

from amorgp.kernel_grammar.registry import ELEMENTARY

__all__ = ["Atom", "Expr", "Product", "Sum"]

SortKey = tuple[Any, ...]


class Expr:
    """Base class of kernel expressions (immutable, hashable, ordered canonically).

    Dimensions, sort key and hash are computed once at construction.
    """

    __slots__ = ("_dimset", "_hash", "_key")
    _dimset: frozenset[int | None]
    _hash: int
    _key: SortKey

    # -- construction -------------------------------------------------------------------
    def __add__(self, other: Expr) -> Expr:
        if not isinstance(other, Expr):
            return NotImplemented
        return Sum((self, other))

    def __mul__(self, other: Expr) -> Expr:
        if not isinstance(other, Expr):
            return NotImplemented
        return Product((self, other))

    # -- structure ----------------------------------------------------------------------
    def atoms(self) -> Iterator[Atom]:
        """All leaves, left to right in canonical order."""
        raise NotImplementedError

    @property
    def dims(self) -> frozenset[int | None]:
        """The set of input dimensions the atoms act on (``{None}`` if dimension-free)."""
        return self._dimset

    @property
    def is_indexed(self) -> bool:
        """True if every atom names its input dimension."""
        return None not in self.dims

    def at(self, dim: int) -> Expr:
        """The same expression with every atom on input dimension ``dim``.

        Raises:
            ValueError: if the expression is already indexed or ``dim < 0``.
        """
        raise NotImplementedError

    def sort_key(self) -> SortKey:
        """Total order used for canonical ordering of children."""
        return self._key

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: Expr) -> bool:
        return self.sort_key() < other.sort_key()

    # -- printing -----------------------------------------------------------------------
    def _text(self, show_dims: bool) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return _format(self)

    def tree(self) -> str:
        """A readable multi-line tree print.

        Nodes living on one input dimension show it after ``@``; for
        ``(SE@0 + LIN@0) * PER@1``::

            Product
            ├── Sum @0
            │   ├── SE @0
            │   └── LIN @0
            └── PER @1

        Returns:
            The tree, one node per line.
        """
        lines: list[str] = []
        _tree(self, "", "", lines)
        return "\n".join(lines)


def _dim_key(dims: frozenset[int | None]) -> tuple[int, ...]:
    return tuple(sorted(-1 if d is None else d for d in dims))


class Atom(Expr):
    """An elementary kernel on one input dimension (or every dimension if ``dim is None``).

    Args:
        kernel: elementary kernel name, case-insensitive (``"se"`` -> ``"SE"``).
        dim: 0-based input dimension, or ``None`` for "every dimension".

    Raises:
        ValueError: unknown kernel name or a negative / non-integer dimension.
    """

    __slots__ = ("_dim", "_kernel")

    def __init__(self, kernel: str, dim: int | None = None) -> None:
        name = str(kernel).strip().upper()
        if name not in ELEMENTARY:
            raise ValueError(
                f"unknown elementary kernel {kernel!r}; known: {', '.join(ELEMENTARY)}"
            )
        if dim is not None and (
            isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 0
        ):
            raise ValueError(f"an input dimension must be an integer >= 0, got {dim!r}")
        self._kernel = name
        self._dim = None if dim is None else int(dim)
        self._dimset = frozenset({self._dim})
        self._key = (_dim_key(self._dimset), 0, list(ELEMENTARY).index(name))
        self._hash = hash(("Atom", name, self._dim))

    @property
    def kernel(self) -> str:
        return self._kernel

    @property
    def dim(self) -> int | None:
        return self._dim

    def atoms(self) -> Iterator[Atom]:
        yield self

    def at(self, dim: int) -> Atom:
        if self._dim is not None:
            raise ValueError(f"{self} already has an input dimension")
        return Atom(self._kernel, dim)

    def _text(self, show_dims: bool) -> str:
        if show_dims and self._dim is not None:
            return f"{self._kernel}@{self._dim}"
        return self._kernel

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and (self._kernel, self._dim) == (other._kernel, other._dim)

    __hash__ = Expr.__hash__

    def __repr__(self) -> str:
        return f"Atom({self._kernel!r}, {self._dim!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuild on unpickling: cached hashes depend on the interpreter's hash seed
        return (Atom, (self._kernel, self._dim))


class _Nary(Expr):
    """Flattened n-ary node with canonically sorted children."""

    __slots__ = ("_children",)
    _rank = 0
    _op = ""

    def __init__(self, children: tuple[Expr, ...] | list[Expr]) -> None:
        flat: list[Expr] = []
        for c in children:
            if not isinstance(c, Expr):
                raise TypeError(f"{type(self).__name__} children must be Expr, got {type(c)}")
            if type(c) is type(self):
                flat.extend(c.children)
            else:
                flat.append(c)
        if len(flat) < 2:
            raise ValueError(f"a {type(self).__name__} needs at least two children")
        dims = frozenset().union(*(c.dims for c in flat))
        if None in dims and len(dims) > 1:
            raise ValueError(
                "cannot combine kernels on every dimension (no '@') with kernels on one "
                f"dimension ('@k'): {' , '.join(str(c) for c in flat)}"
            )
        self._children = tuple(sorted(flat, key=lambda c: c._key))
        self._dimset = dims
        self._key = (_dim_key(dims), self._rank, tuple(c._key for c in self._children))
        self._hash = hash((type(self).__name__, self._children))

    @property
    def children(self) -> tuple[Expr, ...]:
        return self._children

    def atoms(self) -> Iterator[Atom]:
        for c in self._children:
            yield from c.atoms()

    def at(self, dim: int) -> Expr:
        return type(self)([c.at(dim) for c in self._children])

    def _text(self, show_dims: bool) -> str:
        parts = []
        for c in self._children:
            t = c._text(show_dims)
            if isinstance(c, Sum) and isinstance(self, Product):
                t = f"({t})"
            parts.append(t)
        return self._op.join(parts)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            type(other) is type(self)
            and self._hash == other._hash
            and self._children == other._children
        )

    __hash__ = Expr.__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._children)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._children,))


class Sum(_Nary):
    """Sum of two or more kernels (flattened; children in canonical order)."""

    __slots__ = ()
    _rank = 2
    _op = " + "


class Product(_Nary):
    """Product of two or more kernels (flattened; children in canonical order)."""

    __slots__ = ()
    _rank = 1
    _op = "*"


def _single_dim(e: Expr) -> int | None:
    dims = e.dims
    if len(dims) == 1:
        (d,) = dims
        return d
    return None


def _format(e: Expr) -> str:
    """Canonical text: a sub-expression living on one dimension ``d`` prints as ``(...)@d``."""
    if not e.is_indexed:
        return e._text(show_dims=False)
    d = _single_dim(e)
    if d is not None:
        inner = e._text(show_dims=False)
        return f"{inner}@{d}" if isinstance(e, Atom) else f"({inner})@{d}"
    if isinstance(e, Atom):
        return e._text(show_dims=False)
    assert isinstance(e, _Nary)
    parts = []
    for c in e.children:
        t = _format(c)
        if isinstance(e, Product) and isinstance(c, Sum) and _single_dim(c) is None:
            t = f"({t})"
        parts.append(t)
    return (" * " if isinstance(e, Product) else e._op).join(parts)


def _tree(e: Expr, prefix: str, child_prefix: str, lines: list[str]) -> None:
    d = _single_dim(e)
    suffix = f" @{d}" if d is not None else ""
    label = e.kernel if isinstance(e, Atom) else type(e).__name__
    lines.append(f"{prefix}{label}{suffix}")
    if isinstance(e, _Nary):
        n = len(e.children)
        for i, c in enumerate(e.children):
            last = i == n - 1
            _tree(
                c,
                child_prefix + ("└── " if last else "├── "),
                child_prefix + ("    " if last else "│   "),
                lines,
            )
