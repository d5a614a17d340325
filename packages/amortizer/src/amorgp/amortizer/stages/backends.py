"""Which solver plan an :class:`~amorgp.amortizer.Amortizer` uses for a size, and how
kernels are grouped for dense refinement within its memory budget."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from amorgp.amortizer.stages.refine import dense_groups
from amorgp.core.errors import OptionError
from amorgp.lazy_kernels import Solver, SolverPlan, plan_solver

__all__ = ["GPBackendSizing"]


class GPBackendSizing:
    """The solver plan by problem size for a class with ``dtype``, ``device``,
    ``memory_budget`` (bytes the dense GP backends may use) and ``backend`` (the backend
    asked for: ``"auto"``, a name of :data:`~amorgp.lazy_kernels.backends.BACKENDS` or a
    solver type)."""

    dtype: torch.dtype
    device: torch.device
    memory_budget: float
    backend: str | type[Solver]

    def solver_plan(self, n: int, n_terms: int = 1, graph: bool = True) -> SolverPlan:
        """The :class:`~amorgp.lazy_kernels.SolverPlan` for ``n`` points and ``n_terms``
        addends evaluated at once, with an autograd graph (refinement) or without (a
        fit's posterior), by :func:`~amorgp.lazy_kernels.plan_solver`: for ``"auto"``
        dense Cholesky, dense CG, KeOps CG (pykeops installed and passing its probe on
        :attr:`device`) or block CG (beyond the dense limits where KeOps is absent or
        fails its probe, which warns once with the reason)."""
        return plan_solver(
            n,
            self.dtype,
            self.device,
            self.memory_budget,
            getattr(self, "backend", "auto"),
            n_terms=n_terms,
            graph=graph,
        )

    def refine_groups(self, n: int, terms: Sequence[int], steps: int | str = 1) -> list[list[int]]:
        """Kernels refined together: consecutive groups whose addends (``terms`` per
        kernel) the dense backend evaluates at once within the memory budget, so that
        many kernels on many points are refined in turn rather than refused.

        Raises:
            OptionError: one kernel alone exceeds the dense limit (``n`` too large).
        """
        groups = dense_groups(terms, lambda t: self.fits_dense(n, t))
        if groups is None:
            raise OptionError(
                f"refine={steps} runs dense Type-2 ML, which n = {n} points exceed "
                f"(dense limit of the memory budget {self.memory_budget:.3g} bytes); "
                "use refine=0 or a subset of the data"
            )
        return groups

    def fits_dense(self, n: int, n_terms: int = 1, graph: bool = True) -> bool:
        """Whether ``n_terms`` addends on ``n`` points are factored densely (Cholesky), with
        an autograd graph or without (see :meth:`solver_plan`)."""
        return self.solver_plan(n, n_terms, graph).dense

    def gp_solver(self, n: int, n_terms: int = 1, graph: bool = True) -> type[Solver]:
        """The solver type of :meth:`solver_plan` (same arguments)."""
        return self.solver_plan(n, n_terms, graph).solver

    def gp_backend(self, n: int, n_terms: int = 1, graph: bool = True) -> str:
        """The backend name of :meth:`solver_plan` (same arguments): ``"cholesky"``,
        ``"cg"``, ``"keops"`` or ``"block"``."""
        return self.solver_plan(n, n_terms, graph).name
