"""GPyTorch kernel trees <-> dimension-wise structures and their ``(D, L, P)`` parameters.

A dimension-wise structure is ``k(x, x') = prod_d sum_l k_{d,l}(x_d, x'_d)``, each addend a
base symbol (``SE``, ``LIN``, ``PER`` or a product of two of them) with its own variance.
:func:`build_kernel` writes one as GPyTorch modules (through
:func:`amorgp.lazy_kernels.testing.gpytorch_symbol_kernel`).  :func:`read_kernel` reads a
GPyTorch kernel tree back into a :class:`KernelMap`: the structure plus where each
hyperparameter lives in the modules, so that :meth:`KernelMap.write` sets them and
:meth:`KernelMap.read` reads them back.

Every per-kernel fact comes from the elementary kernel's lazy-kernels registration
(:attr:`amorgp.lazy_kernels.TorchElementary.gpytorch_module`, a
:class:`~amorgp.lazy_kernels.GPyTorchModule`: the module's class, the map of the project's
parameters to its attributes and back, whether it spans columns as a product), so a
kernel registered there is read and written here too.  The built-in kernels' conventions
(GPyTorch -> this project, one dimension):

* ``RBFKernel`` (lengthscale ``l``) = ``exp(-r^2 / (2 l^2))``, the same ``l``;
  ``MaternKernel(nu=2.5)`` = ``(1 + sqrt5 r/l + 5 r^2/(3 l^2)) exp(-sqrt5 r/l)`` (``MAT52``),
  the same ``l``.
* ``PeriodicKernel`` computes ``exp(-2 sin^2(pi r / p) / l_gp)`` (its code, 1.11-1.15), the
  project's ``exp(-sin^2(pi r / p) / (2 l^2))`` needs ``l_gp = 4 l^2``.
* ``LinearKernel`` (variance ``v``) ``+ ConstantKernel`` (``c``) = ``v x x' + c``; LIN alone
  is ``s^2 x x' + c^2``, LIN inside a product is the unit factor ``x x' + c^2``.
* A term's variance ``s^2`` lives in its own ``ScaleKernel``, else in its ``LinearKernel``'s
  variance, else in a ``ScaleKernel`` at the root (shared by the dimensions whose terms
  have no holder of their own: the root holds the product of those terms' variances, the
  mean where one dimension has several), else nowhere (fixed at 1).
* ARD ``RBFKernel``/``PeriodicKernel`` over several columns is the product over those
  columns; a non-ARD one over several columns ties their lengthscale (the geometric
  mean is written).  A module that is not such a product (``MaternKernel``,
  ``RQKernel``: ``separable=False``) must act on one column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

import gpytorch.kernels as gk
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import (
    ELEMENTARY,
    DimWiseStructure,
    base_symbol,
    canonical_symbol_name,
    symbol_sort_key,
)
from amorgp.lazy_kernels import TORCH_ELEMENTARY, GPyTorchModule
from amorgp.lazy_kernels.gpytorch_modules import gpytorch_symbol_kernel

__all__ = ["KernelMap", "build_kernel", "read_kernel"]


def build_kernel(structure: DimWiseStructure, params: Tensor) -> gk.Kernel:
    """The float64 GPyTorch module of ``structure`` with ``params (D, L, P)``.

    ``prod_d sum_l ScaleKernel(prod of the symbol's factors)`` on column ``d``; the
    modules are built by the lazy-kernels bridge and their values then written again in
    float64 (the modules are created in float32).
    """
    dims = []
    for d, addends in enumerate(structure.dims):
        terms = []
        for ell, sym in enumerate(addends):
            spec = base_symbol(sym)
            named = {p.name: float(params[d, ell, i]) for i, p in enumerate(spec.params)}
            terms.append(gpytorch_symbol_kernel(sym, named, active_dim=d))
        dims.append(terms[0] if len(terms) == 1 else gk.AdditiveKernel(*terms))
    out = (dims[0] if len(dims) == 1 else gk.ProductKernel(*dims)).double()
    read_kernel(out, structure.n_dims).write(params)  # exact float64 values
    return out


@dataclass
class _Term:
    """One addend of one dimension: its factors and its variance holder."""

    dim: int
    factors: dict[str, tuple[Any, ...]]  # factor -> (module, column index) or (lin, const)
    scale: Any = None

    @property
    def symbol(self) -> str:
        return canonical_symbol_name(self.factors)


@dataclass
class KernelMap:
    """A GPyTorch kernel tree read as a dimension-wise structure.

    Attributes:
        structure: the structure (canonical addend order).
        terms: ``terms[d][l]`` the addend ``l`` of dimension ``d`` (structure order).
        root: the ``ScaleKernel`` at the root, or None.
    """

    structure: DimWiseStructure
    terms: list[list[_Term]]
    root: Any = None
    _pending: dict[tuple[int, str], tuple[Any, Tensor, list[float]]] = field(
        default_factory=dict, repr=False
    )

    def write(self, params: Tensor) -> None:
        """Set the modules' hyperparameters from ``params (D, L, P)`` (model units); each
        value is clamped into its GPyTorch constraint."""
        self._pending = {}
        root_var = 1.0
        for d, row in enumerate(self.terms):
            free = []
            for ell, t in enumerate(row):
                v = self._named(params, d, ell)
                free += [] if self._write_term(t, v) else [v["variance"]]
            if free and len(free) == len(row):
                root_var *= sum(free) / len(free)
        for (_, name), (mod, value, tied) in self._pending.items():
            if tied:  # one lengthscale shared by several columns: their geometric mean
                value.fill_(math.exp(sum(math.log(t) for t in tied) / len(tied)))
            _assign(mod, name, value)
        if self.root is not None:
            _assign(self.root, "outputscale", root_var)

    def holds_scale(self) -> bool:
        """Whether the tree can hold a global factor on the kernel: a ``ScaleKernel`` at
        the root, or a variance holder (``ScaleKernel`` or ``LinearKernel``) on every
        addend (constraints may still clamp a value: :meth:`read` tells)."""
        return self.root is not None or all(_has_holder(t) for r in self.terms for t in r)

    def read(self) -> Tensor:
        """``(D, L, P)`` float64 parameters that the modules now hold (model units)."""
        D, L = len(self.terms), max(len(r) for r in self.terms)
        P = max(len(base_symbol(t.symbol).params) for r in self.terms for t in r)
        out = torch.zeros(D, L, P, dtype=torch.float64)
        root = float(self.root.outputscale.detach()) if self.root is not None else 1.0
        free = [d for d, r in enumerate(self.terms) if all(not _has_holder(u) for u in r)]
        root_dim = free[0] if free else 0
        for d, row in enumerate(self.terms):
            for ell, t in enumerate(row):
                spec = base_symbol(t.symbol)
                v = self._read_term(t, len(spec.factors) == 1)
                if d == root_dim:
                    v["variance"] *= root
                for i, p in enumerate(spec.params):
                    out[d, ell, i] = v[p.name]
        return out

    # -- helpers --------------------------------------------------------------------------
    def _named(self, params: Tensor, d: int, ell: int) -> dict[str, float]:
        spec = base_symbol(self.structure.dims[d][ell])
        return {p.name: float(params[d, ell, i]) for i, p in enumerate(spec.params)}

    def _write_term(self, t: _Term, v: dict[str, float]) -> bool:
        """Write one term's factors; True if its variance has a holder of its own."""
        spec = base_symbol(t.symbol)
        s2 = v["variance"]
        for f, loc in t.factors.items():
            p = {k: v[name] for k, name in spec.factor_param_names(f).items()}
            form = _module_form(f)
            if form.variance is None:
                for attr, value in form.to_module(p).items():
                    self._stage(loc[0], attr, loc[1], float(value))
                continue
            # the module holds the variance, a ConstantKernel the first parameter o:
            # A v = s^2, A c = s^2 o (o = c^2 in a product, c^2 / s^2 alone)
            mod, const = loc
            lead = ELEMENTARY[f].params[0].name
            o = p[lead] if len(spec.factors) > 1 else p[lead] / s2
            scale = 1.0 if t.scale is not None else s2
            for attr, value in form.to_module(p).items():
                _assign(mod, attr, float(value))
            _assign(mod, form.variance, scale)
            if const is not None:
                _assign(const, "constant", scale * o)
        if t.scale is not None:
            _assign(t.scale, "outputscale", s2)
        return _has_holder(t)

    def _read_term(self, t: _Term, alone: bool) -> dict[str, float]:
        spec = base_symbol(t.symbol)
        a = float(t.scale.outputscale.detach()) if t.scale is not None else 1.0
        v: dict[str, float] = {"variance": a}
        for f, loc in t.factors.items():
            names = spec.factor_param_names(f)
            form = _module_form(f)
            attrs = _attributes(f, form)
            if form.variance is None:
                m = {attr: _column(getattr(loc[0], attr), loc[1]) for attr in attrs}
                v.update({names[e]: float(x) for e, x in form.from_module(m).items()})
                continue
            mod, const = loc
            lv = float(getattr(mod, form.variance).detach().reshape(-1)[0])
            c = float(const.constant.detach().reshape(-1)[0]) if const is not None else 0.0
            m = {attr: _column(getattr(mod, attr), None) for attr in attrs}
            v.update({names[e]: float(x) for e, x in form.from_module(m).items()})
            v["variance"] = a * lv
            v[names[ELEMENTARY[f].params[0].name]] = a * c if alone else c / lv
        return v

    def _stage(self, mod: Any, name: str, col: int | None, value: float) -> None:
        key = (id(mod), name)
        if key not in self._pending:
            self._pending[key] = (mod, getattr(mod, name).detach().clone(), [])
        if col is None:
            self._pending[key][2].append(value)
        else:
            self._pending[key][1].reshape(-1)[col] = value


def _forms() -> dict[str, GPyTorchModule]:
    """The registered elementary kernels with a GPyTorch module (lazy-kernels'
    :attr:`~amorgp.lazy_kernels.TorchElementary.gpytorch_module`), registry order."""
    out = {}
    for name in ELEMENTARY:
        form = TORCH_ELEMENTARY[name].gpytorch_module if name in TORCH_ELEMENTARY else None
        if form is not None:
            out[name] = form
    return out


def _module_form(factor: str) -> GPyTorchModule:
    form = _forms().get(factor)
    if form is None:
        raise OptionError(
            f"elementary kernel {factor!r} has no GPyTorch module (gpytorch_module of its "
            "lazy-kernels registration)"
        )
    return form


def _attributes(factor: str, form: GPyTorchModule) -> list[str]:
    """The module attributes ``form.to_module`` writes for ``factor``."""
    return list(form.to_module(dict.fromkeys((q.name for q in ELEMENTARY[factor].params), 1.0)))


def _describe(form: GPyTorchModule) -> str:
    args = ", ".join(f"{k}={v}" for k, v in form.kwargs)
    text = f"{form.cls}({args})" if args else form.cls
    return f"{text} (+ ConstantKernel)" if form.variance is not None else text


def _has_holder(t: _Term) -> bool:
    return t.scale is not None or any(_module_form(f).variance is not None for f in t.factors)


def _column(value: Tensor, col: int | None) -> float:
    flat = value.detach().reshape(-1)
    return float(flat[0] if col is None else flat[col])


def _assign(mod: Any, name: str, value: Tensor | float) -> None:
    """``mod.<name> = value`` clamped into the raw parameter's constraint."""
    constraint = getattr(mod, f"raw_{name}_constraint", None)
    value = torch.as_tensor(value, dtype=torch.float64).detach()
    if constraint is not None:
        lo, hi = float(constraint.lower_bound), float(constraint.upper_bound)
        value = value.clamp(
            lo + 1e-6 * max(abs(lo), 1e-12), hi if math.isinf(hi) else hi * (1 - 1e-6)
        )
    raw = getattr(mod, f"raw_{name}")
    setattr(
        mod,
        name,
        value.to(raw).expand_as(raw) if value.numel() == 1 else value.to(raw).reshape(raw.shape),
    )


def _columns(k: gk.Kernel, d: int) -> list[int]:
    if k.active_dims is not None:
        return [int(c) for c in k.active_dims]
    n = k.ard_num_dims or d
    return list(range(n))


def _parse(k: gk.Kernel, d: int, top: bool) -> tuple[dict[int, list[_Term]], Any]:
    """``{dim: [terms]}`` (a product over dims of sums) and a root ScaleKernel (top only)."""
    name = type(k).__name__
    if isinstance(k, gk.ScaleKernel):
        inner, _root = _parse(k.base_kernel, d, False)
        row = next(iter(inner.values())) if len(inner) == 1 else []
        if len(row) == 1 and row[0].scale is None:
            row[0].scale = k
            return inner, None
        if top:
            return inner, k
        raise OptionError(
            "a ScaleKernel over several dimensions or addends is only understood at the "
            "root of the kernel"
        )
    forms = _forms()
    for f, form in forms.items():
        if not form.matches(k):
            continue
        if form.variance is not None:  # LIN alone: the module without its ConstantKernel
            c = _one_column(k, d, name)
            return {c: [_Term(c, {f: (k, None)})]}, None
        cols = _columns(k, d)
        if not form.separable:
            cols = [_one_column(k, d, name)]
        ard = k.ard_num_dims is not None and k.ard_num_dims > 1
        return {c: [_Term(c, {f: (k, i if ard else None)})] for i, c in enumerate(cols)}, None
    same = {f: form for f, form in forms.items() if form.cls == name}
    if same:  # a registered class with other arguments (MaternKernel(nu=1.5))
        keys = sorted({a for form in same.values() for a, _ in form.kwargs})
        args = ", ".join(f"{a}={getattr(k, a, '?')}" for a in keys)
        listed = ", ".join(f"{_describe(form)} ({f})" for f, form in same.items())
        raise OptionError(
            f"{name}({args}) is outside the amortizer's vocabulary: its {name} kernels are {listed}"
        )
    if isinstance(k, gk.AdditiveKernel):
        kids = list(k.kernels)
        const = [c for c in kids if isinstance(c, gk.ConstantKernel)]
        held = [
            (f, c)
            for c in kids
            for f, form in forms.items()
            if form.variance is not None and form.matches(c)
        ]
        if len(kids) == 2 and len(held) == 1 and len(const) == 1:  # LIN: Linear + Constant
            f, mod = held[0]
            c = _one_column(mod, d, type(mod).__name__)
            return {c: [_Term(c, {f: (mod, const[0])})]}, None
        parts = [_parse(c, d, False)[0] for c in kids]
        dims = {c for p in parts for c in p}
        if len(dims) != 1:
            raise OptionError(
                "a sum of kernels on different input columns is outside the dimension-wise "
                "vocabulary (a product over columns of sums per column)"
            )
        col = dims.pop()
        return {col: [t for p in parts for t in p[col]]}, None
    if isinstance(k, gk.ProductKernel):
        out: dict[int, list[_Term]] = {}
        for part in (_parse(c, d, False)[0] for c in k.kernels):
            for col, row in part.items():
                if col not in out:
                    out[col] = row
                    continue
                if (
                    len(row) != 1
                    or len(out[col]) != 1
                    or set(row[0].factors) & set(out[col][0].factors)
                ):
                    raise OptionError(
                        f"a product of sums (or of a factor with itself) on input column {col} "
                        "is outside the vocabulary; products of two different base kernels only"
                    )
                a, b = out[col][0], row[0]
                if a.scale is not None and b.scale is not None:
                    raise OptionError(f"two ScaleKernels in one product on input column {col}")
                out[col] = [_Term(col, {**a.factors, **b.factors}, a.scale or b.scale)]
        return out, None
    known = ", ".join(_describe(form) for form in forms.values())
    raise OptionError(
        f"{name} is outside the amortizer's vocabulary ({known}, their sums and products, "
        "ScaleKernel)"
    )


def _one_column(k: gk.Kernel, d: int, name: str) -> int:
    cols = [int(c) for c in k.active_dims] if k.active_dims is not None else list(range(d))
    if len(cols) != 1:
        raise OptionError(
            f"a {name} over {len(cols)} input columns is a sum over columns, outside the "
            "dimension-wise vocabulary; give it one column with active_dims=[j]"
        )
    return cols[0]


def read_kernel(kernel: gk.Kernel, n_dims: int) -> KernelMap:
    """Read a GPyTorch kernel tree on ``n_dims`` input columns as a :class:`KernelMap`.

    Raises:
        OptionError: a kernel outside the vocabulary, a sum across columns, a column the
            kernel does not act on, or a product symbol the vocabulary lacks.
    """
    dims, root = _parse(kernel, n_dims, True)
    missing = sorted(set(range(n_dims)) - set(dims))
    if missing or max(dims) >= n_dims:
        raise OptionError(
            f"the kernel must act on every input column 0..{n_dims - 1}; columns "
            f"{missing or sorted(c for c in dims if c >= n_dims)} do not match"
        )
    terms = []
    for c in range(n_dims):
        for t in dims[c]:
            base_symbol(t.symbol)  # raises for a product the registry lacks
        terms.append(sorted(dims[c], key=lambda t: symbol_sort_key(t.symbol)))
    structure = DimWiseStructure(tuple(tuple(t.symbol for t in row) for row in terms))
    for c, row in enumerate(terms):
        if tuple(t.symbol for t in row) != structure.dims[c]:
            raise OptionError(f"cannot order the addends of input column {c}")
    return KernelMap(structure, terms, root)
