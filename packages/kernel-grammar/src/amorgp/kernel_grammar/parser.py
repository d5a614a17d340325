"""Text syntax of kernel expressions: tokenizer, recursive-descent parser, errors with a caret.

Grammar (EBNF; whitespace is ignored between tokens, names are case-insensitive)::

    expression = term , { "+" , term } ;
    term       = factor , { ( "*" | "x" | "X" | "×" ) , factor } ;
    factor     = primary , [ "@" , index ] ;
    primary    = kernel | "(" , expression , ")" ;
    kernel     = "SE" | "LIN" | "PER" | "MAT52" | "RQ" ;   (* any registered elementary kernel *)
    index      = digit , { digit } ;                        (* 0-based input dimension *)

``*`` binds tighter than ``+``.  ``@k`` puts an atom or a parenthesised group on
input dimension ``k`` (0-based).  An expression without any ``@`` is the same
structure in every dimension; an expression with ``@`` must index every atom.

Examples: ``SE + PER``, ``se*lin + se``, ``(SE x LIN + SE)@0 * (SE + PER)@1``.

Other libraries' names are read as the grammar's (:data:`ALIASES`, declared with each
kernel in :mod:`amorgp.kernel_grammar.registry`: ``RBF`` is ``SE``, ``Matern52`` is
``MAT52``, ...); a bare ``Matern`` (whose smoothness differs between
libraries) is refused with a hint.  Parentheses nest at most :data:`MAX_DEPTH` deep.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from amorgp.core.errors import OptionError, shorten
from amorgp.kernel_grammar.expressions import Atom, Expr, Product, Sum
from amorgp.kernel_grammar.registry import ALIASES, ELEMENTARY, Vocabulary

__all__ = ["ALIASES", "MAX_DEPTH", "KernelSyntaxError", "parse"]

MAX_DEPTH = 64
"""Deepest nesting of parentheses accepted (deeper: a :class:`KernelSyntaxError`, never a
``RecursionError``)."""

_MATERN_OTHER = re.compile(r"^MAT(ERN)?_?(12|32|1_2|3_2)?$")
"""A Matérn kernel other than 5/2, or one whose smoothness is not given."""


_ONE_LINE = str.maketrans({"\t": " ", "\n": " ", "\r": " ", "\v": " ", "\f": " "})


class KernelSyntaxError(OptionError):
    """A kernel expression that does not parse.

    Attributes:
        text: the text given to the parser.
        position: 0-based character offset of the problem in ``text``.
        length: number of characters underlined (at least 1).
        reason: one-line description of the problem.
        hint: a suggestion to fix it (may be empty).

    ``str(err)`` shows the reason, the text with a caret under the position and the hint::

        unknown kernel 'SQ' at position 0
          SQ + PER
          ^^
        hint: did you mean 'SE'?
    """

    def __init__(self, reason: str, text: str, position: int, length: int = 1, hint: str = ""):
        self.reason = reason
        self.text = text
        self.position = position
        self.length = max(1, length)
        self.hint = hint
        super().__init__(self._message())

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.text, self.position, self.length, self.hint))

    def _message(self) -> str:
        text, pos, length = self.text.translate(_ONE_LINE), self.position, self.length
        if len(text) > _SHOWN:  # a window of the text around the problem
            start = max(0, min(pos - _SHOWN // 4, len(text) - _SHOWN))
            shown = text[start : start + _SHOWN]
            head, tail = ("..." if start else ""), ("..." if start + _SHOWN < len(text) else "")
            text, pos = head + shown + tail, pos - start + len(head)
            length = max(1, min(length, len(head) + _SHOWN - pos))
        lines = [
            f"{self.reason} at position {self.position}",
            "  " + text,
            "  " + " " * pos + "^" * length,
        ]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


_SHOWN = 72
"""Characters of a long kernel text shown in an error (a window around the problem)."""
_NAME_SHOWN = 40
"""Characters of one token (a name, a number) quoted in an error's reason or hint."""
_MAX_INDEX_DIGITS = 9
"""Most digits of an ``@k`` index (a longer one is refused before ``int()`` reads it)."""


@dataclass(frozen=True)
class _Token:
    kind: str  # NAME, INT, PLUS, TIMES, LPAREN, RPAREN, AT, END
    text: str
    pos: int


@dataclass(frozen=True)
class _Index:
    unindexed: tuple[int, int] | None  # (position, length) of the first atom without '@'
    indexed: bool  # some atom has '@'


