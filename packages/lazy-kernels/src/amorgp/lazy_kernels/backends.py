"""Which solver and kernel operator an exact GP uses, decided once: :func:`plan_solver`
turns ``(n, dtype, device, memory budget, backend request)`` into a :class:`SolverPlan`
(the :class:`~amorgp.lazy_kernels.solvers.Solver` type and the budgets), which every layer
reads (the amortizer, its estimator, the command line, the GPyTorch bridge); backend
names are accepted at the user's edge only.  :func:`backend_plan` builds the training
operator of a kernel for a plan; :func:`choose_backend` is the plan's name.

Backends (``backend=`` of :meth:`Posterior.from_kernel
<amorgp.lazy_kernels.Posterior.from_kernel>`):

``"cholesky"``
    dense operator (batched evaluator) and one Cholesky (:class:`CholeskySolver`);
    ``O(n^3)`` time, ``O(n^2)`` memory.
``"cg"``
    dense operator kept in memory, used through matvecs by preconditioned CG + SLQ
    (:class:`CGSolver`).
``"keops"``
    :class:`~amorgp.lazy_kernels.keops.KeOpsOperator` (``K`` never formed, ``O(n)``
    memory) and preconditioned CG + SLQ (:class:`KeOpsSolver`).  Where KeOps fails its
    probe on the device (:func:`~amorgp.lazy_kernels.keops_usable`, which warns once with
    the reason), the block backend instead.
``"block"``
    :class:`~amorgp.lazy_kernels.BlockKernelOperator` (``K`` never formed: matvecs by row
    blocks of the dense evaluator sized to the memory budget, ``O(n x block)`` memory, any
    device, no compiler) and preconditioned CG + SLQ (:class:`BlockSolver`).
``"dense"``
    the dense operator with the solver of the memory rule: ``"cholesky"`` where it fits,
    ``"cg"`` otherwise (never KeOps).

``"auto"`` picks by :func:`choose_backend`: Cholesky up to :data:`CHOLESKY_MAX_N` points
when the dense evaluator's working memory (which grows with the number of addends) and
the Cholesky workspace fit the memory budget, dense CG while the evaluator's working
memory fits, KeOps CG beyond where KeOps works on the device, else block CG.  Any
:class:`KernelOperator` may be given instead of a kernel; then the backend only picks the
solver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from amorgp.core.errors import DataError, OptionError
from amorgp.lazy_kernels.budgets import CHUNK_BYTES, MEMORY_BUDGET
from amorgp.lazy_kernels.evaluation import blockwise_graph
from amorgp.lazy_kernels.factory import kernel_operator
from amorgp.lazy_kernels.keops import KeOpsOperator
from amorgp.lazy_kernels.operators import (
    EVALUATOR_MATRICES_PER_TERM,
    DenseKernel,
    KernelOperator,
)
from amorgp.lazy_kernels.solvers import (
    SOLVERS,
    BlockSolver,
    CholeskySolver,
    KeOpsSolver,
    LazyCGSolver,
    Solver,
    is_solver_type,
    solver_type,
)

__all__ = [
    "BACKENDS",
    "CHOLESKY_MAX_N",
    "EVALUATOR_MATRICES_BLOCKWISE",
    "EVALUATOR_MATRICES_NO_GRAPH",
    "EVALUATOR_MATRICES_NO_GRAPH_DEVICE",
    "EVALUATOR_MATRICES_PER_TERM",
    "SolverPlan",
    "backend_plan",
    "check_backend",
    "choose_backend",
    "plan_solver",
]

Backend = Literal["auto", "cholesky", "cg", "keops", "block", "dense"]
"""The backend names: a solver (``"cholesky"``, ``"cg"``) on the dense operator, CG on a
lazy operator (``"keops"``, ``"block"``), or a rule (``"auto"``, ``"dense"``)."""

BACKENDS: tuple[str, ...] = ("auto", *SOLVERS, "dense")
"""Every name ``backend=`` accepts: the rules ``"auto"`` and ``"dense"`` and the name of
each registered solver (:data:`~amorgp.lazy_kernels.solvers.SOLVERS`), so a new solver is
one class in :mod:`amorgp.lazy_kernels.solvers` (and, for ``"auto"`` to pick it, one line
of the memory rule)."""

CHOLESKY_MAX_N = 6000
"""Largest n for which ``auto`` uses dense Cholesky (float64, CPU).  In the benchmark
(docs/benchmarks/lazy-kernels.md, n <= 2000) Cholesky is still faster per loss+gradient
than dense CG and exact, so the limit sits where its O(n^3) cost (a few seconds at
n = 6000 on 2 cores) starts to exceed tens of O(n^2) CG iterations; it is a default, not a
measured crossover beyond n = 2000."""


EVALUATOR_MATRICES_NO_GRAPH = 4
"""Peak working memory of the dense evaluator without an autograd graph, in matrices of
the output's size, the output included, whatever the number of addends (it works by
blocks of points and updates in place): measured 2.1-2.5 at n = 2000-3000, d = 8, 8-32
addends, up to 6 at n = 1000 where a fixed few tens of MiB of block buffers count
(docs/benchmarks/lazy-kernels.md, section 9)."""

EVALUATOR_MATRICES_NO_GRAPH_DEVICE = 12
"""The same count on other devices, where the evaluator works on whole matrices (the
blocks are a CPU cache optimisation): the bound of whole-matrix evaluation (not measured
on a GPU)."""

EVALUATOR_MATRICES_BLOCKWISE = 6
"""Peak working memory of the dense evaluator *with* a graph for the parameters on the
CPU, forward and backward, in matrices of the output's size, where it records that graph
block by block (from n = 2048 for any number of dimensions:
:func:`~amorgp.lazy_kernels.evaluation.blockwise_graph`): measured 3.8-5.6 at
n = 2000-3000, d = 8, 8-32 addends (section 9).  Below that size, on other devices and with a graph for the inputs, the
count is :data:`EVALUATOR_MATRICES_PER_TERM` per addend."""


@dataclass(frozen=True)
class SolverPlan:
    """How the exact GPs of one call are solved, decided once by :func:`plan_solver`.

    Attributes:
        solver: the :class:`~amorgp.lazy_kernels.solvers.Solver` type
            (:class:`~amorgp.lazy_kernels.CholeskySolver`, :class:`~amorgp.lazy_kernels.CGSolver`,
            :class:`~amorgp.lazy_kernels.KeOpsSolver` or :class:`~amorgp.lazy_kernels.BlockSolver`).
        memory_budget: bytes the dense backends may use; the block operator's row blocks
            use half of it.
        chunk_bytes: bytes of one chunk of work (kernel matrices evaluated together, the
            test points of one prediction chunk).
    """

    solver: type[Solver]
    memory_budget: float = MEMORY_BUDGET
    chunk_bytes: float = CHUNK_BYTES

    @property
    def name(self) -> str:
        """The backend's name: ``"cholesky"``, ``"cg"``, ``"keops"`` or ``"block"``."""
        return self.solver.backend

    @property
    def dense(self) -> bool:
        """Whether the plan factors the dense kernel matrix (Cholesky)."""
        return issubclass(self.solver, CholeskySolver)

    @property
    def lazy(self) -> bool:
        """Whether the kernel matrix is never formed (KeOps or block operator)."""
        return issubclass(self.solver, LazyCGSolver)

    @property
    def operator_budget(self) -> float:
        """Bytes the training operator may use: half of :attr:`memory_budget`."""
        return self.memory_budget / 2

    @property
    def prediction_budget(self) -> float:
        """Bytes one chunk of test points may use: :attr:`chunk_bytes`; with the lazy
        solvers at least half of :attr:`memory_budget` (each chunk costs one CG solve of
        ``O(n^2)`` matvecs, so fewer, larger chunks are faster)."""
        return max(self.chunk_bytes, self.memory_budget / 2) if self.lazy else self.chunk_bytes


