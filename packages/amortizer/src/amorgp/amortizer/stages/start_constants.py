"""The constants a start sets (:func:`start_constants`): what
:meth:`~amorgp.amortizer.stages.results.KernelResult.untouched` compares a result's
hyperparameters with, to name those still at a start's constant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from amorgp.kernel_grammar import DimWiseStructure

__all__ = ["UNTOUCHED_RTOL", "start_constants"]


UNTOUCHED_RTOL = 1e-6
"""Relative tolerance within which a hyperparameter equals a start's constant
(:meth:`~amorgp.amortizer.stages.results.KernelResult.untouched`): the starts pass their constants through float32
(rounding ``6e-8``) and the network's dtype; a value the data moved does not land
within a millionth of a constant."""


def start_constants(
    structure: DimWiseStructure, params: Tensor, start: str
) -> dict[tuple[int, int, int], tuple[float, ...]]:
    """The constants a start set each hyperparameter to, per slot ``(dim, addend, slot)``
    of ``structure`` (slots a start sets from the data or leaves to the network are
    absent); ``params (D, L, P)`` are the result's (an ``SE*PER`` decay depends on its
    period).

    * ``"prior-mean"`` (:mod:`amorgp.amortizer.stages.null_starts`): every slot at its prior
      mean (``ParamSpec.prior.mean``);
    * ``"heuristic"``: the prior mean, except the lengthscales in input units (the median
      pairwise distance: data, unless raised to the floor) and the periods (the
      periodogram's peak where one exists, raised to the floor; else the prior mean);
    * ``"periodogram"``, ``"periodogram 2"``... (:mod:`amorgp.amortizer.stages.multistart`): the
      periodic lengthscale at :data:`~amorgp.amortizer.stages.multistart.PERIODIC_LENGTHSCALE`
      (times 0.5 or 2 for ``"..., lengthscale x0.5"``/``"x2"``), an ``SE*PER`` decay
      lengthscale raised to ``max(DECAY_PERIODS * period, TREND_LENGTHSCALE)``, the
      lengthscale of every addend without a period raised to
      :data:`~amorgp.amortizer.stages.multistart.TREND_LENGTHSCALE` (a value the network gave
      above these stays the network's; the period is the periodogram's peak: data);
    * anything else (``"network"``, ``"harmonic x2"``...): no constants.

    Calibration then multiplies the variances (and a lone ``LIN``'s offset) by the
    global scale: those rarely keep their constant, and count only where they do.
    """
    from amorgp.amortizer.stages.multistart import (
        DECAY_PERIODS,
        PERIODIC_LENGTHSCALE,
        TREND_LENGTHSCALE,
        slot_tables,
    )
    from amorgp.core.units import Unit
    from amorgp.kernel_grammar import FLOORS, ParamKind, Vocabulary, base_symbol

    out: dict[tuple[int, int, int], tuple[float, ...]] = {}
    if start in ("prior-mean", "heuristic"):
        for pn in structure.param_names():
            sym = base_symbol(pn.symbol)
            spec = sym.params[pn.slot]
            floor = FLOORS[spec.kind]
            input_ls = spec.kind is ParamKind.LENGTHSCALE and sym.param_units[pn.slot] is Unit.INPUT
            if start == "heuristic" and input_ls:  # the median distance, or its floor
                out[(pn.dim, pn.addend, pn.slot)] = (floor,)
                continue
            if start == "heuristic" and spec.kind is ParamKind.PERIOD:
                out[(pn.dim, pn.addend, pn.slot)] = (spec.prior.mean, floor)
                continue
            out[(pn.dim, pn.addend, pn.slot)] = (spec.prior.mean,)
        return out
    if not start.startswith("periodogram"):
        return out
    factor = 0.5 if start.endswith("x0.5") else 2.0 if start.endswith("x2") else 1.0
    names = tuple(sorted({s for dim in structure.dims for s in dim}))
    vocab = Vocabulary(names)
    period_t, per_ls_t, decay_t, trend_t = (t.tolist() for t in slot_tables(vocab))
    for j, addends in enumerate(structure.dims):
        for a, s in enumerate(addends):
            i = names.index(s) + 1  # vocabulary id (0: padding)
            if per_ls_t[i] >= 0:
                out[(j, a, per_ls_t[i])] = (PERIODIC_LENGTHSCALE * factor,)
            if decay_t[i] >= 0 and period_t[i] >= 0:
                period = float(params[j, a, period_t[i]])
                out[(j, a, decay_t[i])] = (max(DECAY_PERIODS * period, TREND_LENGTHSCALE),)
            if trend_t[i] >= 0:
                out[(j, a, trend_t[i])] = (TREND_LENGTHSCALE,)
    return out
