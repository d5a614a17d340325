"""The solvers of the exact GP posterior, and their building blocks.

A :class:`Solver` owns the one factorisation of ``A = K + sigma^2 I`` that a
:class:`~amorgp.lazy_kernels.Posterior` serves from: ``alpha = A^{-1} y``, solves
``A^{-1} B``, ``log det A`` and the log marginal likelihood, and the quadratic forms
``K_*^T A^{-1} K_*`` of the predictive (co)variance.  Which one runs is a type, chosen
once (:func:`solver_type` maps the backend names :func:`~amorgp.lazy_kernels.choose_backend`
returns and users pass to it):

:class:`CholeskySolver` (``"cholesky"``)
    ``A + eps I = L L^T`` by :func:`amorgp.diff_linalg.robust_cholesky` (``eps = 0``
    unless the factorisation needs jitter); the variance is ``k_** - ||L^{-1} K_*||^2``
    per column.  The log marginal likelihood is exact and differentiable w.r.t. the kernel
    parameters and the noise through the fused adjoint ``Abar = 1/2 (alpha alpha^T -
    A^{-1})`` (``A^{-1}`` from ``L``, never a second factorisation).
:class:`CGSolver` (``"cg"``)
    the rank-``r`` pivoted-Cholesky preconditioner (plus the diagonal it leaves out, and
    the noise) and batched preconditioned CG on operator matvecs; ``log det A`` by
    stochastic Lanczos quadrature from the same CG run with ``n_probes`` probes
    ``z ~ N(0, P)``; gradients use ``d log p = 1/2 a^T dA a - 1/2 tr(A^{-1} dA)`` with a
    Hutchinson estimate of the trace (as GPyTorch's BBMM).  Variances cost one batched CG
    solve (with the same preconditioner) per ``var_block`` test points.
:class:`LazyCGSolver` (``"keops"``: :class:`KeOpsSolver`, ``"block"``: :class:`BlockSolver`)
    the same CG on an operator that never forms ``K`` (KeOps or row blocks), whose
    matvecs cost one evaluation of ``K`` whatever the number of right-hand sides: the
    variance of a whole chunk of test points is one CG solve.

The CG building blocks (:func:`pcg`, :class:`PivotedCholeskyPreconditioner`,
:func:`pivoted_cholesky`, :func:`slq_logdet`) are in :mod:`amorgp.lazy_kernels.cg`.
"""

from __future__ import annotations

import inspect
import math
import numbers
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard

import torch
from torch import Tensor

from amorgp.core.errors import DataError, OptionError, shorten
from amorgp.diff_linalg import robust_cholesky
from amorgp.lazy_kernels.cg import (
    PivotedCholeskyPreconditioner,
    pcg,
    pivoted_cholesky,
    slq_logdet,
)
from amorgp.lazy_kernels.dense_posterior import _DenseLML

if TYPE_CHECKING:
    from amorgp.lazy_kernels.operators import KernelOperator

__all__ = [
    "MAX_SOLVER_SIZES",
    "check_solver_options",
    "BlockSolver",
    "CGSolver",
    "CholeskySolver",
    "KeOpsSolver",
    "LazyCGSolver",
    "PivotedCholeskyPreconditioner",
    "SOLVERS",
    "Solver",
    "is_solver_type",
    "pcg",
    "pivoted_cholesky",
    "slq_logdet",
    "solver_type",
]

_LOG_2PI = math.log(2.0 * math.pi)


# -- the solvers --------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


MAX_SOLVER_SIZES = {
    "max_cg_iter": 100_000,
    "n_probes": 10_000,
    "precond_rank": 100_000,
    "max_tries": 100,
    "var_block": 2**30,
}
"""Largest value of each integer size option :func:`check_solver_options` accepts: far
beyond any useful setting (the defaults are 1000 iterations, 15 probes, rank 64, 5 tries),
and small enough that a typo (``n_probes=10**12``, an ``(n, n_probes)`` matrix of 88 TB
at n = 10^4) is refused before anything is allocated."""


def check_solver_options(**options: Any) -> dict[str, Any]:
    """Check the solver options a :class:`~amorgp.lazy_kernels.Posterior` passes on
    (``cg_tol`` in (0, 1), ``max_cg_iter``, ``n_probes`` and ``var_block`` >= 1,
    ``precond_rank`` >= 0, ``jitter`` >= 0 finite, ``max_tries`` >= 1, each integer size
    at most its :data:`MAX_SOLVER_SIZES` entry; others unchecked); returns them.

    Raises:
        OptionError: naming the option, its value and its domain.
    """

    rules = {
        "cg_tol": (lambda v: _is_real(v) and 0 < v < 1, "a number in (0, 1)"),
        "max_cg_iter": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "n_probes": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "max_tries": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "precond_rank": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
        "var_block": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "jitter": (lambda v: _is_real(v) and math.isfinite(v) and v >= 0, "a finite number >= 0"),
    }
    for name, value in options.items():
        shown = shorten(repr(value) if isinstance(value, str) else value)
        rule = rules.get(name)
        if rule is not None and not rule[0](value):
            raise OptionError(f"{name} must be {rule[1]}, got {shown}")
        high = MAX_SOLVER_SIZES.get(name)
        if high is not None and value > high:
            raise OptionError(f"{name} must be at most {high}, got {shown}")
    return options


