"""The candidate batch of the pipeline (:mod:`amorgp.amortizer.stages.pipeline`) and what
its stages read: :class:`CandidateBatch` (the rows of ``B`` datasets and ``K`` kernels),
:class:`FitOptions` (the checked options of one fit) and :class:`Fitter` (what the stages
read of an amortizer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from amorgp.amortizer.networks.forward import encode_structures
from amorgp.amortizer.networks.prediction import NetworkPrediction
from amorgp.amortizer.stages import calibrate as calibration
from amorgp.amortizer.stages import refine as refine_stage
from amorgp.amortizer.stages.backends import GPBackendSizing
from amorgp.amortizer.stages.constraints import Constraints, KernelConstraints
from amorgp.amortizer.stages.fisher import fisher_applies
from amorgp.amortizer.stages.refine import default_refines, default_subset, resolve_refine
from amorgp.amortizer.stages.results import Factor
from amorgp.lazy_kernels import SolverPlan

if TYPE_CHECKING:
    from amorgp.kernel_grammar import DimWiseStructure, Vocabulary

__all__ = [
    "CandidateBatch",
    "FitOptions",
    "Fitter",
    "Progress",
    "addends",
    "new_batch",
    "refine_plan",
]

Progress = Callable[[str, int, int], None]


class Fitter(NetworkPrediction, GPBackendSizing):
    """What the stages read of an amortizer (:class:`~amorgp.amortizer.frontends.inference.Amortizer`
    is one): its networks (:class:`~amorgp.amortizer.networks.prediction.NetworkPrediction`), its
    solver plan (:class:`~amorgp.amortizer.stages.backends.GPBackendSizing`), the posteriors'
    solver options, the vocabulary, the defaults of ``calibrate`` and ``starts``, the
    training range and how kernels are parsed."""

    gp_options: dict[str, Any]
    calibrate: bool
    starts: int | None
    max_dims: int | None
    max_addends: int

    @property
    def vocabulary(self) -> Vocabulary:
        """The base symbols the network knows."""
        raise NotImplementedError

    def structure(self, kernel: str | DimWiseStructure, n_dims: int) -> DimWiseStructure:
        """``kernel`` as a structure on ``n_dims`` inputs, checked against the network."""
        raise NotImplementedError


@dataclass(frozen=True)
class FitOptions:
    """The checked options of one fit (:meth:`Amortizer.infer_many
    <amorgp.amortizer.frontends.inference.Amortizer.infer_many>` documents each).

    ``constraints``: the call's; ``kernel_constraints``: resolved per structure.
    ``groups``: the kernels L-BFGS refines together (the dense limit's groups; empty
    without a refinement).  ``idle``: the ``refine_status`` of rows that no refinement
    runs on (``"none"``, or ``"skipped"`` where the default refinement does not apply).
    ``evaluate_lml``: ``False`` leaves the factorisation to each
    posterior (no batched factors).  ``exact_network``: one network forward per dataset.
    ``subset``: the points of the seeded subset that the refinement runs on (0: all;
    :func:`~amorgp.amortizer.stages.refine.default_subset`).
    """

    steps: int | Literal["auto"]
    calibrate: bool
    starts: int
    constraints: Constraints
    kernel_constraints: list[KernelConstraints]
    groups: list[list[int]]
    evaluate_lml: bool | None = None
    exact_network: bool = False
    progress: Progress | None = None
    idle: str = "none"
    subset: int = 0


@dataclass
class CandidateBatch:
    """The rows of ``B`` datasets of equal size and ``K`` structures (the pipeline's module
    docstring, :mod:`amorgp.amortizer.stages.pipeline`).

    Attributes:
        X, Y: ``(B, n, d)`` and ``(B, n)`` normalised data on the amortizer's device.
        structures: the ``K`` structures.
        symbols, mask: their encoding ``(K, d, L)``, made once per batch.
        vocabulary: the symbol vocabulary of their parameter layout.
        plan: the solver plan of every posterior (one per batch).
        params, noise: ``(B K, d, L, S)`` and ``(B K,)``: each row's current point.
        start: each row's start name (``"network"`` until a start wins).
        network: each row's network name (candidates compete per kernel and dataset).
        encoder_points: points the dataset encoder read per dataset.
        iterations, status, gain, grad_norm: each row's refinement record
            (:class:`~amorgp.amortizer.stages.results.KernelResult`'s ``refine_*`` fields).
        pending: the calibration on all points is still to run (the pipeline's factor stage
            runs it where nothing comes between).
        factors: each row's dense factor after the factor stage (``None``: the posterior factors
            itself; an element ``None``: that row's factorisation failed).
    """

    X: Tensor
    Y: Tensor
    structures: Sequence[DimWiseStructure]
    symbols: Tensor
    mask: Tensor
    vocabulary: Vocabulary
    plan: SolverPlan
    params: Tensor = field(default_factory=lambda: torch.empty(0))
    noise: Tensor = field(default_factory=lambda: torch.empty(0))
    start: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)
    encoder_points: int = 0
    iterations: list[int] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    pending: bool = False
    factors: list[Factor | None] | None = None

    @property
    def B(self) -> int:
        return int(self.X.shape[0])

    @property
    def K(self) -> int:
        return len(self.structures)

    @property
    def P(self) -> int:
        return self.B * self.K

    @property
    def terms(self) -> list[int]:
        """Addends per structure."""
        return addends(self.structures)

    @property
    def dense_rows(self) -> bool:
        """Whether every stage runs batched over all rows (the pipeline's *dense rows*)."""
        n = self.X.shape[1]
        return (
            self.plan.dense
            and self.X.dtype == torch.float64
            and n <= calibration.MAX_POINTS
            and 8 * n * n <= self.plan.chunk_bytes
        )

    def rows(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Each row's ``X (P, n, d)``, ``Y (P, n)``, ``symbols`` and ``mask (P, d, L)``."""
        sym, msk = encode_structures(
            self.structures, self.vocabulary, self.X.shape[2], self.X.device
        )
        K, B = self.K, self.B
        return (
            self.X.repeat_interleave(K, 0),
            self.Y.repeat_interleave(K, 0),
            sym.repeat(B, 1, 1),
            msk.repeat(B, 1, 1),
        )


def new_batch(
    amz: Fitter, X: Tensor, Y: Tensor, structures: Sequence[DimWiseStructure]
) -> CandidateBatch:
    """An empty batch of the datasets ``X (B, n, d)``, ``Y (B, n)`` (normalised, on the
    amortizer's device and dtype) and ``structures`` (encoded here, once), with the
    amortizer's solver plan."""
    plan = amz.solver_plan(X.shape[1], max(addends(structures)), graph=False)
    sym, msk = encode_structures(structures, amz.vocabulary, X.shape[2], X.device)
    return CandidateBatch(X, Y, structures, sym, msk, amz.vocabulary, plan)


def addends(structures: Sequence[DimWiseStructure]) -> list[int]:
    """Each structure's addends, summed over its dimensions (what a solver plan and the
    dense limit's groups are sized by)."""
    return [sum(len(a) for a in s.dims) for s in structures]


def refine_plan(
    amz: Fitter,
    n: int,
    terms: Sequence[int],
    steps: int | Literal["auto"] | None,
    constraints: Constraints,
) -> tuple[int | Literal["auto"], str, list[list[int]], int]:
    """What runs for ``steps`` (:func:`~amorgp.amortizer.stages.refine.check_refine`'s) on
    datasets of ``n`` points with kernels of ``terms`` addends: the refinement
    (:func:`~amorgp.amortizer.stages.refine.resolve_refine`, by whether the default
    refines there: :func:`~amorgp.amortizer.stages.refine.default_refines`, whole or on
    a subset: :func:`~amorgp.amortizer.stages.refine.default_subset`), the
    ``refine_status`` of rows it leaves alone, L-BFGS's groups of
    kernels where Fisher scoring does not refine (:attr:`FitOptions.groups`), and the
    subset's points (:attr:`FitOptions.subset`; 0: all).

    Raises:
        OptionError: ``priors`` without a refinement, or an L-BFGS refinement above the
            dense limit.
    """
    fisher = fisher_applies(n, terms, amz.dtype, amz.memory_budget)
    dense = fisher or all(amz.fits_dense(n, t) for t in terms)
    refines = default_refines(fisher, n, amz.dtype == torch.float64, dense)
    subset = 0
    if steps is None:
        on_subset = fisher_applies(refine_stage.SUBSET_POINTS, terms, amz.dtype, amz.memory_budget)
        subset = default_subset(refines, n, on_subset)
    run, idle = resolve_refine(steps, refines or subset > 0)
    constraints.check_refine(run)
    groups = amz.refine_groups(n, terms, run) if run != 0 and not fisher and not subset else []
    return run, idle, groups, subset
