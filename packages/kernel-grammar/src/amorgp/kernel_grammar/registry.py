"""Registry of elementary kernels and base symbols, and symbol vocabularies.

Elementary kernels (one input dimension, ``r = x - x'``):

======  =====================================================================  =======================
name    formula                                                                parameters
======  =====================================================================  =======================
SE      ``s^2 exp(-r^2 / (2 l^2))``                                            variance, lengthscale
LIN     ``s^2 x x' + c^2``                                                     variance, offset
PER     ``s^2 exp(-sin^2(pi |r| / p) / (2 l^2))`` (paper form, see below)      variance, lengthscale, period
MAT52   ``s^2 (1 + sqrt5 |r|/l + 5 r^2/(3 l^2)) exp(-sqrt5 |r| / l)``          variance, lengthscale
RQ      ``s^2 (1 + r^2 / (2 alpha l^2))^(-alpha)``                             variance, lengthscale, alpha
======  =====================================================================  =======================

PER uses the paper's ``1/(2 l^2)`` inside the exponent (Bitzer et al. 2023,
Appendix A).  Duvenaud's kernel cookbook uses ``2 sin^2(...) / l_D^2`` instead,
so ``l_D = 2 l``.  GPyTorch's ``PeriodicKernel`` documents the same form but its
code (1.11-1.15) evaluates ``exp(-2 sin^2(...) / l_gp)`` with the lengthscale not
squared, so ``l_gp = 4 l^2`` (checked by lazy-kernels' conformance suite).

A *base symbol* is an elementary kernel or a 2-gram product of two distinct
elementary kernels, e.g. ``SE*LIN``.  A product symbol carries **one** variance
(no redundant amplitudes): ``k_{A*B} = s^2 kt_A kt_B`` where ``kt`` is the
elementary kernel with ``s^2 = 1`` (for LIN, ``kt_LIN = x x' + c^2``).  Its
parameter list is ``variance`` followed by the factors' other parameters, named
``<factor>_<param>`` in lower case, e.g. ``SE*PER``: ``variance, se_lengthscale,
per_lengthscale, per_period``.

A :class:`Vocabulary` is an ordered tuple of symbol names; integer id ``i + 1``
is symbol ``i`` and id ``0`` is padding.  It is data (``to_dict``/``from_dict``)
and is saved with anything that depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import combinations
from typing import Any

import numpy as np

from amorgp.core.units import Unit
from amorgp.kernel_grammar.priors import Exponential, Gamma, Prior
from amorgp.kernel_grammar.transforms import ParamKind

__all__ = [
    "ALIASES",
    "ELEMENTARY",
    "EXTENDED_VOCABULARY",
    "NOISE",
    "PAPER_VOCABULARY",
    "BaseSymbol",
    "ElementaryKernel",
    "ParamSpec",
    "Vocabulary",
    "base_symbol",
    "canonical_symbol_name",
    "register_elementary",
    "unregister_elementary",
]


@dataclass(frozen=True)
class ParamSpec:
    """One positive parameter: its name, kind (decides the transform floor) and prior."""

    name: str
    kind: ParamKind
    prior: Prior
    description: str = ""


VARIANCE = ParamSpec("variance", ParamKind.VARIANCE, Gamma(2.0, 3.0), "signal variance s^2")
NOISE = ParamSpec(
    "noise", ParamKind.NOISE, Exponential(1.0 / 0.15**2), "observation-noise variance sigma^2"
)
_LENGTHSCALE = ParamSpec("lengthscale", ParamKind.LENGTHSCALE, Gamma(2.0, 5.0), "lengthscale l")
_PERIOD = ParamSpec("period", ParamKind.PERIOD, Gamma(2.0, 3.0), "period p")
_OFFSET = ParamSpec("offset", ParamKind.OFFSET, Gamma(2.0, 3.0), "constant offset c^2")
_ALPHA = ParamSpec("alpha", ParamKind.ALPHA, Gamma(2.0, 2.0), "shape alpha (not in the paper)")

UnitKernel = Callable[[np.ndarray, np.ndarray, dict[str, Any]], np.ndarray]


@dataclass(frozen=True)
class ElementaryKernel:
    """An elementary one-dimensional kernel.

    Attributes:
        name: upper-case name used in the grammar (``SE``).
        formula: the kernel with its variance, as text.
        params: parameters besides the variance, in order.
        unit: numpy float64 reference of the unit-variance factor ``kt(x, x')``
            for 1-D inputs ``x1 (n,)`` and ``x2 (m,)``, returning ``(n, m)``.
            For all kernels but LIN the full kernel is ``variance * unit``.
        variance_scales_all: False for LIN, whose variance multiplies ``x x'``
            only (``s^2 x x' + c^2``): the unit factor is ``g + c`` with ``c`` its first
            parameter, and the kernel alone is ``s^2 g + c``.
        stationary: the kernel depends on ``x - x'`` only (False for LIN).  Min-max
            normalising the inputs maps a stationary kernel to one of the same form, so
            its variance has an exact value in original units
            (:meth:`amorgp.core.data.Normalizer.to_original`).
        input_scaled: the parameters measured in units of the input (scaled by the
            column range in original units); ``None``: those of kind ``LENGTHSCALE`` or
            ``PERIOD``.  PER's lengthscale divides ``sin^2(pi r / p)`` and is unit-free.
        aliases: other libraries' names read as this kernel by the parser (upper case,
            without spaces: ``RBF`` for ``SE``).
    """

    name: str
    formula: str
    params: tuple[ParamSpec, ...]
    unit: UnitKernel = field(repr=False, compare=False)
    variance_scales_all: bool = True
    stationary: bool = True
    input_scaled: tuple[str, ...] | None = None
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.input_scaled is None:
            scaled = tuple(
                p.name for p in self.params if p.kind in (ParamKind.LENGTHSCALE, ParamKind.PERIOD)
            )
            object.__setattr__(self, "input_scaled", scaled)
        unknown = set(self.input_scaled or ()) - {p.name for p in self.params}
        if unknown:
            raise ValueError(
                f"{self.name}: input_scaled names unknown parameters {sorted(unknown)}"
            )


def _r(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    return np.asarray(x1, float)[:, None] - np.asarray(x2, float)[None, :]


def _se(x1: np.ndarray, x2: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    return np.exp(-(_r(x1, x2) ** 2) / (2.0 * p["lengthscale"] ** 2))


def _lin(x1: np.ndarray, x2: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    return np.outer(x1, x2) + p["offset"]


def _per(x1: np.ndarray, x2: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    s = np.sin(np.pi * np.abs(_r(x1, x2)) / p["period"])
    return np.exp(-(s**2) / (2.0 * p["lengthscale"] ** 2))


def _mat52(x1: np.ndarray, x2: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    a = np.sqrt(5.0) * np.abs(_r(x1, x2)) / p["lengthscale"]
    return (1.0 + a + a**2 / 3.0) * np.exp(-a)


def _rq(x1: np.ndarray, x2: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    alpha = p["alpha"]
    return (1.0 + _r(x1, x2) ** 2 / (2.0 * alpha * p["lengthscale"] ** 2)) ** (-alpha)


ELEMENTARY: dict[str, ElementaryKernel] = {}
"""The registered elementary kernels by name, in registration order (the order of the
factors in a product symbol's name)."""

ALIASES: dict[str, str] = {}
"""Names of other libraries (scikit-learn, GPyTorch) read as the grammar's kernels (upper
case, without spaces), from each kernel's :attr:`ElementaryKernel.aliases`."""


def register_elementary(kernel: ElementaryKernel) -> ElementaryKernel:
    """Add an elementary kernel (and its aliases) to the registry.

    This is kernel-grammar's one place for a new base kernel: its name, formula,
    parameters with their kinds and priors, numpy reference and aliases.  Names are upper
    case, a letter then letters or digits.

    Raises:
        ValueError: a malformed name, or a name or alias already taken.
    """
    if not (kernel.name.isupper() and kernel.name[0].isalpha() and kernel.name.isalnum()):
        raise ValueError(
            f"elementary kernel names are upper-case alphanumerics, got {kernel.name!r}"
        )
    if kernel.name in ELEMENTARY or kernel.name in ALIASES:
        raise ValueError(f"elementary kernel {kernel.name!r} is already registered")
    taken = [a for a in kernel.aliases if a in ALIASES or a in ELEMENTARY or a == kernel.name]
    if taken or any(a != a.upper() or " " in a for a in kernel.aliases):
        raise ValueError(f"{kernel.name}: aliases must be new upper-case names, got {taken}")
    ELEMENTARY[kernel.name] = kernel
    ALIASES.update(dict.fromkeys(kernel.aliases, kernel.name))
    if "base_symbol" in globals():
        base_symbol.cache_clear()
    return kernel


def unregister_elementary(name: str) -> None:
    """Remove a registered elementary kernel and its aliases (for tests that register a
    kernel temporarily).  Vocabularies using it stop working.

    Raises:
        ValueError: if ``name`` is not registered.
    """
    kernel = ELEMENTARY.pop(name, None)
    if kernel is None:
        raise ValueError(f"elementary kernel {name!r} is not registered")
    for alias in kernel.aliases:
        ALIASES.pop(alias, None)
    base_symbol.cache_clear()


register_elementary(
    ElementaryKernel(
        "SE",
        "s^2 exp(-(x-x')^2 / (2 l^2))",
        (_LENGTHSCALE,),
        _se,
        aliases=("RBF", "SQEXP", "SQUAREDEXPONENTIAL"),
    )
)
register_elementary(
    ElementaryKernel(
        "LIN",
        "s^2 x x' + c^2",
        (_OFFSET,),
        _lin,
        variance_scales_all=False,
        stationary=False,
        aliases=("LINEAR",),
    )
)
register_elementary(
    ElementaryKernel(
        "PER",
        "s^2 exp(-sin^2(pi |x-x'| / p) / (2 l^2))",
        (_LENGTHSCALE, _PERIOD),
        _per,
        input_scaled=("period",),
        aliases=("PERIODIC", "EXPSINESQUARED"),
    )
)
register_elementary(
    ElementaryKernel(
        "MAT52",
        "s^2 (1 + sqrt(5) r / l + 5 r^2 / (3 l^2)) exp(-sqrt(5) r / l), r = |x-x'|",
        (_LENGTHSCALE,),
        _mat52,
        aliases=("MATERN52", "MATERN_52"),
    )
)
register_elementary(
    ElementaryKernel(
        "RQ",
        "s^2 (1 + (x-x')^2 / (2 alpha l^2))^(-alpha)",
        (_LENGTHSCALE, _ALPHA),
        _rq,
        aliases=("RATIONALQUADRATIC",),
    )
)


def canonical_symbol_name(factors: Iterable[str]) -> str:
    """Canonical name of a product of elementary kernels: registry order joined by ``*``."""
    order = list(ELEMENTARY)
    names = [f.upper() for f in factors]
    for n in names:
        if n not in ELEMENTARY:
            raise ValueError(f"unknown elementary kernel {n!r}; known: {', '.join(order)}")
    return "*".join(sorted(names, key=order.index))


@dataclass(frozen=True)
class BaseSymbol:
    """A base symbol: an elementary kernel or a product of two distinct ones.

    Attributes:
        name: canonical name, e.g. ``SE*LIN``.
        factors: elementary kernel names in registry order.
        params: ``(variance, *factor params)``; factor params are prefixed with the
            lower-case factor name in product symbols.
    """

    name: str
    factors: tuple[str, ...]
    params: tuple[ParamSpec, ...]

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def param_kinds(self) -> tuple[ParamKind, ...]:
        return tuple(p.kind for p in self.params)

    @property
    def scale_slots(self) -> tuple[int, ...]:
        """The parameter slots multiplied by ``c`` to scale this kernel by ``c``: the
        variance, and for a kernel alone whose variance does not scale it all (LIN,
        ``s^2 x x' + c^2``) its constant too, the first parameter of its factor."""
        if len(self.factors) == 1 and not ELEMENTARY[self.factors[0]].variance_scales_all:
            return (0, 1)
        return (0,)

    @property
    def param_units(self) -> tuple[Unit, ...]:
        """How each parameter maps back to original units (for
        :meth:`amorgp.core.data.Normalizer.to_original`), one per slot.

        A lengthscale or period is ``Unit.INPUT`` where its elementary kernel lists it in
        :attr:`ElementaryKernel.input_scaled`, else ``Unit.FREE`` (e.g. ``PER``'s
        lengthscale, which divides ``sin^2(pi r / p)``).  If a factor is not
        :attr:`~ElementaryKernel.stationary` (``LIN``), the other parameters have no exact
        original-unit value (``Unit.INEXACT``): the affine input map changes the kernel's
        form.  Otherwise the variance is ``Unit.VARIANCE`` and anything else ``INEXACT``.
        """
        stationary = all(ELEMENTARY[f].stationary for f in self.factors)
        scaled = {
            name
            for f in self.factors
            for e, name in self.factor_param_names(f).items()
            if e in (ELEMENTARY[f].input_scaled or ())
        }
        units = []
        for spec in self.params:
            if spec.kind in (ParamKind.LENGTHSCALE, ParamKind.PERIOD):
                units.append(Unit.INPUT if spec.name in scaled else Unit.FREE)
            elif stationary and spec.kind is ParamKind.VARIANCE:
                units.append(Unit.VARIANCE)
            else:
                units.append(Unit.INEXACT)
        return tuple(units)

    def factor_param_names(self, factor: str) -> dict[str, str]:
        """Map the elementary parameter names of ``factor`` to this symbol's names."""
        spec = ELEMENTARY[factor]
        if len(self.factors) == 1:
            return {p.name: p.name for p in spec.params}
        return {p.name: f"{factor.lower()}_{p.name}" for p in spec.params}

    def reference(self, x1: Any, x2: Any, params: dict[str, float]) -> np.ndarray:
        """Dense numpy float64 evaluation on 1-D inputs: ``(n,), (m,) -> (n, m)``.

        This is the independent oracle that torch/KeOps backends are tested against.
        """
        x1 = np.asarray(x1, dtype=float).reshape(-1)
        x2 = np.asarray(x2, dtype=float).reshape(-1)
        missing = set(self.param_names) - set(params)
        if missing:
            raise ValueError(f"{self.name}: missing parameters {sorted(missing)}")
        s2 = float(params["variance"])
        if len(self.factors) == 1 and not ELEMENTARY[self.factors[0]].variance_scales_all:
            # LIN alone: s^2 x x' + c^2
            return s2 * np.outer(x1, x2) + float(params["offset"])
        out = np.full((x1.size, x2.size), s2)
        for f in self.factors:
            names = self.factor_param_names(f)
            out = out * ELEMENTARY[f].unit(x1, x2, {k: params[v] for k, v in names.items()})
        return out

    def __str__(self) -> str:
        return self.name


@cache
def base_symbol(name: str) -> BaseSymbol:
    """Look up (build) the base symbol called ``name`` (``"SE"``, ``"lin*se"``, ...).

    Raises:
        ValueError: unknown elementary kernel, more than two factors, or a repeated factor.
    """
    factors = [f.strip().upper() for f in name.split("*")]
    canon = canonical_symbol_name(factors)
    parts = tuple(canon.split("*"))
    if len(parts) > 2:
        raise ValueError(f"base symbols have at most two factors, got {name!r}")
    if len(set(parts)) != len(parts):
        raise ValueError(f"base symbol {name!r} repeats a factor; use the elementary kernel")
    if len(parts) == 1:
        params = (VARIANCE, *ELEMENTARY[parts[0]].params)
    else:
        params = (
            VARIANCE,
            *(
                ParamSpec(f"{f.lower()}_{p.name}", p.kind, p.prior, f"{p.description} of {f}")
                for f in parts
                for p in ELEMENTARY[f].params
            ),
        )
    return BaseSymbol(canon, parts, params)


@dataclass(frozen=True)
class Vocabulary:
    """An ordered set of base symbols with integer ids (``0`` is padding).

    Args:
        symbols: base symbol names; canonicalised; must be unique and non-empty.
        name: optional preset name (informational).
    """

    symbols: tuple[str, ...]
    name: str = "custom"

    def __post_init__(self) -> None:
        if not self.symbols:
            raise ValueError("a vocabulary needs at least one symbol")
        canon = tuple(base_symbol(s).name for s in self.symbols)
        if len(set(canon)) != len(canon):
            raise ValueError(f"vocabulary has duplicate symbols: {list(canon)}")
        object.__setattr__(self, "symbols", canon)

    def __len__(self) -> int:
        return len(self.symbols)

    def __iter__(self) -> Iterator[BaseSymbol]:
        return (base_symbol(s) for s in self.symbols)

    def __contains__(self, name: object) -> bool:
        try:
            return isinstance(name, str) and base_symbol(name).name in self.symbols
        except ValueError:
            return False

    def id(self, name: str) -> int:
        """Integer id (``>= 1``) of a symbol name."""
        canon = base_symbol(name).name
        try:
            return self.symbols.index(canon) + 1
        except ValueError:
            raise ValueError(
                f"symbol {canon!r} is not in vocabulary {self.name!r} ({', '.join(self.symbols)})"
            ) from None

    def symbol(self, id_: int) -> BaseSymbol:
        """Base symbol of an id (``>= 1``)."""
        if not 1 <= id_ <= len(self.symbols):
            raise ValueError(f"symbol id {id_} outside 1..{len(self.symbols)} (0 is padding)")
        return base_symbol(self.symbols[id_ - 1])

    @property
    def elementary(self) -> tuple[str, ...]:
        """Elementary kernels used by any symbol, in registry order."""
        used = {f for s in self for f in s.factors}
        return tuple(n for n in ELEMENTARY if n in used)

    @property
    def max_params(self) -> int:
        """``P``: the parameter axis length of padded parameter tensors."""
        return max(len(s.params) for s in self)

    def param_kind_table(self) -> tuple[np.ndarray, np.ndarray]:
        """Per id, the kind of each parameter slot.

        Returns:
            ``kinds (V + 1, P)`` of kind indices into ``list(ParamKind)`` (0 where
            unused) and ``slot_mask (V + 1, P)`` (bool); row 0 is padding.
        """
        kinds_list = list(ParamKind)
        kinds = np.zeros((len(self) + 1, self.max_params), dtype=np.int64)
        mask = np.zeros_like(kinds, dtype=bool)
        for i, s in enumerate(self, start=1):
            for j, p in enumerate(s.params):
                kinds[i, j] = kinds_list.index(p.kind)
                mask[i, j] = True
        return kinds, mask

    def scale_slot_table(self) -> np.ndarray:
        """``(V + 1, P)`` bool: per id, the slots that scaling its kernel multiplies
        (:attr:`BaseSymbol.scale_slots`); row 0 is padding.  Multiplying those slots of
        every addend by ``c`` multiplies the sum by ``c``, exactly."""
        table = np.zeros((len(self) + 1, self.max_params), dtype=bool)
        for i, s in enumerate(self, start=1):
            table[i, list(s.scale_slots)] = True
        return table

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "symbols": list(self.symbols)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vocabulary:
        try:
            return cls(tuple(data["symbols"]), data.get("name", "custom"))
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a vocabulary description: {data!r}") from err

    @classmethod
    def with_products(cls, elementary: Sequence[str], name: str = "custom") -> Vocabulary:
        """Elementary kernels followed by all their 2-gram products."""
        singles = [canonical_symbol_name([e]) for e in elementary]
        pairs = ["*".join((a, b)) for a, b in combinations(singles, 2)]
        return cls(tuple(singles + pairs), name)


PAPER_VOCABULARY = Vocabulary(("SE", "LIN", "PER", "SE*LIN", "SE*PER", "LIN*PER"), "paper")
EXTENDED_VOCABULARY = Vocabulary.with_products(("SE", "LIN", "PER", "MAT52", "RQ"), "extended")
