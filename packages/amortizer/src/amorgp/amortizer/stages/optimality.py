"""Whether a result is at an optimum of the log marginal likelihood: :class:`Optimality`
(the predicted gain of one more Fisher-scoring step and the gradient norm), from the
refinement that produced the result or from one batched Fisher evaluation on demand
(:func:`evaluate_optimality`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from amorgp.amortizer.stages.constraints import KernelConstraints

if TYPE_CHECKING:
    from amorgp.amortizer.stages.results import KernelResult

__all__ = [
    "Optimality",
    "evaluate_optimality",
    "evaluate_rows",
    "stored_optimality",
    "unknown_optimality",
]


@dataclass(frozen=True)
class Optimality:
    """Whether a result's hyperparameters are at an optimum of the log marginal likelihood
    (:meth:`~amorgp.amortizer.stages.results.KernelResult.optimality`).

    Attributes:
        gain: the log marginal likelihood (nats) that one more Fisher-scoring step is
            predicted to gain there (:func:`~amorgp.amortizer.stages.fisher.predicted_gain`,
            ``g^T F^-1 g / 2`` near an interior optimum; the log prior's gradient
            included with ``priors``); NaN where unknown.
        grad_norm: the norm of the gradient in the refinement's log parameters
            (``log(theta - floor)``; fixed ones left out); NaN where unknown.
        source: where the numbers come from: ``"refinement"`` (the Fisher scoring that
            produced the result), ``"evaluated"`` (one Fisher evaluation at the result,
            on demand), or why they are unknown (``"not evaluated: n = 5000 > 1000
            points"``, ``"the covariance could not be factored"``...).
    """

    gain: float
    grad_norm: float
    source: str

    @property
    def at_optimum(self) -> bool | None:
        """``gain < GAIN_TOL`` (:data:`amorgp.amortizer.stages.fisher.GAIN_TOL`, 0.01 nats);
        ``None`` where the gain is unknown."""
        from amorgp.amortizer.stages.fisher import GAIN_TOL

        return None if math.isnan(self.gain) else bool(self.gain < GAIN_TOL)


def unknown_optimality(reason: str) -> Optimality:
    """An :class:`Optimality` whose numbers are unknown, for ``reason``."""
    return Optimality(math.nan, math.nan, reason)


def stored_optimality(r: KernelResult) -> Optimality | None:
    """The refinement's numbers where it computed them (Fisher scoring that did not fail)."""
    if math.isnan(r.refine_gain) or r.refine_status == "failed":
        return None
    return Optimality(r.refine_gain, r.grad_norm, "refinement")


def evaluate_optimality(results: Sequence[KernelResult]) -> None:
    """Compute :meth:`~amorgp.amortizer.stages.results.KernelResult.optimality` of many results at once: those of the same
    structure, size and constraints in one batched Fisher evaluation
    (:class:`~amorgp.amortizer.stages.fisher_objective.BatchLogMarginalLikelihood`; rows are independent,
    so each result gets what it would get alone).  Results that know theirs already,
    hold no data or have more than :data:`~amorgp.amortizer.stages.fisher.CHECK_POINTS` points
    are left to :meth:`~amorgp.amortizer.stages.results.KernelResult.optimality`."""
    from amorgp.amortizer.stages.fisher import CHECK_POINTS

    groups: dict[tuple[Any, ...], list[KernelResult]] = {}
    for r in results:
        if r._optimality_cache is not None or stored_optimality(r) is not None:
            continue
        if r._posterior is None or r.n_points > CHECK_POINTS:
            continue
        key = (
            r.kernel,
            r.n_points,
            tuple(r.params.shape),
            r.noise_floor,
            tuple(sorted(r.fixed.items(), key=repr)),
            tuple(sorted(r.bounds.items(), key=repr)),
            r.priors,
        )
        groups.setdefault(key, []).append(r)
    for rows in groups.values():
        for r, opt in zip(rows, evaluate_rows(rows), strict=True):
            object.__setattr__(r, "_optimality_cache", opt)


def evaluate_rows(rows: Sequence[KernelResult]) -> list[Optimality]:
    """One batched Fisher evaluation of results of one structure, size and constraints."""
    from amorgp.amortizer.stages.fisher import predicted_gain
    from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood

    first = rows[0]
    with torch.inference_mode(False), torch.no_grad():
        X = torch.stack([r.posterior.X.detach().to("cpu", torch.float64) for r in rows])
        y = torch.stack([r.posterior.y.detach().to("cpu", torch.float64) for r in rows])
        params = torch.stack([r.params.detach().to("cpu", torch.float64) for r in rows])
        noise = torch.tensor([r.noise for r in rows], dtype=torch.float64)
        cons = KernelConstraints(
            first.kernel, first.noise_floor, first.fixed, first.bounds, first.priors
        )
        obj = BatchLogMarginalLikelihood(X, y, first.kernel, None if cons.trivial else cons)
        lml, grad, fisher = obj.evaluate_gauged(obj.to_log_rows(params, noise))
        gain = predicted_gain(fisher, grad).tolist()
        norm = grad.norm(dim=-1).tolist()
    return [
        Optimality(gain[i], norm[i], "evaluated")
        if math.isfinite(float(lml[i]))
        else unknown_optimality("the covariance could not be factored")
        for i in range(len(rows))
    ]
