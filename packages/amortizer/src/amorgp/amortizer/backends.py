"""Which GP backend an :class:`~amorgp.amortizer.Amortizer` uses for a size, and how
kernels are grouped for dense refinement within its memory budget."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from amorgp.amortizer.refine import dense_groups
from amorgp.kernel_grammar import OptionError
from amorgp.lazy_kernels import CholeskySolver, Solver, choose_backend, solver_type

__all__ = ["GPBackendSizing"]


class GPBackendSizing:
    """Backend choice by problem size for a class with ``dtype``, ``device`` and
    ``memory_budget`` (bytes the dense GP backends may use)."""

    dtype: torch.dtype
    device: torch.device
    memory_budget: float

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
        """Whether ``n_terms`` addends on ``n`` points fit the dense Cholesky backend, with
        an autograd graph or without (see :meth:`gp_backend`)."""
        return issubclass(self.gp_solver(n, n_terms, graph), CholeskySolver)

    def gp_solver(self, n: int, n_terms: int = 1, graph: bool = True) -> type[Solver]:
        """The :class:`~amorgp.lazy_kernels.Solver` type of :meth:`gp_backend` (same
        arguments): :class:`~amorgp.lazy_kernels.CholeskySolver`,
        :class:`~amorgp.lazy_kernels.CGSolver`, :class:`~amorgp.lazy_kernels.KeOpsSolver`
        or :class:`~amorgp.lazy_kernels.BlockSolver`."""
        return solver_type(self.gp_backend(n, n_terms, graph))

    def gp_backend(self, n: int, n_terms: int = 1, graph: bool = True) -> str:
        """The name of the posterior's backend for ``n`` points and ``n_terms`` addends
        evaluated at once, with an autograd graph (refinement) or without (a fit's
        posterior), by :func:`~amorgp.lazy_kernels.choose_backend`:
        ``"cholesky"``, ``"cg"``, ``"keops"`` (pykeops installed and passing its probe on
        :attr:`device`) or ``"block"`` (the torch block operator: beyond the dense limits
        where KeOps is absent or fails its probe, which warns once with the reason)."""
        return choose_backend(
            n, self.dtype, self.device, self.memory_budget, n_terms=n_terms, graph=graph
        )
