"""The exact GP posterior: one factor of ``A = K + sigma^2 I``, many queries.

Model ``y = f(X) + eps``, ``f ~ GP(0, k)``, ``eps ~ N(0, sigma^2 I)``. A :class:`Posterior`
factors ``A`` once, on first use, and serves from that factor

* ``log p(y) = -1/2 y^T A^{-1} y - 1/2 log det A - n/2 log 2 pi``;
* the latent predictive ``f* | y ~ N(mu, Sigma)`` at test points ``X*``:
  ``mu = K_*^T alpha`` with ``alpha = A^{-1} y``, ``Sigma = K_** - K_*^T A^{-1} K_*``
  (``K_* = K(X, X*)``): its mean, its diagonal (clamped at 0), the full matrix, and
  samples.

The factorisation belongs to a :class:`~amorgp.lazy_kernels.solvers.Solver`, whose type
is chosen once: :class:`~amorgp.lazy_kernels.solvers.CholeskySolver` (``"cholesky"``,
exact), :class:`~amorgp.lazy_kernels.solvers.CGSolver` (``"cg"``: preconditioned CG and
stochastic Lanczos quadrature on operator matvecs) or a
:class:`~amorgp.lazy_kernels.solvers.LazyCGSolver` (``"keops"``, ``"block"``: CG on an
operator that never forms ``K``).  :meth:`Posterior.from_kernel` picks it (and the
operator) by :func:`~amorgp.lazy_kernels.choose_backend`'s memory rule;
:meth:`Posterior.from_cholesky` adopts a factor computed elsewhere (a batched
factorisation).

Test points are processed in chunks of :attr:`Posterior.chunk_size` points whose
cross-covariance block ``K(X, X*_c)`` and its working memory fit ``memory_budget``; every
chunk reuses the same factor.  With the CG solvers the variance costs no solve per test
point: one batched solve against the preconditioner's low-rank basis, made on first use,
serves every chunk (see :meth:`Posterior._cg_quad`). :attr:`Posterior.factorizations` counts the factorisations
(Cholesky or preconditioner) of ``A``: one for the life of the object.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import Tensor

from amorgp.core.errors import DataError, OptionError
from amorgp.lazy_kernels.backends import Backend, SolverPlan, backend_plan, check_data
from amorgp.lazy_kernels.block import check_memory_budget
from amorgp.lazy_kernels.budgets import CHUNK_BYTES, MEMORY_BUDGET
from amorgp.lazy_kernels.cg import pcg_residual
from amorgp.lazy_kernels.dense_posterior import DensePosterior
from amorgp.lazy_kernels.operators import DenseKernel, KernelOperator
from amorgp.lazy_kernels.solvers import CGSolver, CholeskySolver, Solver, solver_type

__all__ = ["DensePosterior", "Posterior"]

Method = Literal["cholesky", "cg"]


class Posterior:
    """Exact GP posterior of a training operator, targets and noise, holding one factor.

    Args:
        operator: the symmetric training operator ``K(X, X)`` (:class:`KernelOperator`,
            e.g. ``DimWiseKernel(...).operator(X)``); its parameters may require grad.
        y: ``(n,)`` training targets.
        noise: observation-noise variance ``sigma^2 > 0`` (float or 0-d tensor, may
            require grad).
        method: the solver: a :class:`~amorgp.lazy_kernels.solvers.Solver` type, or its
            name ``"cholesky"`` (:class:`~amorgp.lazy_kernels.solvers.CholeskySolver`,
            dense factor) or ``"cg"`` (:class:`~amorgp.lazy_kernels.solvers.CGSolver`,
            preconditioned CG on matvecs).
        memory_budget: bytes one chunk of test points may use (cross-covariance block
            and its evaluation); sets :attr:`chunk_size` unless given.
        chunk_size: test points per chunk.
        jitter, max_tries: of the robust Cholesky (relative jitter of the first retry).
        cg_tol, max_cg_iter, precond_rank, n_probes: CG tolerance and cap, preconditioner
            rank, SLQ/Hutchinson probes.
        var_block: test points per batched CG solve of the variance (default: the
            solver type's, 16 for dense CG, the whole chunk for the lazy solvers).
        generator: source of the probes (default: seeded with 0).

    Raises:
        DataError: on shape mismatches, NaN/Inf, non-positive noise, and (on first use)
            a matrix that is not positive definite even with jitter.
        OptionError: unknown method or a non-symmetric operator.
    """

    solver: Solver
    """The solver that owns the factor of ``A`` (its type chosen once, at construction)."""

    def __init__(
        self,
        operator: KernelOperator,
        y: Tensor,
        noise: float | Tensor,
        *,
        method: Method | type[Solver] = "cholesky",
        memory_budget: float = CHUNK_BYTES,
        chunk_size: int | None = None,
        jitter: float = 1e-8,
        max_tries: int = 5,
        cg_tol: float = 1e-8,
        max_cg_iter: int = 1000,
        precond_rank: int = 64,
        n_probes: int = 15,
        var_block: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(operator, KernelOperator):
            raise OptionError(f"operator must be a KernelOperator, got {type(operator).__name__}")
        if operator.X2 is not operator.X1:
            raise OptionError("the training operator must be symmetric: K(X, X) with X2 is X1")
        kind = solver_type(method, allowed=("cholesky", "cg"), what="method")
        n = operator.shape[0]
        if not isinstance(y, Tensor) or tuple(y.shape) != (n,):
            raise DataError(f"y must have shape ({n},), got {tuple(getattr(y, 'shape', ()))}")
        if n == 0:
            raise DataError("no training points")
        if not bool(torch.isfinite(y).all()):
            raise DataError("y contains NaN or infinite values")
        self.noise = torch.as_tensor(noise, dtype=operator.dtype, device=operator.device)
        nd = self.noise.detach()
        if nd.ndim != 0 or not bool(torch.isfinite(nd)) or not float(nd) > 0:
            raise DataError(f"noise must be a positive finite scalar, got {noise!r}")
        if chunk_size is not None and chunk_size < 1:
            raise OptionError(f"chunk_size must be >= 1, got {chunk_size}")
        self._setup(
            operator,
            y,
            self.noise,
            kind,
            check_memory_budget(memory_budget),
            chunk_size,
            jitter=jitter,
            max_tries=max_tries,
            cg_tol=cg_tol,
            max_cg_iter=max_cg_iter,
            precond_rank=precond_rank,
            n_probes=n_probes,
            var_block=var_block,
            generator=generator,
        )

    def _setup(
        self,
        operator: KernelOperator,
        y: Tensor,
        noise: Tensor,
        kind: type[Solver],
        memory_budget: float,
        chunk_size: int | None,
        **options: Any,
    ) -> None:
        """The state of a posterior from checked arguments (no check, no host read)."""
        self.operator, self.y, self.noise = operator, y.to(operator.dtype), noise
        self.X = operator.X1
        item = torch.finfo(operator.dtype).bits // 8
        per_point = operator.shape[0] * (operator.bytes_per_entry + 2 * item)
        self.chunk_size = chunk_size or max(1, int(memory_budget // per_point))
        self.solver = kind(operator, self.y, noise, **options)
        self._lml: Tensor | None = None
        self._basis: tuple[Tensor, Tensor, Tensor] | None = None

    @classmethod
    def from_kernel(
        cls,
        kernel: DenseKernel | KernelOperator,
        X: Tensor,
        y: Tensor,
        noise: float | Tensor,
        *,
        backend: Backend | type[Solver] | SolverPlan = "auto",
        memory_budget: float = MEMORY_BUDGET,
        chunk_budget: float = CHUNK_BYTES,
        var_block: int | None = None,
        **options: Any,
    ) -> Posterior:
        """The posterior of ``kernel`` on ``(X, y)``, its solver and operator chosen once.

        Args:
            kernel: a dense kernel (:class:`~amorgp.lazy_kernels.DimWiseKernel`, or
                :class:`~amorgp.lazy_kernels.ExpressionKernel` for the dense backends), or
                a symmetric :class:`KernelOperator` ``K(X, X)``.
            X: ``(n, D)`` training inputs; y: ``(n,)`` targets; noise: ``sigma^2 > 0``.
            backend: a :class:`~amorgp.lazy_kernels.SolverPlan` already made (then its
                budgets replace ``memory_budget`` and ``chunk_budget``), or ``"auto"``,
                ``"cholesky"``, ``"cg"``, ``"keops"``, ``"block"``, ``"dense"`` or a
                :class:`~amorgp.lazy_kernels.solvers.Solver` type, planned once by
                :func:`~amorgp.lazy_kernels.plan_solver` (the rules are in
                :mod:`amorgp.lazy_kernels.backends`).
            memory_budget: bytes the dense backends may use (for ``"auto"``); the block
                operator's row blocks may use half of it, and so may the chunks of test
                points of the lazy solvers, so that both together fit.
            chunk_budget: bytes one chunk of test points may use in predictions; with the
                lazy solvers at least half of ``memory_budget`` (each chunk costs one CG
                solve of ``O(n^2)`` matvecs, so fewer, larger chunks are faster).
            var_block: test points per batched CG solve (default: the solver type's).
            **options: ``jitter``, ``max_tries``, ``cg_tol``, ``max_cg_iter``,
                ``precond_rank``, ``n_probes``, ``generator`` (see :class:`Posterior`).

        Raises:
            DataError: on shape mismatches, NaN/Inf, non-positive noise.
            OptionError: unknown backend or a kernel the backend cannot evaluate.
        """
        check_data(X, y)
        if isinstance(backend, SolverPlan):
            budget, chunk = backend.memory_budget, backend.chunk_bytes
        else:
            budget = check_memory_budget(memory_budget)
            chunk = check_memory_budget(chunk_budget, "chunk_budget")
        solver, operator = backend_plan(kernel, X, backend, budget)
        return cls(
            operator,
            y,
            noise,
            method=solver,
            memory_budget=SolverPlan(solver, budget, chunk).prediction_budget,
            var_block=var_block,
            **options,
        )

    @classmethod
    def from_cholesky(
        cls,
        operator: KernelOperator,
        y: Tensor,
        noise: float | Tensor,
        L: Tensor,
        alpha: Tensor,
        *,
        jitter: Tensor | float = 0.0,
        log_marginal_likelihood: Tensor | float | None = None,
        check: bool = True,
        memory_budget: float = CHUNK_BYTES,
        chunk_size: int | None = None,
        **options: Any,
    ) -> Posterior:
        """The posterior whose dense Cholesky factor was computed elsewhere (e.g. one
        element of a batched factorisation): ``A + jitter I = L L^T``,
        ``alpha = A^{-1} y``, and optionally its log marginal likelihood; no second
        factorisation.  ``check=False`` trusts the arguments (a caller that built them,
        like the amortizer's batched path): no validation and no value read back to the
        host, so a GPU runs on asynchronously.  ``options`` as :class:`Posterior`'s."""
        if check:
            post = cls(
                operator,
                y,
                noise,
                method=CholeskySolver,
                memory_budget=memory_budget,
                chunk_size=chunk_size,
                **options,
            )
        else:
            post = cls.__new__(cls)
            noise_t = torch.as_tensor(noise, dtype=operator.dtype, device=operator.device)
            post._setup(operator, y, noise_t, CholeskySolver, memory_budget, chunk_size, **options)
        assert isinstance(post.solver, CholeskySolver)
        post.solver.adopt(L, alpha, jitter)
        if log_marginal_likelihood is not None:
            value = torch.as_tensor(log_marginal_likelihood, dtype=post.y.dtype).detach()
            with torch.inference_mode(False):
                post._lml = value.clone() if value.is_inference() else value
        return post

    # -- the solver's state ---------------------------------------------------------------
    @property
    def method(self) -> str:
        """``"cholesky"`` or ``"cg"``: how the solver works."""
        return self.solver.method

    @property
    def backend(self) -> str:
        """The solver's backend name: ``"cholesky"``, ``"cg"``, ``"keops"`` or ``"block"``."""
        return self.solver.backend

    @property
    def factorizations(self) -> int:
        """Factorisations of ``A`` so far (Cholesky or preconditioner): at most one."""
        return self.solver.factorizations

    @property
    def factored(self) -> bool:
        """Whether the dense Cholesky factor of ``A`` exists (a prediction then costs no
        factorisation)."""
        return self.solver.factored

    @property
    def last_cg_iterations(self) -> int:
        """CG iterations of the last solve (0 for Cholesky)."""
        return self.solver.last_cg_iterations

    @property
    def cholesky_jitter(self) -> float:
        """Absolute jitter the Cholesky needed (0 when ``A`` factored as given)."""
        return self.solver.cholesky_jitter

    @property
    def var_block(self) -> int:
        """Test points per batched CG solve of the variance (settable)."""
        return self.solver.var_block

    @var_block.setter
    def var_block(self, value: int) -> None:
        self.solver.var_block = int(value)

    def alpha(self) -> Tensor:
        """``alpha = A^{-1} y``, ``(n,)`` (computed once)."""
        return self.solver.alpha()

    # -- log marginal likelihood -------------------------------------------------------------
    def log_marginal_likelihood(self) -> Tensor:
        """``log p(y | X, theta, sigma^2)`` (0-d), differentiable w.r.t. kernel params and noise.

        Exact for the Cholesky solver; for the CG solvers the solve is exact to ``cg_tol``
        and the log-determinant (and its gradient) stochastic, estimated once.  Without a
        graph the value is computed once and kept (also through pickling, which drops the
        factor).
        """
        if self.solver.records_grad():
            return self.solver.log_marginal_likelihood()
        if self._lml is None:
            self._lml = self.solver.log_marginal_likelihood().detach()
        return self._lml

    # -- predictions --------------------------------------------------------------------------
    def _check(self, X_star: Tensor) -> Tensor:
        d = self.X.shape[1]
        if not isinstance(X_star, Tensor) or X_star.ndim != 2 or X_star.shape[1] != d:
            raise DataError(
                f"X_test must have shape (m, {d}), got {tuple(getattr(X_star, 'shape', ()))}"
            )
        if not bool(torch.isfinite(X_star).all()):
            raise DataError("X_test contains NaN or infinite values")
        return X_star.to(dtype=self.operator.dtype, device=self.operator.device)

    def _chunks(self, X_star: Tensor) -> Iterator[Tensor]:
        for s in range(0, X_star.shape[0], self.chunk_size):
            yield X_star[s : s + self.chunk_size]

    def predict(self, X_star: Tensor, return_var: bool = True) -> tuple[Tensor, Tensor | None]:
        """Predictive mean ``(m,)`` and, if asked, the latent variance ``(m,)`` (>= 0),
        sharing each chunk's cross-covariance block.

        The mean is ``K(X*, X) alpha`` with the cached ``alpha``: one cross-kernel product
        per chunk (a lazy reduction for the lazy operators when the variance is not asked
        for).  The variance of the CG solvers is :meth:`_cg_quad`: one batched solve made
        once (:meth:`_variance_basis`), then dense products per chunk (a batched solve only
        for columns the basis does not hold), whatever the number of test points."""
        X_star = self._check(X_star)
        means, variances = [], []
        with torch.no_grad():
            if return_var and isinstance(self.solver, CGSolver) and X_star.shape[0]:
                self._variance_basis()  # solves alpha in the same CG run if not done yet
            alpha = self.alpha()
            for Xc in self._chunks(X_star):
                if not return_var:
                    means.append(self.operator.on(Xc, self.X).matmul(alpha))
                    continue
                Ks = self.operator.on(self.X, Xc).dense()  # (n, b)
                means.append(Ks.T @ alpha)
                kss = self.operator.on(Xc).diag()
                if isinstance(self.solver, CGSolver):
                    quad = self._cg_quad(Ks, kss)
                else:
                    left, right = self.solver.quad_factors(Ks)
                    quad = (left * right).sum(0)
                del Ks
                variances.append((kss - quad).clamp_min(0))
        mean = torch.cat(means) if means else X_star.new_zeros(0)
        if not return_var:
            return mean, None
        return mean, torch.cat(variances) if variances else mean.clone()

    # -- the variance of the CG solvers ----------------------------------------------------
    def _variance_basis(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(Q, W, G)`` of the CG solvers' variance, built once: ``Q (n, r)`` an orthonormal
        basis of the range of the preconditioner's low-rank factor (``K ~ L L^T``),
        ``W = A^{-1} Q`` (one batched CG solve with the solver's preconditioner, which
        also solves the solver's ``alpha`` if that is not known yet) and
        ``G ~ Q^T A^{-1} Q`` from the solve and its residual ``R``, ``Q^T W + W^T R``
        (second order in the error of ``W``; symmetrised)."""
        if self._basis is None:
            solver = self.solver
            assert isinstance(solver, CGSolver)
            precond = solver.preconditioner()
            L = precond.L
            Q = torch.linalg.qr(L, mode="reduced").Q if L.shape[1] else L
            noise = self.noise.detach()

            def matvec(V: Tensor) -> Tensor:
                return self.operator.matmul(V) + noise * V

            if Q.shape[1]:
                # alpha not solved yet: one CG run for both (a lazy matvec costs about the
                # same for 1 and for 16 right-hand sides); columns converge independently
                with_alpha = solver._alpha is None
                B = torch.cat([self.y.detach()[:, None], Q], 1) if with_alpha else Q
                W, R, it = pcg_residual(matvec, B, precond.solve, solver.cg_tol, solver.max_cg_iter)
                solver.last_cg_iterations = it
                if with_alpha:
                    solver._alpha, W, R = W[:, 0], W[:, 1:], R[:, 1:]
                G = Q.T @ W + W.T @ R
            else:
                W, G = Q, Q.new_zeros(0, 0)
            self._basis = (Q, W, 0.5 * (G + G.T))
        return self._basis

    def _cg_quad(self, Ks: Tensor, kss: Tensor) -> Tensor:
        """``diag(K_*^T A^{-1} K_*)`` ``(b,)`` of a chunk ``Ks (n, b)`` for the CG solvers.

        Each column splits as ``k = Q c + e`` with ``c = Q^T k`` (:meth:`_variance_basis`),
        so ``k^T A^{-1} k = c^T G c + 2 e^T W c + e^T A^{-1} e`` exactly; the cross-kernel
        columns of a smooth kernel lie almost in the preconditioner's range, so ``e`` is
        small.  The last term is taken from the preconditioner, ``e^T P^{-1} e``, where its
        error is provably below ``cg_tol * k_**``: both ``A`` and ``P`` are ``>= sigma^2 I``
        and ``||A - P|| <= delta`` (the trace of the diagonal the low-rank factor leaves
        out, plus its largest entry), so the error is at most
        ``||e||^2 min(1 / sigma^2, delta / sigma^4)``.  The other columns get it from one
        batched CG solve.  A chunk thus costs dense products and at most one solve.
        ``Ks`` is overwritten (by ``e``)."""
        Q, W, G = self._variance_basis()
        C = Q.T @ Ks  # (r, b)
        E = Ks.addmm_(Q, C, alpha=-1.0)  # in place: a few passes over (n, b) in all
        quad = (C * (G @ C + 2.0 * (W.T @ E))).sum(0)
        precond = self.solver.preconditioner()  # type: ignore[attr-defined]
        tail = precond.quad(E)
        s2 = float(self.noise.detach())
        gap = 1.0 / s2
        if precond.residual is not None:
            res = precond.residual.abs()
            delta = float(res.sum() + res.max()) if res.numel() else 0.0
            gap = min(gap, delta / s2**2)
        exact = torch.linalg.vector_norm(E, dim=0) ** 2 * gap > self.solver.cg_tol * kss.abs()
        if bool(exact.any()):
            left, right = self.solver.quad_factors(E[:, exact])
            tail[exact] = (left * right).sum(0)
        return quad + tail

    def mean(self, X_star: Tensor) -> Tensor:
        """Predictive mean ``K(X*, X) alpha``, ``(m,)``."""
        return self.predict(X_star, return_var=False)[0]

    def variance(self, X_star: Tensor) -> Tensor:
        """Diagonal of the latent predictive covariance, ``(m,)``, clamped at 0 (add
        ``sigma^2`` for ``y``)."""
        var = self.predict(X_star)[1]
        assert var is not None
        return var

    def covariance(self, X_star: Tensor) -> Tensor:
        """Latent predictive covariance ``K_** - K_*^T A^{-1} K_*``, ``(m, m)`` (symmetric;
        memory ``O(n m + m^2)``)."""
        X_star = self._check(X_star)
        with torch.no_grad():
            parts = [
                self.solver.quad_factors(self.operator.on(self.X, Xc).dense())
                for Xc in self._chunks(X_star)
            ]
            left = torch.cat([a for a, _ in parts], 1)
            right = torch.cat([b for _, b in parts], 1)
            del parts
            cov = self.operator.on(X_star).dense() - left.T @ right
        return 0.5 * (cov + cov.T)

    def sample(self, X_star: Tensor, n: int, generator: torch.Generator) -> Tensor:
        """``n`` joint samples of the latent ``f(X*)`` from the predictive, ``(n, m)``.

        ``mu + Q diag(sqrt(max(lambda, 0))) e`` with ``Sigma = Q diag(lambda) Q^T``
        (eigendecomposition: exact for singular covariances, no jitter) and
        ``e ~ N(0, I)`` drawn from ``generator``.
        """
        if not isinstance(n, int) or n < 1:
            raise OptionError(f"n must be a positive integer, got {n!r}")
        X_star = self._check(X_star)
        mean = self.mean(X_star)
        evals, Q = torch.linalg.eigh(self.covariance(X_star))
        root = Q * evals.clamp_min(0).sqrt()
        e = torch.randn(X_star.shape[0], n, generator=generator, dtype=mean.dtype)
        return mean[None, :] + (root @ e.to(mean.device)).T

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_basis"] = None  # O(n r): rebuilt on first use, like the solver's factor
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_basis", None)

    def __repr__(self) -> str:
        kind = type(self.solver).__name__
        return f"Posterior({self.operator!r}, solver={kind}, n={self.y.shape[0]})"

    @classmethod
    def dense(
        cls,
        K: Tensor,
        y: Tensor,
        noise: float | Tensor,
        *,
        point_mask: Tensor | None = None,
        jitter: float = 1e-8,
        max_tries: int = 5,
        jitter_ladder: tuple[float, ...] | None = None,
    ) -> DensePosterior:
        """The exact posterior of a batch of dense kernel matrices ``K (..., n, n)``, each
        factored once (see :class:`DensePosterior`)."""
        return DensePosterior(
            K,
            y,
            noise,
            point_mask=point_mask,
            jitter=jitter,
            max_tries=max_tries,
            jitter_ladder=jitter_ladder,
        )
