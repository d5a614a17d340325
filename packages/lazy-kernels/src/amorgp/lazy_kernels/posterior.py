"""The exact GP posterior: one factor of ``A = K + sigma^2 I``, many queries.

Model ``y = f(X) + eps``, ``f ~ GP(0, k)``, ``eps ~ N(0, sigma^2 I)``. A :class:`Posterior`
factors ``A`` once, on first use, and serves from that factor

* ``log p(y) = -1/2 y^T A^{-1} y - 1/2 log det A - n/2 log 2 pi``;
* the latent predictive ``f* | y ~ N(mu, Sigma)`` at test points ``X*``:
  ``mu = K_*^T alpha`` with ``alpha = A^{-1} y``, ``Sigma = K_** - K_*^T A^{-1} K_*``
  (``K_* = K(X, X*)``): its mean, its diagonal (clamped at 0), the full matrix, and
  samples.

Two methods:

``"cholesky"``
    ``A + eps I = L L^T`` by :func:`amorgp.diff_linalg.robust_cholesky` (``eps = 0``
    unless the factorisation needs jitter) and ``alpha``; the variance is
    ``k_** - ||L^{-1} K_*||^2`` per column.  The log marginal likelihood is
    differentiable w.r.t. the kernel parameters and the noise through the fused
    adjoint ``Abar = 1/2 (alpha alpha^T - A^{-1})`` (``A^{-1}`` from ``L``, never a
    second factorisation).
``"cg"``
    the rank-``r`` pivoted-Cholesky preconditioner (plus the diagonal it leaves out, and the
    noise) and ``alpha`` by batched
    preconditioned CG on operator matvecs (dense or KeOps); ``log det A`` by stochastic
    Lanczos quadrature from the same CG run with ``n_probes`` probes ``z ~ N(0, P)``;
    gradients use ``d log p = 1/2 a^T dA a - 1/2 tr(A^{-1} dA)`` with a Hutchinson
    estimate of the trace (as GPyTorch's BBMM). Variances cost one batched CG solve
    (with the same preconditioner) per ``var_block`` test points.

Test points are processed in chunks of :attr:`Posterior.chunk_size` points whose
cross-covariance block ``K(X, X*_c)`` and its working memory fit ``memory_budget``; every
chunk reuses the same factor. :attr:`Posterior.factorizations` counts the factorisations
(Cholesky or preconditioner) of ``A``: one for the life of the object.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import Tensor

from amorgp.diff_linalg import robust_cholesky
from amorgp.kernel_grammar import DataError, OptionError
from amorgp.lazy_kernels.dense_posterior import DensePosterior
from amorgp.lazy_kernels.operators import KernelOperator
from amorgp.lazy_kernels.solvers import (
    PivotedCholeskyPreconditioner,
    pcg,
    pivoted_cholesky,
    slq_logdet,
)

__all__ = ["DensePosterior", "Posterior"]

Method = Literal["cholesky", "cg"]
_LOG_2PI = math.log(2.0 * math.pi)


class _CachedLML(torch.autograd.Function):
    """``-1/2 y^T alpha - sum log diag L`` from a given factor; backward
    ``Abar = 1/2 (alpha alpha^T - A^{-1}) g`` and ``ybar = -alpha g``."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, y: Tensor, L: Tensor, alpha: Tensor) -> Tensor:
        ctx.save_for_backward(L, alpha)
        return -0.5 * (y * alpha).sum() - torch.log(torch.diagonal(L)).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: Tensor) -> Any:
        L, alpha = ctx.saved_tensors
        gA = gy = None
        if ctx.needs_input_grad[0]:
            gA = (0.5 * g) * (alpha[:, None] * alpha[None, :] - torch.cholesky_inverse(L))
        if ctx.needs_input_grad[1]:
            gy = -g * alpha
        return gA, gy, None, None


