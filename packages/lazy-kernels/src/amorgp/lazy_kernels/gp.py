"""Deprecated: :class:`ExactGP`, an exact GP that rebuilds its posterior when its kernel
parameters or noise change in place.

Use :meth:`Posterior.from_kernel <amorgp.lazy_kernels.Posterior.from_kernel>`: one
posterior per parameter value (its solver and operator chosen once, by
:func:`~amorgp.lazy_kernels.backend_plan`), built again after an optimiser step.  The
backend rules are in :mod:`amorgp.lazy_kernels.backends`; this module re-exports
:func:`choose_backend` and its constants.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import DataError
from amorgp.lazy_kernels.backends import (
    CHOLESKY_MAX_N,
    EVALUATOR_MATRICES_BLOCKWISE,
    EVALUATOR_MATRICES_NO_GRAPH,
    EVALUATOR_MATRICES_NO_GRAPH_DEVICE,
    EVALUATOR_MATRICES_PER_TERM,
    Backend,
    backend_plan,
    check_data,
    choose_backend,
)
from amorgp.lazy_kernels.budgets import CHUNK_BYTES, MEMORY_BUDGET
from amorgp.lazy_kernels.operators import DenseKernel, KernelOperator
from amorgp.lazy_kernels.posterior import Posterior
from amorgp.lazy_kernels.solvers import (
    LazyCGSolver,
    PivotedCholeskyPreconditioner,
    Solver,
    pcg,
    pivoted_cholesky,
    slq_logdet,
)

__all__ = [
    "CHOLESKY_MAX_N",
    "EVALUATOR_MATRICES_BLOCKWISE",
    "EVALUATOR_MATRICES_NO_GRAPH",
    "EVALUATOR_MATRICES_NO_GRAPH_DEVICE",
    "EVALUATOR_MATRICES_PER_TERM",
    "ExactGP",
    "PivotedCholeskyPreconditioner",
    "choose_backend",
    "pcg",
    "pivoted_cholesky",
    "slq_logdet",
]


class ExactGP:
    """Deprecated (a :class:`DeprecationWarning` on construction): use
    :meth:`Posterior.from_kernel` with the same arguments (``kernel, X, y, noise``), one
    posterior per parameter value.

    Exact GP regression with a fixed kernel and noise, over one cached :class:`Posterior`.

    Args:
        kernel: a dense kernel (:class:`~amorgp.lazy_kernels.DimWiseKernel`, or
            :class:`~amorgp.lazy_kernels.ExpressionKernel` for the dense backends) whose
            ``params`` may require grad, or a symmetric :class:`KernelOperator` ``K(X, X)``.
        noise: observation-noise variance ``sigma^2 > 0`` (float or 0-d tensor, may
            require grad).
        X: ``(n, D)`` training inputs.
        y: ``(n,)`` training targets.
        backend: ``"auto"``, ``"cholesky"``, ``"cg"``, ``"keops"``, ``"block"`` or
            ``"dense"`` (the dense operator, solver by the memory rule); with an operator
            ``"cholesky"`` or ``"cg"`` (``"auto"``/``"dense"``: by the memory rule).
            :attr:`backend` holds the resolved name (``"cholesky"``, ``"cg"``, ``"keops"``
            or ``"block"``; ``"block"`` also where ``"keops"`` was asked for and KeOps
            fails its probe, with a warning).  A
            :class:`~amorgp.lazy_kernels.solvers.Solver` type may be given instead of a
            name; the name is converted once, to :attr:`solver_type`.
        memory_budget: bytes the dense backends may use (for ``"auto"``); the block
            backend's row blocks may use half of it, and so may the chunks of test points
            of the lazy backends (below), so that both together fit.
        cg_tol, max_cg_iter, precond_rank, n_probes, generator: of the CG backends (see
            :class:`Posterior`).
        chunk_budget: bytes one chunk of test points may use in predictions; with the lazy
            backends at least half of ``memory_budget``, since each chunk costs one CG
            solve of ``O(n^2)`` matvecs, so fewer, larger chunks are faster.
        var_block: test points per batched CG solve of the predictive variance; default
            16 for dense CG, and the whole chunk of test points for the lazy backends
            (``"keops"``, ``"block"``), whose matvecs cost one evaluation of ``K``
            whatever the number of right-hand sides (8x faster variances at n = 2000 on
            the CPU, ``docs/benchmarks/gpu.md``).  The chunk's memory rule already counts
            the CG work arrays.

    The posterior (its factor) is built on the first query and rebuilt only when the
    kernel parameters or the noise are modified in place (an optimiser step).

    Raises:
        DataError: on shape mismatches, NaN/Inf, non-positive noise.
        OptionError: unknown backend or a kernel the backend cannot evaluate.
    """

    def __init__(
        self,
        kernel: DenseKernel | KernelOperator,
        noise: float | Tensor,
        X: Tensor,
        y: Tensor,
        *,
        backend: Backend | type[Solver] = "auto",
        memory_budget: float = MEMORY_BUDGET,
        cg_tol: float = 1e-8,
        max_cg_iter: int = 1000,
        precond_rank: int = 64,
        n_probes: int = 15,
        generator: torch.Generator | None = None,
        chunk_budget: float = CHUNK_BYTES,
        var_block: int | None = None,
    ) -> None:
        warnings.warn(
            "ExactGP is deprecated; use Posterior.from_kernel(kernel, X, y, noise, backend=...) "
            "(one posterior per parameter value)",
            DeprecationWarning,
            stacklevel=2,
        )
        check_data(X, y)
        self.noise = torch.as_tensor(noise, dtype=X.dtype, device=X.device)
        nd = self.noise.detach()
        if nd.ndim != 0 or not bool(torch.isfinite(nd)) or not float(nd) > 0:
            raise DataError(f"noise must be a positive finite scalar, got {noise!r}")
        self.solver_type, self._operator = backend_plan(kernel, X, backend, memory_budget)
        lazy = issubclass(self.solver_type, LazyCGSolver)
        self.kernel, self.X, self.y = kernel, X, y
        self._options: dict[str, Any] = {
            "cg_tol": cg_tol,
            "max_cg_iter": max_cg_iter,
            "precond_rank": precond_rank,
            "n_probes": n_probes,
            "memory_budget": max(chunk_budget, memory_budget / 2) if lazy else chunk_budget,
            "var_block": var_block,
            "generator": generator if generator is not None else torch.Generator().manual_seed(0),
        }
        self._posterior: Posterior | None = None
        self._versions: tuple[int, ...] = ()

    @property
    def backend(self) -> str:
        """The resolved backend name: ``"cholesky"``, ``"cg"``, ``"keops"`` or ``"block"``
        (the name of :attr:`solver_type`)."""
        return self.solver_type.backend

    def _state(self) -> tuple[int, ...]:
        owner = getattr(self.kernel, "kernel", self.kernel)  # an operator's kernel
        params = getattr(owner, "params", None)
        tensors = [self.noise] + ([params] if isinstance(params, Tensor) else [])
        return tuple(t._version for t in tensors)

    def posterior(self) -> Posterior:
        """The cached :class:`Posterior` (built on first use; rebuilt after an in-place change
        of the kernel parameters or the noise)."""
        if self._posterior is None or self._state() != self._versions:
            operator = self._operator if self._posterior is None else self._operator.on(self.X)
            self._posterior = Posterior(
                operator, self.y, self.noise, method=self.solver_type, **self._options
            )
            self._versions = self._state()
        return self._posterior

    @property
    def factored(self) -> bool:
        """Whether the dense Cholesky factor of the current parameters exists (a prediction
        then costs no factorisation)."""
        post = self._posterior
        return post is not None and post.factored and self._state() == self._versions

    @property
    def last_cg_iterations(self) -> int:
        """CG iterations of the posterior's last solve (0 for Cholesky)."""
        return self._posterior.last_cg_iterations if self._posterior is not None else 0

    def log_marginal_likelihood(self) -> Tensor:
        """``log p(y | X, theta, sigma^2)`` (0-d), differentiable w.r.t. kernel params and noise
        (see :meth:`Posterior.log_marginal_likelihood`)."""
        return self.posterior().log_marginal_likelihood()

    def predict(
        self, X_test: Tensor, return_var: bool = True, var_block: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Posterior predictive mean and (latent, diagonal, clamped >= 0) variance.

        Args:
            X_test: ``(m, D)`` test inputs.
            return_var: also compute the variance; with a CG backend this costs one
                batched solve per ``var_block`` test points.
            var_block: test points per batched CG solve (default: the GP's ``var_block``).

        Returns:
            ``mean (m,)`` and ``var (m,)`` (or None).
        """
        post = self.posterior()
        if var_block is not None:
            post.var_block = var_block
        return post.predict(X_test, return_var)