def check_backend(backend: object) -> str | type[Solver]:
    """``backend`` if it is a name of :data:`BACKENDS` or a :class:`Solver` type.

    Raises:
        OptionError: anything else, naming the accepted values.
    """
    if is_solver_type(backend) or (isinstance(backend, str) and backend in BACKENDS):
        return backend
    raise OptionError(f"unknown backend {backend!r}; use {', '.join(BACKENDS)}")


def plan_solver(
    n: int,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    memory_budget: float = MEMORY_BUDGET,
    backend: str | type[Solver] = "auto",
    *,
    keops: bool | None = None,
    n_terms: int = 1,
    graph: bool = True,
    input_graph: bool = False,
    chunk_bytes: float = CHUNK_BYTES,
) -> SolverPlan:
    """The :class:`SolverPlan` for ``n`` training points: the ``backend`` asked for (a
    name of :data:`BACKENDS` or a solver type), or for ``"auto"`` the memory rule below
    (``"dense"``: the rule without the lazy operators, dense CG where Cholesky does not
    fit).

    The dense backends build ``K`` with the batched evaluator, whose peak memory depends
    on how it runs (docs/benchmarks/lazy-kernels.md, sections 1b and 9):

    * recording a whole-matrix autograd graph: about ``EVALUATOR_MATRICES_PER_TERM *
      n_terms`` matrices of ``n x n``, plus ``K`` itself;
    * without a graph (``graph=False``: neither the parameters nor the inputs require
      grad, e.g. conditioning on predicted hyperparameters) it works by blocks of points:
      at most :data:`EVALUATOR_MATRICES_NO_GRAPH` matrices on the CPU, whatever the number
      of addends (:data:`EVALUATOR_MATRICES_NO_GRAPH_DEVICE` elsewhere);
    * with a graph for the parameters only on the CPU, from ``n >= 2048`` it records the
      graph block by block: at most :data:`EVALUATOR_MATRICES_BLOCKWISE` matrices, forward
      and backward.

    The smaller count that applies is used; Cholesky needs two more matrices.

    Rule: ``"cholesky"`` if ``n <= CHOLESKY_MAX_N`` (float64; ``CHOLESKY_MAX_N // 2``
    for float32, whose Cholesky fails earlier) and the Cholesky peak fits
    ``memory_budget`` bytes; else ``"cg"`` if the evaluator peak fits; else ``"keops"``
    where pykeops is installed and passes its probe on ``device``
    (:func:`~amorgp.lazy_kernels.keops_usable`: a subprocess, cached; a failure warns
    once), else ``"block"`` (the torch block operator, ``O(n x block)`` memory).
    On CUDA the dense limits double (fast dense kernels).

    Args:
        n_terms: active addends of the kernel(s) evaluated at once (summed over input
            dimensions and over the kernels of one batch).
        graph: whether ``K`` is evaluated with an autograd graph.
        input_graph: whether that graph reaches the inputs (they require grad).
        keops: whether KeOps may be used (None: installed and passing its probe).

    Raises:
        ValueError: ``n_terms < 1``.
        OptionError: an unknown backend.
    """
    request = check_backend(backend)
    if request not in ("auto", "dense"):
        return SolverPlan(solver_type(request), memory_budget, chunk_bytes)
    if request == "dense":
        keops = True  # never lazy: where only KeOps would fit, dense CG as asked
    name = _memory_rule(n, dtype, device, memory_budget, keops, n_terms, graph, input_graph)
    if request == "dense" and name == "keops":
        name = "cg"
    return SolverPlan(solver_type(name), memory_budget, chunk_bytes)


