"""Compiled base symbols and per-vocabulary lookup tables.

A base symbol ``A`` or ``A*B`` (see :mod:`amorgp.kernel_grammar.registry`) is
compiled once into its torch elementary factors and the parameter slots each
factor reads, so that evaluating it on many tokens at once is

.. math::

    k(x, x') = \\exp\\Big(\\log s^2 + \\sum_{f \\text{ log-form}} \\log kt_f\\Big)
               \\prod_{f \\text{ direct}} kt_f,

one ``exp`` per symbol however many stationary factors it has.  LIN alone,
``s^2 x x' + c^2``, is evaluated as ``s^2 (x x' + c^2 / s^2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor

from amorgp.kernel_grammar import ELEMENTARY, Vocabulary, base_symbol
from amorgp.lazy_kernels.elementary import TORCH_ELEMENTARY, TorchElementary, torch_elementary

__all__ = [
    "CompiledSymbol",
    "SymbolTables",
    "compile_symbol",
    "evaluate_symbol",
    "clear_symbol_caches",
    "log_form",
    "symbol_tables",
    "unregister_torch_elementary",
]


@dataclass(frozen=True)
class CompiledSymbol:
    """A base symbol ready for vectorised torch evaluation.

    Attributes:
        name: canonical symbol name.
        factors: per factor, its torch form and the parameter slots (indices into
            the symbol's ``params``) of its non-variance parameters.
        alone_rescale: True for a single factor whose variance does not scale the
            whole kernel (LIN alone); its first parameter is divided by ``s^2``.
        n_params: number of parameters (slot 0 is the variance).
    """

    name: str
    factors: tuple[tuple[TorchElementary, tuple[int, ...]], ...]
    alone_rescale: bool
    n_params: int

    @property
    def owns_output(self) -> bool:
        """Every factor's forms return a fresh tensor that no backward reads
        (:attr:`TorchElementary.owns_output`): :func:`evaluate_symbol` may update it in place."""
        return all(k.owns_output for k, _ in self.factors)

    @property
    def needs(self) -> frozenset[str]:
        """Inputs :func:`evaluate_symbol` reads when given all precomputed forms:
        ``"x"`` (``x1, x2``), ``"r"``, ``"r2"``, ``"xx"``."""
        out = set()
        for k, _ in self.factors:
            if k.log_unit_r2:
                out.add("r2")
            elif k.log_unit_r:
                out.add("r")
            elif k.unit_xx:
                out.add("xx")
            else:
                out.add("x")
        return frozenset(out)


@cache
def compile_symbol(name: str) -> CompiledSymbol:
    """Compile base symbol ``name`` (any spelling ``base_symbol`` accepts).

    Raises:
        ValueError: unknown symbol, or an elementary factor without a torch form.
    """
    sym = base_symbol(name)
    names = sym.param_names
    factors = []
    for f in sym.factors:
        mapping = sym.factor_param_names(f)
        slots = tuple(names.index(mapping[p.name]) for p in ELEMENTARY[f].params)
        factors.append((torch_elementary(f), slots))
    alone = len(sym.factors) == 1 and not ELEMENTARY[sym.factors[0]].variance_scales_all
    return CompiledSymbol(sym.name, tuple(factors), alone, len(names))


@cache
def _runs(slots: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The contiguous runs ``(start, stop)`` of ``slots``, in order (computed once per
    factor's slots)."""
    runs: list[list[int]] = []
    for s in slots:
        if runs and s == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([s, s + 1])
    return tuple((a, b) for a, b in runs)


def _columns(theta: Tensor, slots: tuple[int, ...]) -> Tensor:
    """``theta[:, slots]`` from slices of its contiguous runs: indexing with a list copies
    the index to the device first, which waits for it on CUDA."""
    runs = _runs(slots)
    if len(runs) == 1:
        return theta[:, runs[0][0] : runs[0][1]]
    return torch.cat([theta[:, a:b] for a, b in runs], 1)


def evaluate_symbol(
    cs: CompiledSymbol,
    x1: Tensor | None,
    x2: Tensor | None,
    theta: Tensor,
    *,
    r: Tensor | None = None,
    r2: Tensor | None = None,
    xx: Tensor | None = None,
    log: bool = False,
) -> Tensor:
    """Evaluate one base symbol on a batch of ``T`` one-dimensional input pairs.

    Args:
        cs: the compiled symbol.
        x1: ``(T, N, 1)`` (matrix) or ``(T, N)`` (diagonal / elementwise); may be None
            when ``"x"`` is not in ``cs.needs``.
        x2: ``(T, 1, M)`` or ``(T, N)``, broadcasting against ``x1`` (or None likewise).
        theta: ``(T, P)`` parameters in the symbol's slot order (``P >= n_params``).
        r: optional precomputed ``x1 - x2`` (any shape broadcasting like ``x1 - x2``),
            used by stationary factors instead of forming the difference.
        r2: optional precomputed ``(x1 - x2)^2``, likewise.
        xx: optional precomputed ``x1 * x2``, used by factors of ``x x'`` (LIN).
        log: return the logarithm of the values, without the ``exp`` (only for a
            symbol of log-form factors: :func:`log_form`).

    Returns:
        ``(T, N, M)`` or ``(T, N)`` kernel values (their logarithms with ``log``).
    """
    T = theta.shape[0]
    ndim = max(t.ndim for t in (x1, x2, r, r2, xx) if t is not None)
    tail = (1,) * (ndim - 1)
    s2 = theta[:, 0].reshape(T, *tail)
    own = cs.owns_output
    log_sum: Tensor | None = None
    direct: Tensor | None = None
    for kernel, slots in cs.factors:
        th = _columns(theta, slots).reshape(T, *tail, len(slots))
        if cs.alone_rescale:
            th = torch.cat([th[..., :1] / s2[..., None], th[..., 1:]], -1)
        if kernel.log_unit is not None:
            if kernel.log_unit_r2 is not None and (r2 is not None or r is not None):
                lt = kernel.log_unit_r2(r2 if r2 is not None else r * r, th)  # type: ignore[operator]
            elif kernel.log_unit_r is not None and r is not None:
                lt = kernel.log_unit_r(r, th)
            else:
                assert x1 is not None
                assert x2 is not None
                lt = kernel.log_unit(x1, x2, th)
            log_sum = lt if log_sum is None else _acc(log_sum, lt, own, add=True)
        else:
            assert kernel.unit is not None
            if kernel.unit_xx is not None and xx is not None:
                u = kernel.unit_xx(xx, th)
            else:
                assert x1 is not None
                assert x2 is not None
                u = kernel.unit(x1, x2, th)
            direct = u if direct is None else _acc(direct, u, own and _untracked(direct, u))
    if log:
        assert log_sum is not None, f"{cs.name} has no log-form factor"
        assert direct is None, f"{cs.name} is not of log form"
        return _acc(log_sum, torch.log(s2), own, add=True)
    if log_sum is not None:
        # own: the factors' sum is a fresh tensor no backward reads, so the variance and
        # the exp may update it in place (exp saves its result, which is what it needs)
        ls2 = torch.log(s2)
        out = _exp_(_acc(log_sum, ls2, own, add=True)) if own else torch.exp(log_sum + ls2)
        return out if direct is None else _acc(out, direct, _untracked(out, direct))
    assert direct is not None
    return _acc(direct, s2, own and _untracked(direct, s2))


def log_form(cs: CompiledSymbol) -> bool:
    """Whether every factor of ``cs`` is positive everywhere (a ``log_unit`` form) and its
    variance scales the whole kernel: then ``log k`` is a sum, and products of such
    symbols over dimensions are one ``exp`` of a sum (:func:`evaluate_symbol`'s ``log``)."""
    return not cs.alone_rescale and all(k.log_unit is not None for k, _ in cs.factors)


def _exp_(t: Tensor) -> Tensor:
    """``exp`` in place.  Without a graph on the CPU, entries whose ``exp`` is below the
    smallest normal float times ``e`` (under ``6.1e-308`` in float64) become exactly 0:
    the vectorised ``exp`` and every later product with a subnormal take a slow path, up
    to 20 times slower, and far-apart points under short lengthscales are common."""
    if t.requires_grad or t.device.type != "cpu" or t.numel() == 0:
        return t.exp_()
    low = math.log(torch.finfo(t.dtype).tiny) + 1.0  # exp(low) is a normal float
    if not bool(t.amin() < low):
        return t.exp_()
    dead = t < low
    return t.clamp_min_(low).exp_().masked_fill_(dead, 0.0)


def _untracked(*ts: Tensor) -> bool:
    """No autograd graph is recorded through these tensors (in-place updates are safe)."""
    return not any(t.requires_grad for t in ts)


def _acc(a: Tensor, b: Tensor, inplace: bool, add: bool = False) -> Tensor:
    """``a + b`` (``add``) or ``a * b``, written into ``a`` when ``inplace`` and ``a`` has
    the result's shape (the same values either way)."""
    fits = b.ndim <= a.ndim and all(y in (1, x) for x, y in zip(a.shape[::-1], b.shape[::-1]))
    if inplace and fits:
        return a.add_(b) if add else a.mul_(b)
    return a + b if add else a * b


@dataclass(frozen=True)
class SymbolTables:
    """Per-vocabulary data: compiled symbols by id (index 0 = padding, None) and slot masks."""

    compiled: tuple[CompiledSymbol | None, ...]
    slot_mask: Tensor
    n_symbols: int
    max_params: int


@cache
def symbol_tables(vocab: Vocabulary, device: torch.device) -> SymbolTables:
    """Compile every symbol of ``vocab`` and build its slot mask ``(V + 1, P)`` on ``device``.

    Raises:
        ValueError: if a symbol has an elementary factor without a torch form.
    """
    _, slot_mask = vocab.param_kind_table()
    compiled: tuple[CompiledSymbol | None, ...] = (
        None,
        *(compile_symbol(s) for s in vocab.symbols),
    )
    return SymbolTables(
        compiled=compiled,
        slot_mask=torch.as_tensor(slot_mask, device=device),
        n_symbols=len(vocab),
        max_params=vocab.max_params,
    )


def clear_symbol_caches() -> None:
    """Forget every compiled symbol and symbol table (after the elementary kernels change)."""
    compile_symbol.cache_clear()
    symbol_tables.cache_clear()


def unregister_torch_elementary(name: str) -> None:
    """Remove the torch form of ``name`` (for tests that register a kernel temporarily) and
    forget the compiled symbols and tables built with it.

    Raises:
        ValueError: if ``name`` has no torch form.
    """
    if TORCH_ELEMENTARY.pop(name, None) is None:
        raise ValueError(f"elementary kernel {name!r} has no torch implementation")
    clear_symbol_caches()