_TOKEN_RE = re.compile(
    r"(?P<ws>\s+)|(?P<NAME>[A-Za-z_][A-Za-z0-9_]*)|(?P<INT>[0-9]+)"
    r"|(?P<PLUS>\+)|(?P<TIMES>[*×])|(?P<LPAREN>\()|(?P<RPAREN>\))|(?P<AT>@)"
)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise KernelSyntaxError(
                f"unexpected character {text[pos]!r}",
                text,
                pos,
                hint="use kernel names, '+', '*' (or 'x'), parentheses and '@k'",
            )
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            value = m.group()
            if kind == "NAME" and value in ("x", "X"):
                kind = "TIMES"
            tokens.append(_Token(kind, value, pos))
        pos = m.end()
    tokens.append(_Token("END", "", len(text)))
    return tokens


def _known(vocabulary: Vocabulary | None) -> list[str]:
    """The elementary kernels to suggest: those of ``vocabulary`` (its symbols that are
    not products) or every registered one."""
    if vocabulary is None:
        return list(ELEMENTARY)
    return [s for s in vocabulary.symbols if "*" not in s]


def _unknown_name_hint(name: str, vocabulary: Vocabulary | None = None) -> str:
    upper = name.upper()
    known_list = _known(vocabulary)
    known = shorten(", ".join(known_list), _SHOWN * 2)
    if _MATERN_OTHER.match(upper):
        if "MAT52" in known_list:
            return (
                "the grammar's Matérn kernel is MAT52 (smoothness nu = 5/2; also written "
                f"Matern52); known kernels: {known}"
            )
        return f"this network's vocabulary has no Matérn kernel; its kernels: {known}"
    for elementary in ELEMENTARY:
        rest = upper[len(elementary) :]
        if upper.startswith(elementary) and rest.isascii() and rest.isdigit() and len(rest) < 10:
            return (
                f"input dimensions are written with '@' and count from 0: "
                f"write '{elementary}@{int(rest)}' for dimension {int(rest)}"
            )
    if "X" in upper:
        parts = upper.split("X")
        if len(parts) > 1 and all(p in ELEMENTARY or p in ALIASES for p in parts):
            return f"separate the product operator by spaces: {shorten(' x '.join(parts), _SHOWN, quote=True)}"
    close = difflib.get_close_matches(upper, known_list, n=1, cutoff=0.4)
    if close:
        return f"did you mean '{close[0]}'? known kernels: {known}"
    return f"known kernels: {known}"