def _memory_rule(
    n: int,
    dtype: torch.dtype,
    device: torch.device | str,
    memory_budget: float,
    keops: bool | None,
    n_terms: int,
    graph: bool,
    input_graph: bool,
) -> str:
    """The backend name of :func:`plan_solver`'s memory rule (documented there)."""
    from amorgp.lazy_kernels.probe import keops_installed, keops_usable

    if n_terms < 1:
        raise ValueError(f"n_terms must be >= 1, got {n_terms}")
    item = torch.finfo(dtype).bits // 8
    dense = item * n * n
    cpu = torch.device(device).type == "cpu"
    matrices = EVALUATOR_MATRICES_PER_TERM * n_terms + 1
    if not graph:
        bound = EVALUATOR_MATRICES_NO_GRAPH if cpu else EVALUATOR_MATRICES_NO_GRAPH_DEVICE
        matrices = min(matrices, bound)
    elif cpu and not input_graph and blockwise_graph(n):
        matrices = min(matrices, EVALUATOR_MATRICES_BLOCKWISE)
    evaluator = matrices * dense
    limit = CHOLESKY_MAX_N if dtype == torch.float64 else CHOLESKY_MAX_N // 2
    if not cpu:
        limit *= 2
    if n <= limit and evaluator + 2 * dense <= memory_budget:
        return "cholesky"
    if evaluator <= memory_budget:
        return "cg"
    if keops is None:
        keops = keops_installed() and keops_usable(device)
    return "keops" if keops else "block"


def choose_backend(
    n: int,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    memory_budget: float = MEMORY_BUDGET,
    keops: bool | None = None,
    n_terms: int = 1,
    graph: bool = True,
    input_graph: bool = False,
) -> str:
    """The name of the backend ``"auto"`` uses for ``n`` training points (the name of
    :func:`plan_solver`'s plan, same arguments)."""
    return plan_solver(
        n, dtype, device, memory_budget, keops=keops, n_terms=n_terms, graph=graph,
        input_graph=input_graph,
    ).name  # fmt: skip


