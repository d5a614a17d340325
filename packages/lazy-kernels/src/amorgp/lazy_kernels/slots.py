"""The per-vocabulary parameter-slot table and the positive transform of padded parameters.

Padded parameters ``params (B, D, L, P)`` hold, for the addend ``(b, d, l)`` with
vocabulary id ``s = symbols[b, d, l]``, the parameters of base symbol ``s`` in its
slot order (``BaseSymbol.params``, variance first); ``P = vocab.max_params``.
A slot ``j`` is *used* when symbol ``s`` has a ``j``-th parameter and the addend is
present (``symbol_mask``); every other entry holds :data:`UNUSED_SLOT_VALUE`.

:class:`SlotTable` gathers, once per vocabulary, what every consumer of padded
parameters needs per ``(id, slot)`` (rows ``0..V``, row 0 is padding): the
parameter kind, the used flag, the prior and its mean, the transform floor, and two
roles read off the registry: *input-scaled lengthscales* (a lengthscale measured in input
units, ``ElementaryKernel.input_scaled``: SE's, the SE factor's of ``SE*PER``, not PER's
own) and *amplitudes* (a slot ``a`` with ``k(theta; a c) = c k(theta; a)``: every
variance, and LIN's offset where LIN stands alone, ``s^2 x x' + c^2``).
The network heads, the simulator and the baselines all read this one table, and
the constrained/unconstrained map

.. math::

    \\theta_{bdlj} = \\mathrm{positive}(r_{bdlj}, \\mathrm{kind}(s_{bdl}, j))
    \\quad\\text{(used slots)}, \\qquad \\theta_{bdlj} = 1 \\quad\\text{(otherwise)}

is written once here (:meth:`SlotTable.constrain`), with the shared transform
:func:`amorgp.kernel_grammar.positive`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import Tensor

from amorgp.diff_linalg import size_buckets
from amorgp.kernel_grammar import (
    ELEMENTARY,
    FLOORS,
    ParamKind,
    Prior,
    Vocabulary,
    positive,
    positive_inverse,
)

__all__ = ["PARAM_KINDS", "UNUSED_SLOT_VALUE", "SlotTable", "size_buckets", "slot_table"]

UNUSED_SLOT_VALUE = 1.0
"""Value of every parameter entry that no symbol reads (unused slots, padded addends)."""

PARAM_KINDS: tuple[ParamKind, ...] = tuple(ParamKind)
"""The parameter kinds in the order of :attr:`SlotTable.kind` indices."""


@dataclass(frozen=True, eq=False)
class SlotTable:
    """Per vocabulary id and parameter slot: kind, used flag, prior, prior mean and floor.

    Every tensor is ``(V + 1, P)`` on one device; row 0 is padding (unused).

    Attributes:
        vocab: the vocabulary.
        kind: int64 index into :data:`PARAM_KINDS` (0 where unused).
        used: bool, True where the symbol has that parameter.
        prior_index: int64 index into ``priors`` (0 where unused).
        priors: the distinct priors of the vocabulary's parameter specs.
        prior_mean: float64 prior means (:data:`UNUSED_SLOT_VALUE` where unused).
        floor: float64 floors of the slots' positive transforms (0 where unused).
        input_lengthscale: bool, True where the slot is a lengthscale in input units.
        amplitude: bool, True where scaling the slot by ``c`` scales the addend by ``c``.
        kinds_present: the kind indices that occur in used slots (sorted).
    """

    vocab: Vocabulary
    kind: Tensor
    used: Tensor
    prior_index: Tensor
    priors: tuple[Prior, ...]
    prior_mean: Tensor
    floor: Tensor
    input_lengthscale: Tensor
    amplitude: Tensor
    kinds_present: tuple[int, ...]

    @property
    def device(self) -> torch.device:
        return self.kind.device

    @property
    def n_slots(self) -> int:
        """``P``: the parameter axis length."""
        return int(self.kind.shape[1])

    def to(self, device: torch.device | str) -> SlotTable:
        """The table on ``device`` (cached per vocabulary and device)."""
        return slot_table(self.vocab, device)

    def slot_kinds(self, symbols: Tensor) -> Tensor:
        """``(..., P)`` kind index of every slot of ``symbols (...)`` (ids, 0 = padding)."""
        return self.kind[symbols.long()]

    def used_slots(self, symbols: Tensor, symbol_mask: Tensor) -> Tensor:
        """``(..., P)`` bool: slots that a present addend of ``symbols`` reads."""
        return self.used[symbols.long()] & symbol_mask[..., None]

    def fill_unused(self, params: Tensor, symbols: Tensor, symbol_mask: Tensor) -> Tensor:
        """``params`` with every unused entry set to :data:`UNUSED_SLOT_VALUE`."""
        used = self.used_slots(symbols, symbol_mask)
        return torch.where(used, params, torch.full_like(params, UNUSED_SLOT_VALUE))

    def constrain(self, raw: Tensor, symbols: Tensor, symbol_mask: Tensor) -> Tensor:
        """Positive parameters ``(..., P)`` from unconstrained ``raw (..., P)``.

        Each used slot goes through ``positive(raw, kind)`` of its own kind; unused
        entries are :data:`UNUSED_SLOT_VALUE`.  Differentiable; the loop runs over
        the (at most six) parameter kinds, never over data.
        """
        kinds = self.slot_kinds(symbols)
        out = torch.full_like(raw, UNUSED_SLOT_VALUE)
        for k in self.kinds_present:
            out = torch.where(kinds == k, positive(raw, PARAM_KINDS[k]), out)
        return self.fill_unused(out, symbols, symbol_mask)

    def unconstrain(self, params: Tensor, symbols: Tensor, symbol_mask: Tensor) -> Tensor:
        """Inverse of :meth:`constrain` on used slots (unused entries get 0)."""
        kinds = self.slot_kinds(symbols)
        used = self.used_slots(symbols, symbol_mask)
        raw = torch.zeros_like(params)
        for k in self.kinds_present:
            sel = used & (kinds == k)
            safe = torch.where(sel, params, torch.ones_like(params))
            raw = torch.where(sel, positive_inverse(safe, PARAM_KINDS[k]), raw)
        return raw

    def raw_prior_mean(self) -> Tensor:
        """``(V + 1, P)`` float64 ``positive_inverse(prior mean, kind)`` (0 where unused).

        The network heads start their output biases here, so an untrained network
        predicts the prior means.
        """
        symbols = torch.arange(self.kind.shape[0], device=self.device)
        mask = torch.ones_like(symbols, dtype=torch.bool)
        return self.unconstrain(self.prior_mean, symbols, mask)


def _build(vocab: Vocabulary) -> tuple[dict[str, np.ndarray], tuple[Prior, ...]]:
    rows, cols = len(vocab) + 1, vocab.max_params
    kind = np.zeros((rows, cols), dtype=np.int64)
    used = np.zeros((rows, cols), dtype=bool)
    prior_index = np.zeros((rows, cols), dtype=np.int64)
    mean = np.full((rows, cols), UNUSED_SLOT_VALUE)
    floor = np.zeros((rows, cols))
    input_ls = np.zeros((rows, cols), dtype=bool)
    amplitude = np.zeros((rows, cols), dtype=bool)
    priors: list[Prior] = []
    for i, sym in enumerate(vocab, start=1):
        scaled: set[str] = set()
        for f in sym.factors:
            names = sym.factor_param_names(f)
            scaled |= {names[p] for p in (ELEMENTARY[f].input_scaled or ())}
        lone_lin = len(sym.factors) == 1 and not ELEMENTARY[sym.factors[0]].variance_scales_all
        for j, spec in enumerate(sym.params):
            input_ls[i, j] = spec.kind is ParamKind.LENGTHSCALE and spec.name in scaled
            amplitude[i, j] = spec.kind is ParamKind.VARIANCE or (
                lone_lin and spec.kind is ParamKind.OFFSET
            )
            if spec.prior not in priors:
                priors.append(spec.prior)
            kind[i, j] = PARAM_KINDS.index(spec.kind)
            used[i, j] = True
            prior_index[i, j] = priors.index(spec.prior)
            mean[i, j] = spec.prior.mean
            floor[i, j] = FLOORS[spec.kind]
    arrays = {
        "kind": kind,
        "used": used,
        "prior_index": prior_index,
        "prior_mean": mean,
        "floor": floor,
        "input_lengthscale": input_ls,
        "amplitude": amplitude,
    }
    return arrays, tuple(priors)


@cache
def _slot_table(vocab: Vocabulary, device: torch.device) -> SlotTable:
    arrays, priors = _build(vocab)
    t = {k: torch.as_tensor(v, device=device) for k, v in arrays.items()}
    present = tuple(sorted({int(k) for k in arrays["kind"][arrays["used"]].tolist()}))
    return SlotTable(
        vocab,
        t["kind"],
        t["used"],
        t["prior_index"],
        priors,
        t["prior_mean"],
        t["floor"],
        t["input_lengthscale"],
        t["amplitude"],
        present,
    )


def slot_table(vocab: Vocabulary, device: torch.device | str = "cpu") -> SlotTable:
    """The :class:`SlotTable` of ``vocab`` on ``device`` (built once per pair, then cached)."""
    return _slot_table(vocab, torch.device(device))