class _Parser:
    def __init__(self, text: str, n_dims: int | None, vocabulary: Vocabulary | None) -> None:
        self.text = text
        self.n_dims = n_dims
        self.vocabulary = vocabulary
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def error(self, reason: str, tok: _Token, hint: str = "", length: int | None = None) -> None:
        raise KernelSyntaxError(
            reason, self.text, tok.pos, len(tok.text) if length is None else length, hint
        )

    def parse(self) -> Expr:
        if self.tok.kind == "END":
            self.error("empty kernel expression", self.tok, "write e.g. 'SE + PER'")
        expr, _ = self.expression()
        if self.tok.kind == "RPAREN":
            self.error(
                "unbalanced parentheses: ')' without a matching '('",
                self.tok,
                "remove this ')' or add a '(' before it",
            )
        if self.tok.kind != "END":
            self.error(
                f"unexpected {shorten(self.tok.text, _NAME_SHOWN, quote=True)}",
                self.tok,
                "combine kernels with '+' or '*'",
            )
        return expr

    # Each parse function returns the expression and an _Index summary: the span of the
    # first atom without '@' (or None) and whether any atom has '@' (for mixing errors).
    def expression(self) -> tuple[Expr, _Index]:
        expr, info = self.term()
        terms = [expr]
        while self.tok.kind == "PLUS":
            self.i += 1
            rhs, more = self.term()
            info = self._combine(info, more)
            terms.append(rhs)
        return (expr if len(terms) == 1 else Sum(terms)), info

    def term(self) -> tuple[Expr, _Index]:
        expr, info = self.factor()
        factors = [expr]
        while self.tok.kind == "TIMES":
            self.i += 1
            rhs, more = self.factor()
            info = self._combine(info, more)
            factors.append(rhs)
        return (expr if len(factors) == 1 else Product(factors)), info

    def _combine(self, a: _Index, b: _Index) -> _Index:
        unindexed = a.unindexed if a.unindexed is not None else b.unindexed
        indexed = a.indexed or b.indexed
        if unindexed is not None and indexed:
            raise KernelSyntaxError(
                "kernel without '@' mixed with kernels on one dimension",
                self.text,
                unindexed[0],
                unindexed[1],
                hint="either index every kernel ('SE@0 + PER@0') or none ('SE + PER' = "
                "the same structure in every dimension)",
            )
        return _Index(unindexed, indexed)

    def factor(self) -> tuple[Expr, _Index]:
        expr, info = self.primary()
        if self.tok.kind == "AT":
            at = self.tok
            self.i += 1
            if self.tok.kind != "INT":
                self.error(
                    "expected a dimension index after '@'",
                    self.tok,
                    "write e.g. 'SE@0' (dimensions count from 0)",
                )
            idx_tok = self.tok
            if len(idx_tok.text) > _MAX_INDEX_DIGITS:
                self.error(
                    f"dimension index of {len(idx_tok.text)} digits is too large",
                    idx_tok,
                    "dimensions count from 0 up to the number of input columns - 1",
                )
            dim = int(idx_tok.text)
            self.i += 1
            if self.n_dims is not None and dim >= self.n_dims:
                self.error(
                    f"dimension index {dim} out of range for data with {self.n_dims} "
                    f"input dimension{'s' if self.n_dims != 1 else ''}",
                    idx_tok,
                    f"valid indices are 0..{self.n_dims - 1} (0-based)",
                )
            if info.indexed:
                self.error(
                    "dimension given twice: this group already contains '@' indices",
                    at,
                    "put '@k' either on the group or on its atoms, not both",
                )
            expr = expr.at(dim)
            info = _Index(None, True)
        return expr, info

    def primary(self) -> tuple[Expr, _Index]:
        tok = self.tok
        if tok.kind == "NAME":
            name = tok.text.upper()
            name = ALIASES.get(name, name)
            if name not in ELEMENTARY:
                self.error(
                    f"unknown kernel {shorten(tok.text, _NAME_SHOWN, quote=True)}",
                    tok,
                    _unknown_name_hint(tok.text, self.vocabulary),
                )
            self.i += 1
            return Atom(name), _Index((tok.pos, len(tok.text)), False)
        if tok.kind == "LPAREN":
            if self.depth >= MAX_DEPTH:
                self.error(
                    f"parentheses nested deeper than {MAX_DEPTH} levels",
                    tok,
                    "remove redundant parentheses",
                )
            self.i += 1
            self.depth += 1
            expr, info = self.expression()
            self.depth -= 1
            if self.tok.kind != "RPAREN":
                self.error(
                    "unbalanced parentheses: '(' is never closed",
                    tok,
                    f"add a ')' (found {shorten(self.tok.text, _NAME_SHOWN, quote=True)} instead)"
                    if self.tok.kind != "END"
                    else "add a ')' at the end of the group",
                )
            self.i += 1
            return expr, info
        if tok.kind == "END":
            self.error("expression ends too early", tok, "a kernel or '(' must follow")
        if tok.kind == "RPAREN":
            self.error(
                "unbalanced parentheses or empty group", tok, "a kernel must come before ')'"
            )
        if tok.kind == "INT":
            self.error(
                f"unexpected number {shorten(tok.text, _NAME_SHOWN, quote=True)}",
                tok,
                "input dimensions are written after '@', e.g. 'SE@1'",
            )
        self.error(
            f"unexpected {shorten(tok.text, _NAME_SHOWN, quote=True)}",
            tok,
            "a kernel name or '(' must come here",
        )
        raise AssertionError("unreachable")


def parse(text: str, n_dims: int | None = None, vocabulary: Vocabulary | None = None) -> Expr:
    """Parse a kernel expression.

    Args:
        text: e.g. ``"SE + PER"`` (the same structure in every input dimension) or
            ``"(SE*LIN + SE)@0 * (SE + PER)@1"`` (per dimension, 0-based ``@k``).
            Case, whitespace and the product spellings ``*``, ``x``, ``×`` are free.
        n_dims: number of input dimensions of the data, if known: ``@k`` with
            ``k >= n_dims`` is then an error.
        vocabulary: the symbols the caller accepts, if known: the hint of an unknown
            name suggests only these (the parse itself accepts every registered kernel).

    Returns:
        The expression (flattened, canonically ordered); ``str()`` of it parses back to it.

    Raises:
        KernelSyntaxError: (a ``ValueError``) with ``.position`` and a caret message.
        ValueError: if ``n_dims < 1``.

    Example:
        >>> str(parse("per + se x lin"))
        'PER + SE*LIN'
        >>> str(parse("(SE*LIN + SE)@0 * (SE + PER)@1"))
        '(SE + SE*LIN)@0 * (SE + PER)@1'
        >>> parse("SE@2", n_dims=2)
        Traceback (most recent call last):
        ...
        amorgp.kernel_grammar.parser.KernelSyntaxError: dimension index 2 out of range for data with 2 input dimensions at position 3
          SE@2
             ^
        hint: valid indices are 0..1 (0-based)
    """
    if not isinstance(text, str):
        raise ValueError(f"a kernel expression must be a string, got {type(text).__name__}")
    if n_dims is not None and (
        isinstance(n_dims, bool) or not isinstance(n_dims, int) or n_dims < 1
    ):
        raise ValueError(f"n_dims must be a positive integer, got {n_dims!r}")
    return _Parser(text, n_dims, vocabulary).parse()