def backend_plan(
    kernel: DenseKernel | KernelOperator,
    X: Tensor,
    backend: str | type[Solver] | SolverPlan = "auto",
    memory_budget: float = MEMORY_BUDGET,
) -> tuple[type[Solver], KernelOperator]:
    """The solver type and the training operator ``K(X, X)`` of ``kernel``.

    Args:
        kernel: a dense kernel (:class:`~amorgp.lazy_kernels.DimWiseKernel`, or
            :class:`~amorgp.lazy_kernels.ExpressionKernel` for the dense backends), or a
            symmetric :class:`KernelOperator` ``K(X, X)`` (then only ``"auto"``,
            ``"dense"``, ``"cholesky"``, ``"cg"``, a solver type or a dense plan).
        X: ``(n, D)`` training inputs.
        backend: a :class:`SolverPlan` already made (its budgets are used), or a name of
            :data:`BACKENDS` or a :class:`Solver` type, planned here by
            :func:`plan_solver` for this kernel's addends and whether a graph is recorded.
        memory_budget: bytes the dense backends may use (for a name or a type).

    Raises:
        OptionError: an unknown backend, a kernel the backend cannot evaluate, a lazy
            backend with an operator.
        DataError: an operator whose inputs differ from ``X``.
    """
    plan = backend if isinstance(backend, SolverPlan) else None
    request = plan.solver if plan is not None else check_backend(backend)
    n = X.shape[0]
    if isinstance(kernel, KernelOperator):
        operator = _given_operator(kernel, X, request)
        if request in ("auto", "dense"):
            item = torch.finfo(X.dtype).bits // 8
            dense_fits = n * n * (kernel.bytes_per_entry + 2 * item) <= memory_budget
            request = "cholesky" if n <= CHOLESKY_MAX_N and dense_fits else "cg"
        return solver_type(request), operator
    _check_kernel(kernel, X)
    if plan is None:
        params = getattr(kernel, "params", None)
        plan = plan_solver(
            n,
            X.dtype,
            X.device,
            memory_budget,
            request,
            n_terms=kernel.n_terms,
            graph=X.requires_grad or bool(getattr(params, "requires_grad", False)),
            input_graph=X.requires_grad,
        )
    solver = plan.solver
    operator = kernel_operator(
        kernel, X, backend=solver.operator_backend, memory_budget=plan.operator_budget
    )
    if issubclass(solver, KeOpsSolver) and not isinstance(operator, KeOpsOperator):
        solver = BlockSolver  # KeOps failed its probe (warned)
    return solver, operator


def check_data(X: Tensor, y: Tensor) -> None:
    """Raise :class:`DataError` unless ``X (n, D)`` and ``y (n,)`` are finite, ``n >= 1``."""
    if not isinstance(X, Tensor) or X.ndim != 2:
        raise DataError(f"X must be an (n, D) tensor, got {tuple(getattr(X, 'shape', ()))}")
    if not isinstance(y, Tensor) or y.shape != (X.shape[0],):
        raise DataError(f"y must have shape ({X.shape[0]},), got {tuple(getattr(y, 'shape', ()))}")
    if X.shape[0] == 0:
        raise DataError("no training points")
    for name, t in (("X", X), ("y", y)):
        if not bool(torch.isfinite(t).all()):
            raise DataError(f"{name} contains NaN or infinite values")


def _check_kernel(kernel: object, X: Tensor) -> None:
    from amorgp.lazy_kernels.structure import DimWiseKernel, ExpressionKernel

    if not isinstance(kernel, DimWiseKernel | ExpressionKernel):
        raise OptionError(
            "kernel must be a DimWiseKernel, an ExpressionKernel or a KernelOperator, "
            f"got {type(kernel).__name__}"
        )
    d = kernel.structure.n_dims if isinstance(kernel, DimWiseKernel) else kernel.n_dims
    if X.shape[1] != d:
        raise DataError(f"X has {X.shape[1]} dimensions but the kernel {kernel} has {d}")


def _given_operator(op: KernelOperator, X: Tensor, backend: str | type[Solver]) -> KernelOperator:
    if backend in ("keops", "block") or (
        isinstance(backend, type) and backend.operator_backend != "dense"
    ):
        raise OptionError("with a KernelOperator, backend picks the solver: auto, cholesky or cg")
    if op.X2 is not op.X1:
        raise OptionError("the operator must be the symmetric training operator K(X, X)")
    if op.X1.shape != X.shape or not bool(torch.equal(op.X1, X)):
        raise DataError("the operator's inputs differ from X")
    return op