class Solver(ABC):
    """One factorisation of ``A = K + sigma^2 I`` and everything served from it.

    A solver belongs to one :class:`~amorgp.lazy_kernels.Posterior`, which builds it from
    its type; the factor is built on first use and counted in :attr:`factorizations`.
    Pickling drops the factor (``O(n^2)`` for Cholesky): it is rebuilt on first use.

    Args:
        operator: the symmetric training operator ``K(X, X)``.
        y: ``(n,)`` training targets.
        noise: 0-d ``sigma^2`` (may require grad).
        jitter, max_tries: of the robust Cholesky (relative jitter of the first retry).
        cg_tol, max_cg_iter, precond_rank, n_probes: CG tolerance and cap, preconditioner
            rank, SLQ/Hutchinson probes.
        var_block: test points per batched CG solve of the variance (``None``: the type's
            :attr:`default_var_block`).
        generator: source of the probes (default: seeded with 0).
    """

    backend: ClassVar[str]
    """The backend name that maps to this type (:func:`solver_type`)."""
    method: ClassVar[str]
    """``"cholesky"`` (dense factor) or ``"cg"`` (matvecs only)."""
    operator_backend: ClassVar[str] = "dense"
    """The :func:`~amorgp.lazy_kernels.kernel_operator` backend this solver runs on."""
    default_var_block: ClassVar[int] = 16

    def __init__(
        self,
        operator: KernelOperator,
        y: Tensor,
        noise: Tensor,
        *,
        jitter: float = 1e-8,
        max_tries: int = 5,
        cg_tol: float = 1e-8,
        max_cg_iter: int = 1000,
        precond_rank: int = 64,
        n_probes: int = 15,
        var_block: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        check_solver_options(
            **({} if var_block is None else {"var_block": var_block}),
            jitter=jitter,
            max_tries=max_tries,
            cg_tol=cg_tol,
            max_cg_iter=max_cg_iter,
            precond_rank=precond_rank,
            n_probes=n_probes,
        )
        self.operator, self.y, self.noise = operator, y, noise
        self.X = operator.X1
        self.jitter, self.max_tries = jitter, max_tries
        self.cg_tol, self.max_cg_iter = cg_tol, max_cg_iter
        self.precond_rank, self.n_probes = precond_rank, n_probes
        self.var_block = self.default_var_block if var_block is None else var_block
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.factorizations = 0
        """Factorisations of ``A`` so far (Cholesky or preconditioner): at most one."""
        self.last_cg_iterations = 0
        """CG iterations of the last solve (0 for Cholesky)."""
        self._jitter: Tensor | float = 0.0
        self._alpha: Tensor | None = None

    @property
    def cholesky_jitter(self) -> float:
        """Absolute jitter the Cholesky needed (0 when ``A`` factored as given, and for
        the CG solvers)."""
        return float(self._jitter)

    def records_grad(self) -> bool:
        """Whether the log marginal likelihood records a graph now."""
        return torch.is_grad_enabled() and (
            self.operator.requires_grad or self.noise.requires_grad or self.y.requires_grad
        )

    @property
    def factored(self) -> bool:
        """Whether a dense Cholesky factor of ``A`` exists (a prediction then costs no
        factorisation); always ``False`` for the CG solvers."""
        return False

    @abstractmethod
    def factor(self) -> None:
        """Build the factor (Cholesky, or the CG preconditioner) if not built yet."""

    @abstractmethod
    def solve(self, B: Tensor) -> Tensor:
        """``A^{-1} B`` for ``B (n, k)`` (no autograd)."""

    def alpha(self) -> Tensor:
        """``alpha = A^{-1} y``, ``(n,)`` (computed once)."""
        if self._alpha is None:
            self._alpha = self.solve(self.y.detach()[:, None])[:, 0]
        return self._alpha

    @abstractmethod
    def logdet(self) -> Tensor:
        """``log det A`` (0-d, no autograd; the CG solvers' is a stochastic estimate)."""

    @abstractmethod
    def log_marginal_likelihood(self) -> Tensor:
        """``log p(y)`` (0-d), differentiable w.r.t. the kernel parameters and the noise
        when they require grad."""

    @abstractmethod
    def quad_factors(self, Ks: Tensor) -> tuple[Tensor, Tensor]:
        """``(left, right)``, both ``(n, m)``, with ``K_*^T A^{-1} K_* = left^T right`` for
        ``Ks = K(X, X*) (n, m)``: the pieces of the predictive (co)variance."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in self._cache:
            state[key] = None
        state["factorizations"] = 0
        return state

    _cache: ClassVar[tuple[str, ...]] = ("_alpha",)


class CholeskySolver(Solver):
    """Dense Cholesky of ``A`` (plus jitter where needed): exact solves, log-determinant
    and gradients; ``O(n^3)`` time, ``O(n^2)`` memory."""

    backend = "cholesky"
    method = "cholesky"
    _cache = ("_alpha", "_L")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._L: Tensor | None = None

    @property
    def factored(self) -> bool:
        return self._L is not None

    @property
    def L(self) -> Tensor:
        """The lower factor ``L`` of ``A + eps I`` (built on first use)."""
        return self._cholesky()

    def factor(self) -> None:
        self._cholesky()

    def adopt(self, L: Tensor, alpha: Tensor, jitter: Tensor | float = 0.0) -> None:
        """Take a factor computed elsewhere (``A + jitter I = L L^T``, ``alpha = A^{-1} y``),
        e.g. one element of a batched factorisation: it counts as this solver's one
        factorisation.  Inference tensors are copied to normal ones."""
        with torch.inference_mode(False):
            self._L = L.detach().clone() if L.is_inference() else L.detach()
            self._alpha = alpha.detach().clone() if alpha.is_inference() else alpha.detach()
        self._jitter = jitter.detach() if isinstance(jitter, Tensor) else float(jitter)
        self.factorizations += 1

    def _cholesky(self, K: Tensor | None = None) -> Tensor:
        """``L`` (built once, from ``K`` when given) and ``alpha``.  ``K`` is evaluated by a
        fresh operator and factored in place, so only ``L`` stays in memory."""
        if self._L is None:
            with torch.no_grad():
                A = self.operator.on(self.X).dense() if K is None else K.detach().clone()
                A.diagonal().add_(self.noise.detach())
                res = robust_cholesky(A, jitter=self.jitter, max_tries=self.max_tries)
                del A
                if bool(res.failed):
                    raise DataError(
                        f"K + sigma^2 I ({self.operator!r}, noise {float(self.noise):.3g}) is not "
                        f"positive definite even with jitter (after {self.max_tries} retries)"
                    )
                self._L, self._jitter = res.L, res.jitter
                self._alpha = torch.cholesky_solve(self.y.detach()[:, None], res.L)[:, 0]
            self.factorizations += 1
        return self._L

    def solve(self, B: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cholesky_solve(B, self._cholesky())

    def alpha(self) -> Tensor:
        if self._alpha is None:
            self._cholesky()
        assert self._alpha is not None
        return self._alpha

    def logdet(self) -> Tensor:
        return 2.0 * torch.log(torch.diagonal(self._cholesky())).sum()

    def log_marginal_likelihood(self) -> Tensor:
        n = self.y.shape[0]
        K = self.operator.on(self.X).dense() if self.records_grad() else None
        L = self._cholesky(K)
        alpha = self.alpha()
        if K is None:
            value = -0.5 * (self.y * alpha).sum() - torch.log(torch.diagonal(L)).sum()
        else:
            A = K + self.noise * torch.eye(n, dtype=K.dtype, device=K.device)
            value = _DenseLML.apply(A, self.y, L, alpha)
        return value - 0.5 * n * _LOG_2PI

    def quad_factors(self, Ks: Tensor) -> tuple[Tensor, Tensor]:
        S = torch.linalg.solve_triangular(self._cholesky(), Ks, upper=False)
        return S, S


class CGSolver(Solver):
    """Preconditioned CG on the operator's matvecs with a pivoted-Cholesky preconditioner;
    ``log det A`` by stochastic Lanczos quadrature; ``O(n^2)`` time per iteration with a
    dense operator, ``O(n)`` memory beyond it."""

    backend = "cg"
    method = "cg"
    _cache = ("_alpha", "_precond", "_lml_parts")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._precond: PivotedCholeskyPreconditioner | None = None
        self._lml_parts: tuple[Tensor, Tensor, Tensor, Tensor] | None = None

    def factor(self) -> None:
        self.preconditioner()

    def preconditioner(self) -> PivotedCholeskyPreconditioner:
        """The pivoted-Cholesky preconditioner (built once)."""
        if self._precond is None:
            op = self.operator
            with torch.no_grad():
                diag = op.diag().detach()
                L = pivoted_cholesky(
                    diag,
                    lambda i: op.columns(torch.tensor([i], device=op.device))[:, 0].detach(),
                    self.precond_rank,
                )
                residual = diag - (L * L).sum(1)
            self._precond = PivotedCholeskyPreconditioner(L, self.noise.detach(), residual)
            self.factorizations += 1
        return self._precond

    def _pcg(self, B: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``A^{-1} B`` by batched PCG with the cached preconditioner (and CG coefficients)."""
        precond = self.preconditioner()
        noise = self.noise.detach()

        def matvec(V: Tensor) -> Tensor:
            with torch.no_grad():
                return self.operator.matmul(V) + noise * V

        X, alphas, betas, it = pcg(matvec, B, precond.solve, self.cg_tol, self.max_cg_iter)
        self.last_cg_iterations = it
        return X, alphas, betas

    def solve(self, B: Tensor) -> Tensor:
        return self._pcg(B)[0]

    def _parts(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(log det A, A^{-1} Z, P^{-1} Z, Z)`` of the probes, from one CG run (which also
        solves for ``alpha`` if not done yet)."""
        if self._lml_parts is None:
            precond = self.preconditioner()
            Z = precond.sample(self.n_probes, self.generator)
            solved = self._alpha is not None
            B = Z if solved else torch.cat([self.y.detach()[:, None], Z], 1)
            sol, alphas, betas = self._pcg(B)
            if not solved:
                self._alpha, sol = sol[:, 0], sol[:, 1:]
                alphas, betas = alphas[:, 1:], betas[:, 1:]
            U = precond.solve(Z)  # P^{-1} z
            logdet = precond.logdet() + slq_logdet(alphas, betas, (Z * U).sum(0))
            self._lml_parts = (logdet, sol, U, Z)
        return self._lml_parts

    def logdet(self) -> Tensor:
        return self._parts()[0]

    def log_marginal_likelihood(self) -> Tensor:
        n = self.y.shape[0]
        logdet, W, U, _ = self._parts()
        a = self.alpha()[:, None]
        value = -0.5 * (self.y.detach() * a[:, 0]).sum() - 0.5 * logdet - 0.5 * n * _LOG_2PI
        if not self.records_grad():
            return value
        # surrogate whose gradient is 1/2 a^T dA a - 1/2 mean_i w_i^T dA u_i
        V = torch.cat([a, U], 1)
        AV = self.operator.on(self.X).matmul(V) + self.noise * V
        surrogate = 0.5 * (a * AV[:, :1]).sum() - 0.5 * (W * AV[:, 1:]).sum(0).mean()
        return value.detach() + surrogate - surrogate.detach()

    def quad_factors(self, Ks: Tensor) -> tuple[Tensor, Tensor]:
        blocks = [self.solve(b) for b in Ks.split(self.var_block, dim=1)]
        return Ks, torch.cat(blocks, 1)


class LazyCGSolver(CGSolver):
    """:class:`CGSolver` on a lazy operator (``K`` never formed): a matvec costs one
    evaluation of ``K`` whatever the number of right-hand sides, so the variance of a whole
    chunk of test points is one batched CG solve (faster than blocks of right-hand sides:
    ``docs/benchmarks/gpu.md``)."""

    default_var_block = 2**30


class KeOpsSolver(LazyCGSolver):
    """:class:`LazyCGSolver` on the KeOps operator (``O(n)`` memory; where KeOps fails its
    probe, :class:`BlockSolver` is used instead)."""

    backend = "keops"
    operator_backend = "keops"


class BlockSolver(LazyCGSolver):
    """:class:`LazyCGSolver` on the torch row-block operator (``O(n x block)`` memory, any
    device, no compiler)."""

    backend = "block"
    operator_backend = "block"


SOLVERS: dict[str, type[Solver]] = {
    s.backend: s for s in (CholeskySolver, CGSolver, KeOpsSolver, BlockSolver)
}
"""The solver type of each backend name."""


def is_solver_type(value: object) -> TypeGuard[type[Solver]]:
    """Whether ``value`` is a concrete :class:`Solver` subclass."""
    return isinstance(value, type) and issubclass(value, Solver) and not inspect.isabstract(value)


def solver_type(
    solver: str | type[Solver], allowed: tuple[str, ...] | None = None, what: str = "solver"
) -> type[Solver]:
    """The solver type of a backend name (``"cholesky"``, ``"cg"``, ``"keops"``,
    ``"block"``) or a :class:`Solver` subclass, returned as is.

    Args:
        allowed: the names accepted here (default: all of :data:`SOLVERS`).
        what: the option's name in the error message (``"method"``, ``"backend"``).

    Raises:
        OptionError: an unknown name or something that is not a :class:`Solver` type.
    """
    if is_solver_type(solver):
        return solver
    names = tuple(SOLVERS) if allowed is None else allowed
    if isinstance(solver, str) and solver in names:
        return SOLVERS[solver]
    raise OptionError(
        f"unknown {what} {solver!r}; use {', '.join(repr(n) for n in names)} or a Solver type"
    )