class Posterior:
    """Exact GP posterior of a training operator, targets and noise, holding one factor.

    Args:
        operator: the symmetric training operator ``K(X, X)`` (:class:`KernelOperator`,
            e.g. ``DimWiseKernel(...).operator(X)``); its parameters may require grad.
        y: ``(n,)`` training targets.
        noise: observation-noise variance ``sigma^2 > 0`` (float or 0-d tensor, may
            require grad).
        method: ``"cholesky"`` (dense factor) or ``"cg"`` (preconditioned CG on matvecs).
        memory_budget: bytes one chunk of test points may use (cross-covariance block
            and its evaluation); sets :attr:`chunk_size` unless given.
        chunk_size: test points per chunk.
        jitter, max_tries: of the robust Cholesky (relative jitter of the first retry).
        cg_tol, max_cg_iter, precond_rank, n_probes: CG tolerance and cap, preconditioner
            rank, SLQ/Hutchinson probes.
        var_block: test points per batched CG solve of the variance.
        generator: source of the probes (default: seeded with 0).

    Raises:
        DataError: on shape mismatches, NaN/Inf, non-positive noise, and (on first use)
            a matrix that is not positive definite even with jitter.
        OptionError: unknown method or a non-symmetric operator.
    """

    def __init__(
        self,
        operator: KernelOperator,
        y: Tensor,
        noise: float | Tensor,
        *,
        method: Method = "cholesky",
        memory_budget: float = 256 * 2**20,
        chunk_size: int | None = None,
        jitter: float = 1e-8,
        max_tries: int = 5,
        cg_tol: float = 1e-8,
        max_cg_iter: int = 1000,
        precond_rank: int = 64,
        n_probes: int = 15,
        var_block: int = 16,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(operator, KernelOperator):
            raise OptionError(f"operator must be a KernelOperator, got {type(operator).__name__}")
        if operator.X2 is not operator.X1:
            raise OptionError("the training operator must be symmetric: K(X, X) with X2 is X1")
        if method not in ("cholesky", "cg"):
            raise OptionError(f"unknown method {method!r}; use 'cholesky' or 'cg'")
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
        self.operator, self.y, self.method = operator, y.to(operator.dtype), method
        self.X = operator.X1
        item = torch.finfo(operator.dtype).bits // 8
        per_point = n * (operator.bytes_per_entry + 2 * item)
        self.chunk_size = chunk_size or max(1, int(memory_budget // per_point))
        self.jitter, self.max_tries = jitter, max_tries
        self.cg_tol, self.max_cg_iter = cg_tol, max_cg_iter
        self.precond_rank, self.n_probes, self.var_block = precond_rank, n_probes, var_block
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.factorizations = 0
        """Factorisations of ``A`` so far (Cholesky or preconditioner): at most one."""
        self.last_cg_iterations = 0
        self.cholesky_jitter = 0.0
        """Absolute jitter the Cholesky needed (0 when ``A`` factored as given)."""
        self._L: Tensor | None = None
        self._precond: PivotedCholeskyPreconditioner | None = None
        self._alpha: Tensor | None = None
        self._cg_lml: tuple[Tensor, Tensor, Tensor, Tensor] | None = None

    # -- the factor ------------------------------------------------------------------------
    def _records_grad(self) -> bool:
        return torch.is_grad_enabled() and (
            self.operator.requires_grad or self.noise.requires_grad or self.y.requires_grad
        )

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
                self._L, self.cholesky_jitter = res.L, float(res.jitter)
                self._alpha = torch.cholesky_solve(self.y.detach()[:, None], res.L)[:, 0]
            self.factorizations += 1
        return self._L

    def _preconditioner(self) -> PivotedCholeskyPreconditioner:
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

    def _cg_solve(self, B: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``A^{-1} B`` by batched PCG with the cached preconditioner (and CG coefficients)."""
        precond = self._preconditioner()
        noise = self.noise.detach()

        def matvec(V: Tensor) -> Tensor:
            with torch.no_grad():
                return self.operator.matmul(V) + noise * V

        X, alphas, betas, it = pcg(matvec, B, precond.solve, self.cg_tol, self.max_cg_iter)
        self.last_cg_iterations = it
        return X, alphas, betas

    def alpha(self) -> Tensor:
        """``alpha = A^{-1} y``, ``(n,)`` (computed once)."""
        if self._alpha is None:
            if self.method == "cholesky":
                self._cholesky()
            else:
                self._alpha = self._cg_solve(self.y.detach()[:, None])[0][:, 0]
        assert self._alpha is not None
        return self._alpha

    # -- log marginal likelihood -------------------------------------------------------------
    def log_marginal_likelihood(self) -> Tensor:
        """``log p(y | X, theta, sigma^2)`` (0-d), differentiable w.r.t. kernel params and noise.

        Exact for ``"cholesky"``; for ``"cg"`` the solve is exact to ``cg_tol`` and the
        log-determinant (and its gradient) stochastic, estimated once.
        """
        n = self.y.shape[0]
        if self.method == "cg":
            return self._cg_log_marginal_likelihood()
        K = self.operator.on(self.X).dense() if self._records_grad() else None
        L = self._cholesky(K)
        alpha = self.alpha()
        if K is None:
            value = -0.5 * (self.y * alpha).sum() - torch.log(torch.diagonal(L)).sum()
        else:
            A = K + self.noise * torch.eye(n, dtype=K.dtype, device=K.device)
            value = _CachedLML.apply(A, self.y, L, alpha)
        return value - 0.5 * n * _LOG_2PI

    def _cg_log_marginal_likelihood(self) -> Tensor:
        n = self.y.shape[0]
        if self._cg_lml is None:
            precond = self._preconditioner()
            Z = precond.sample(self.n_probes, self.generator)
            solved = self._alpha is not None
            B = Z if solved else torch.cat([self.y.detach()[:, None], Z], 1)
            sol, alphas, betas = self._cg_solve(B)
            if not solved:
                self._alpha, sol = sol[:, 0], sol[:, 1:]
                alphas, betas = alphas[:, 1:], betas[:, 1:]
            U = precond.solve(Z)  # P^{-1} z
            logdet = precond.logdet() + slq_logdet(alphas, betas, (Z * U).sum(0))
            self._cg_lml = (logdet, sol, U, Z)
        logdet, W, U, _ = self._cg_lml
        a = self.alpha()[:, None]
        value = -0.5 * (self.y.detach() * a[:, 0]).sum() - 0.5 * logdet - 0.5 * n * _LOG_2PI
        if not self._records_grad():
            return value
        # surrogate whose gradient is 1/2 a^T dA a - 1/2 mean_i w_i^T dA u_i
        V = torch.cat([a, U], 1)
        AV = self.operator.on(self.X).matmul(V) + self.noise * V
        surrogate = 0.5 * (a * AV[:, :1]).sum() - 0.5 * (W * AV[:, 1:]).sum(0).mean()
        return value.detach() + surrogate - surrogate.detach()

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

    def _solve_cross(self, Ks: Tensor) -> Tensor:
        """``L^{-1} K_*`` (Cholesky; ``||.||^2`` per column is ``K_*^T A^{-1} K_*``) or
        ``A^{-1} K_*`` (CG, in blocks of ``var_block`` columns)."""
        if self.method == "cholesky":
            return torch.linalg.solve_triangular(self._cholesky(), Ks, upper=False)
        blocks = [self._cg_solve(b)[0] for b in Ks.split(self.var_block, dim=1)]
        return torch.cat(blocks, 1)

    def _quad_diag(self, Ks: Tensor, S: Tensor) -> Tensor:
        return (S * S).sum(0) if self.method == "cholesky" else (Ks * S).sum(0)

    def predict(self, X_star: Tensor, return_var: bool = True) -> tuple[Tensor, Tensor | None]:
        """Predictive mean ``(m,)`` and, if asked, the latent variance ``(m,)`` (>= 0),
        sharing each chunk's cross-covariance block."""
        X_star = self._check(X_star)
        means, variances = [], []
        with torch.no_grad():
            alpha = self.alpha()
            for Xc in self._chunks(X_star):
                if not return_var:
                    means.append(self.operator.on(Xc, self.X).matmul(alpha))
                    continue
                Ks = self.operator.on(self.X, Xc).dense()  # (n, b)
                means.append(Ks.T @ alpha)
                kss = self.operator.on(Xc).diag()
                variances.append((kss - self._quad_diag(Ks, self._solve_cross(Ks))).clamp_min(0))
        mean = torch.cat(means) if means else X_star.new_zeros(0)
        if not return_var:
            return mean, None
        return mean, torch.cat(variances) if variances else mean.clone()

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
                (Ks, self._solve_cross(Ks))
                for Ks in (self.operator.on(self.X, Xc).dense() for Xc in self._chunks(X_star))
            ]
            S = torch.cat([s for _, s in parts], 1)
            left = S if self.method == "cholesky" else torch.cat([k for k, _ in parts], 1)
            del parts
            cov = self.operator.on(X_star).dense() - left.T @ S
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

    def __repr__(self) -> str:
        return f"Posterior({self.operator!r}, method={self.method!r}, n={self.y.shape[0]})"

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
