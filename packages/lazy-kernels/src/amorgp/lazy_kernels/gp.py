"""Exact GP regression for one kernel: dense Cholesky, or CG + SLQ on kernel matvecs.

Model: ``y = f(X) + eps``, ``f ~ GP(0, k)``, ``eps ~ N(0, sigma^2 I)``, ``A = K + sigma^2 I``.

* log marginal likelihood ``log p(y) = -1/2 y^T A^{-1} y - 1/2 log det A - n/2 log 2 pi``
  and its gradients w.r.t. the kernel parameters and the noise;
* posterior predictive ``mean = K_*^T A^{-1} y`` and the diagonal of
  ``var = k_** - K_*^T A^{-1} K_*`` (latent ``f``; add ``sigma^2`` for ``y``), clamped >= 0.

Backends:

``"cholesky"``
    dense ``K`` and one Cholesky (:func:`amorgp.diff_linalg.robust_cholesky`,
    :func:`amorgp.diff_linalg.gp_log_marginal_likelihood`); ``O(n^3)`` time, ``O(n^2)`` memory.
``"cg"``
    dense ``K`` kept in memory and used only through matvecs.
``"keops"``
    ``K`` never formed: matvecs by :class:`~amorgp.lazy_kernels.keops.KeOpsKernel`,
    ``O(n)`` memory.

The matvec backends solve with batched preconditioned conjugate gradients (the
preconditioner is ``P = L_r L_r^T + sigma^2 I`` from a rank-``r`` pivoted Cholesky
of ``K``, applied by Woodbury) and estimate ``log det A`` by stochastic Lanczos
quadrature from the same CG run: with probes ``z_i ~ N(0, P)``,

.. math::

    \\log\\det A = \\log\\det P + \\log\\det(P^{-1/2} A P^{-1/2})
    \\approx \\log\\det P + \\frac{1}{t} \\sum_i (z_i^T P^{-1} z_i)\\, e_1^T \\log(T_i)\\, e_1,

where ``T_i`` is the Lanczos tridiagonal matrix recovered from CG's coefficients.
Gradients use ``d log p = 1/2 a^T dA a - 1/2 tr(A^{-1} dA)`` with
``tr(A^{-1} dA) ~ 1/t sum_i (A^{-1} z_i)^T dA (P^{-1} z_i)`` (as in GPyTorch's BBMM),
implemented by differentiating a surrogate through the kernel matvec.

``backend="auto"`` picks (see :func:`choose_backend`): Cholesky up to
:data:`CHOLESKY_MAX_N` points when the dense evaluator's working memory (which grows with
the number of addends) and the Cholesky workspace fit the memory budget, dense CG while the
evaluator's working memory fits, KeOps CG beyond.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from amorgp.diff_linalg import gp_log_marginal_likelihood, robust_cholesky
from amorgp.lazy_kernels.structure import DimWiseKernel

__all__ = [
    "CHOLESKY_MAX_N",
    "ExactGP",
    "PivotedCholeskyPreconditioner",
    "EVALUATOR_MATRICES_PER_TERM",
    "choose_backend",
    "pcg",
    "pivoted_cholesky",
    "slq_logdet",
]

Backend = Literal["auto", "cholesky", "cg", "keops"]

CHOLESKY_MAX_N = 6000
"""Largest n for which ``auto`` uses dense Cholesky (float64, CPU).  In the benchmark
(docs/benchmarks/lazy-kernels.md, n <= 2000) Cholesky is still faster per loss+gradient
than dense CG and exact, so the limit sits where its O(n^3) cost (a few seconds at
n = 6000 on 2 cores) starts to exceed tens of O(n^2) CG iterations; it is a default, not a
measured crossover beyond n = 2000."""


EVALUATOR_MATRICES_PER_TERM = 6
"""Peak working memory of the dense batched evaluator per active addend, in ``n x n``
matrices (forward, float64, CPU): measured 4.5-6.4 across SE and ``SE*LIN + PER`` at
d = 4, 8 and n = 1000, 3000 (docs/benchmarks/lazy-kernels.md, section 1b)."""


def choose_backend(
    n: int,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    memory_budget: float = 4 * 2**30,
    keops: bool | None = None,
    n_terms: int = 1,
) -> str:
    """The backend ``"auto"`` uses for ``n`` training points.

    The dense backends build ``K`` with the batched evaluator, whose peak memory grows
    with the number of addends: about ``EVALUATOR_MATRICES_PER_TERM * n_terms`` matrices
    of ``n x n`` (measured in docs/benchmarks/lazy-kernels.md, section 1b), plus ``K``
    itself, plus two more for Cholesky.

    Rule: ``"cholesky"`` if ``n <= CHOLESKY_MAX_N`` (float64; ``CHOLESKY_MAX_N // 2``
    for float32, whose Cholesky fails earlier) and the Cholesky peak fits
    ``memory_budget`` bytes; else ``"cg"`` if the evaluator peak fits; else ``"keops"``.
    On CUDA the dense limits double (fast dense kernels).

    Args:
        n_terms: active addends of the kernel(s) evaluated at once (summed over input
            dimensions and over the kernels of one batch).

    Raises:
        ValueError: if only KeOps would fit and pykeops is unavailable.
    """
    from amorgp.lazy_kernels.keops import keops_available

    if n_terms < 1:
        raise ValueError(f"n_terms must be >= 1, got {n_terms}")
    item = torch.finfo(dtype).bits // 8
    dense = item * n * n
    evaluator = (EVALUATOR_MATRICES_PER_TERM * n_terms + 1) * dense
    limit = CHOLESKY_MAX_N if dtype == torch.float64 else CHOLESKY_MAX_N // 2
    if torch.device(device).type == "cuda":
        limit *= 2
    if n <= limit and evaluator + 2 * dense <= memory_budget:
        return "cholesky"
    if evaluator <= memory_budget:
        return "cg"
    if keops is None:
        keops = keops_available()
    if not keops:
        raise ValueError(
            f"n = {n} with {n_terms} addend(s) needs {evaluator / 2**30:.2f} GiB to evaluate the "
            f"dense kernel matrix, above the memory budget of {memory_budget / 2**30:.2f} GiB, "
            "and pykeops is not installed"
        )
    return "keops"


def pivoted_cholesky(
    diag: Tensor, column: Callable[[int], Tensor], rank: int, tol: float = 1e-8
) -> Tensor:
    """Rank-``r`` partial pivoted Cholesky ``K ~ L L^T`` (Harbrecht et al. 2012).

    Args:
        diag: ``(n,)`` diagonal of ``K``.
        column: ``i -> K[:, i]`` ``(n,)``.
        rank: maximal rank ``r``.
        tol: stop when the trace of the remainder falls below ``tol * trace(K)``.

    Returns:
        ``L (n, r')`` with ``r' <= rank``.
    """
    n = diag.shape[0]
    d = diag.clone()
    L = torch.zeros(n, min(rank, n), dtype=diag.dtype, device=diag.device)
    total = float(d.sum())
    m = 0
    for m in range(min(rank, n)):
        i = int(torch.argmax(d))
        if float(d[i]) <= 0 or float(d.clamp_min(0).sum()) <= tol * total:
            break
        col = column(i) - L[:, :m] @ L[i, :m]
        L[:, m] = col / math.sqrt(float(d[i]))
        d = d - L[:, m] ** 2
        d[i] = 0.0
    else:
        m = min(rank, n)
    return L[:, :m]


@dataclass
class PivotedCholeskyPreconditioner:
    """``P = L L^T + sigma^2 I`` with ``L (n, r)``; solves and log-determinant by Woodbury."""

    L: Tensor
    noise: Tensor

    def __post_init__(self) -> None:
        r = self.L.shape[1]
        inner = torch.eye(r, dtype=self.L.dtype, device=self.L.device) * self.noise
        inner = inner + self.L.T @ self.L
        self._chol = torch.linalg.cholesky(inner)

    def solve(self, V: Tensor) -> Tensor:
        """``P^{-1} V`` for ``V (n, k)``: ``(V - L (sigma^2 I + L^T L)^{-1} L^T V) / sigma^2``."""
        if self.L.shape[1] == 0:
            return V / self.noise
        w = torch.cholesky_solve(self.L.T @ V, self._chol)
        return (V - self.L @ w) / self.noise

    def logdet(self) -> Tensor:
        """``log det P = (n - r) log sigma^2 + log det(sigma^2 I_r + L^T L)``."""
        n, r = self.L.shape
        return (n - r) * torch.log(self.noise) + 2.0 * torch.log(torch.diagonal(self._chol)).sum()

    def sample(self, t: int, generator: torch.Generator) -> Tensor:
        """``t`` probes ``z ~ N(0, P)``, ``(n, t)``: ``L e1 + sigma e2``."""
        n, r = self.L.shape
        e1 = torch.randn(r, t, generator=generator, dtype=self.L.dtype).to(self.L.device)
        e2 = torch.randn(n, t, generator=generator, dtype=self.L.dtype).to(self.L.device)
        return self.L @ e1 + torch.sqrt(self.noise) * e2


def pcg(
    matvec: Callable[[Tensor], Tensor],
    B: Tensor,
    precond: Callable[[Tensor], Tensor],
    tol: float = 1e-8,
    max_iter: int = 1000,
) -> tuple[Tensor, Tensor, Tensor, int]:
    """Batched preconditioned conjugate gradients for ``A X = B`` (``A`` s.p.d.).

    All columns iterate together; converged columns are frozen.

    Args:
        matvec: ``V (n, k) -> A V``.
        B: right-hand sides ``(n, k)``.
        precond: ``V -> P^{-1} V``.
        tol: stop when every ``||r_j|| <= tol ||b_j||``.
        max_iter: iteration cap.

    Returns:
        ``(X (n, k), alphas (it, k), betas (it, k), it)``: CG step sizes and
        direction coefficients of every iteration (0 once a column has converged),
        from which :func:`slq_logdet` rebuilds the Lanczos tridiagonal matrices.
    """
    X = torch.zeros_like(B)
    R = B.clone()
    Z = precond(R)
    Pd = Z.clone()
    rz = (R * Z).sum(0)
    bnorm = B.norm(dim=0).clamp_min(torch.finfo(B.dtype).tiny)
    active = torch.ones(B.shape[1], dtype=torch.bool, device=B.device)
    alphas: list[Tensor] = []
    betas: list[Tensor] = []
    for _ in range(max_iter):
        AP = matvec(Pd)
        pap = (Pd * AP).sum(0)
        alpha = torch.where(active, rz / pap, torch.zeros_like(rz))
        X = X + alpha * Pd
        R = R - alpha * AP
        Z = precond(R)
        rz_new = (R * Z).sum(0)
        beta = torch.where(active, rz_new / rz, torch.zeros_like(rz))
        alphas.append(alpha)
        betas.append(beta)
        Pd = Z + beta * Pd
        rz = torch.where(active, rz_new, rz)
        active = active & (R.norm(dim=0) > tol * bnorm)
        if not bool(active.any()):
            break
    return X, torch.stack(alphas), torch.stack(betas), len(alphas)


def slq_logdet(alphas: Tensor, betas: Tensor, weights: Tensor) -> Tensor:
    """Stochastic Lanczos quadrature estimate of ``log det`` of the preconditioned matrix.

    Rebuilds, per probe, the Lanczos tridiagonal ``T`` from CG coefficients
    (``T_jj = 1/a_j + b_{j-1}/a_{j-1}``, ``T_{j,j+1} = sqrt(b_j)/a_j``) and returns
    ``mean_i weights_i e_1^T log(T_i) e_1``.

    Args:
        alphas: ``(it, t)`` CG step sizes (0 after convergence).
        betas: ``(it, t)`` CG direction coefficients.
        weights: ``(t,)`` squared probe norms in the preconditioned metric ``z^T P^{-1} z``.
    """
    out = []
    for j in range(alphas.shape[1]):
        a = alphas[:, j]
        m = int((a != 0).sum())
        a, b = a[:m], betas[:m, j]
        diag = 1.0 / a
        diag[1:] = diag[1:] + b[:-1] / a[:-1]
        off = torch.sqrt(b[:-1].clamp_min(0)) / a[:-1]
        T = torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1)
        evals, evecs = torch.linalg.eigh(T)
        out.append(weights[j] * (evecs[0] ** 2 * torch.log(evals.clamp_min(1e-300))).sum())
    return torch.stack(out).mean()


class ExactGP:
    """Exact GP regression with a fixed kernel and noise.

    Args:
        kernel: the kernel (:class:`~amorgp.lazy_kernels.DimWiseKernel`); its
            ``params`` may require grad.
        noise: observation-noise variance ``sigma^2 > 0`` (float or 0-d tensor, may
            require grad).
        X: ``(n, D)`` training inputs.
        y: ``(n,)`` training targets.
        backend: ``"auto"``, ``"cholesky"``, ``"cg"`` or ``"keops"``.
        memory_budget: bytes the dense backends may use (for ``"auto"``).
        cg_tol: relative residual tolerance of CG.
        max_cg_iter: CG iteration cap.
        precond_rank: rank of the pivoted-Cholesky preconditioner.
        n_probes: SLQ / Hutchinson probes (the KeOps backend evaluates ``1 + n_probes``
            right-hand sides per matvec).
        generator: source of the probes (a seeded ``torch.Generator``).

    Raises:
        ValueError: on shape mismatches, NaN/Inf, non-positive noise, unknown backend.
    """

    def __init__(
        self,
        kernel: DimWiseKernel,
        noise: float | Tensor,
        X: Tensor,
        y: Tensor,
        *,
        backend: Backend = "auto",
        memory_budget: float = 4 * 2**30,
        cg_tol: float = 1e-8,
        max_cg_iter: int = 1000,
        precond_rank: int = 64,
        n_probes: int = 15,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(kernel, DimWiseKernel):
            raise ValueError(f"kernel must be a DimWiseKernel, got {type(kernel).__name__}")
        if not isinstance(X, Tensor) or X.ndim != 2:
            raise ValueError(f"X must be an (n, D) tensor, got {tuple(getattr(X, 'shape', ()))}")
        if X.shape[1] != kernel.structure.n_dims:
            raise ValueError(
                f"X has {X.shape[1]} dimensions but the kernel {kernel.structure} has "
                f"{kernel.structure.n_dims}"
            )
        if not isinstance(y, Tensor) or y.shape != (X.shape[0],):
            raise ValueError(
                f"y must have shape ({X.shape[0]},), got {tuple(getattr(y, 'shape', ()))}"
            )
        if X.shape[0] == 0:
            raise ValueError("no training points")
        for name, t in (("X", X), ("y", y)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} contains NaN or infinite values")
        self.noise = torch.as_tensor(noise, dtype=X.dtype, device=X.device)
        nd = self.noise.detach()
        if nd.ndim != 0 or not bool(torch.isfinite(nd)) or not float(nd) > 0:
            raise ValueError(f"noise must be a positive finite scalar, got {noise!r}")
        if backend not in ("auto", "cholesky", "cg", "keops"):
            raise ValueError(f"unknown backend {backend!r}; use auto, cholesky, cg or keops")
        self.kernel, self.X, self.y = kernel, X, y
        self.backend = (
            choose_backend(
                X.shape[0],
                X.dtype,
                X.device,
                memory_budget,
                n_terms=sum(len(addends) for addends in kernel.structure.dims),
            )
            if backend == "auto"
            else backend
        )
        self.cg_tol, self.max_cg_iter = cg_tol, max_cg_iter
        self.precond_rank, self.n_probes = precond_rank, n_probes
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.last_cg_iterations = 0

    # -- operators -------------------------------------------------------------------------
    def _kernel_matvec(self, X1: Tensor, X2: Tensor) -> Callable[[Tensor], Tensor]:
        if self.backend == "keops":
            from amorgp.lazy_kernels.keops import KeOpsKernel

            kk = KeOpsKernel(self.kernel.structure, self.kernel.params.to(X1.dtype))
            return lambda V: kk.matmul(X1, X2, V)
        K = self.kernel(X1, X2)
        return lambda V: K @ V

    def _dense_train(self) -> Tensor:
        if not hasattr(self, "_K"):
            with torch.enable_grad():
                self._K = self.kernel(self.X)
        return self._K

    def _train_matvec(self) -> Callable[[Tensor], Tensor]:
        if self.backend == "cg":
            K = self._dense_train()
            return lambda V: K @ V
        return self._kernel_matvec(self.X, self.X)

    def _preconditioner(self) -> PivotedCholeskyPreconditioner:
        with torch.no_grad():
            diag = self.kernel.diag(self.X).detach()
            if self.backend == "cg":
                K = self._dense_train().detach()

                def column(i: int) -> Tensor:
                    return K[:, i]
            else:

                def column(i: int) -> Tensor:
                    return self.kernel(self.X, self.X[i : i + 1])[:, 0].detach()

            L = pivoted_cholesky(diag, column, self.precond_rank)
        return PivotedCholeskyPreconditioner(L, self.noise.detach())

    def _solve(
        self, B: Tensor, precond: PivotedCholeskyPreconditioner
    ) -> tuple[Tensor, Tensor, Tensor]:
        Kmv = self._train_matvec()
        noise = self.noise.detach()

        def A(V: Tensor) -> Tensor:
            with torch.no_grad():
                return Kmv(V) + noise * V

        X, alphas, betas, it = pcg(A, B, precond.solve, self.cg_tol, self.max_cg_iter)
        self.last_cg_iterations = it
        return X, alphas, betas

    # -- public API --------------------------------------------------------------------------
    def log_marginal_likelihood(self) -> Tensor:
        """``log p(y | X, theta, sigma^2)`` (0-d), differentiable w.r.t. kernel params and noise.

        Exact (one Cholesky) for ``"cholesky"``; for the CG backends the solve is exact to
        ``cg_tol`` and the log-determinant and its gradient are stochastic (SLQ/Hutchinson
        with ``n_probes`` probes, unbiased gradient of the quadratic term).
        """
        n = self.X.shape[0]
        if self.backend == "cholesky":
            K = self.kernel(self.X)
            out = gp_log_marginal_likelihood(K, self.y, self.noise)
            assert isinstance(out, Tensor)
            return out
        precond = self._preconditioner()
        Z = precond.sample(self.n_probes, self.generator)
        B = torch.cat([self.y.detach()[:, None], Z], 1)
        sol, alphas, betas = self._solve(B, precond)
        a, W = sol[:, :1], sol[:, 1:]
        U = precond.solve(Z)  # P^{-1} z
        weights = (Z * U).sum(0)
        logdet = precond.logdet() + slq_logdet(alphas[:, 1:], betas[:, 1:], weights)
        quad = (self.y.detach() * a[:, 0]).sum()
        value = -0.5 * quad - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi)
        # surrogate whose gradient is 1/2 a^T dA a - 1/2 mean_i w_i^T dA u_i
        Kmv = self._kernel_matvec(self.X, self.X) if self.backend == "keops" else None
        if Kmv is None:
            K = self._dense_train()
            KV = K @ torch.cat([a, U], 1)
        else:
            KV = Kmv(torch.cat([a, U], 1))
        AV = KV + self.noise * torch.cat([a, U], 1)
        surrogate = 0.5 * (a * AV[:, :1]).sum() - 0.5 * (W * AV[:, 1:]).sum(0).mean()
        return value.detach() + surrogate - surrogate.detach()

    def predict(
        self, X_test: Tensor, return_var: bool = True, var_block: int = 16
    ) -> tuple[Tensor, Tensor | None]:
        """Posterior predictive mean and (latent, diagonal, clamped >= 0) variance.

        Args:
            X_test: ``(m, D)`` test inputs.
            return_var: also compute the variance; with a CG backend this costs one
                batched solve per ``var_block`` test points.
            var_block: test points per batched CG solve.

        Returns:
            ``mean (m,)`` and ``var (m,)`` (or None).
        """
        if not isinstance(X_test, Tensor) or X_test.ndim != 2 or X_test.shape[1] != self.X.shape[1]:
            raise ValueError(
                f"X_test must have shape (m, {self.X.shape[1]}), "
                f"got {tuple(getattr(X_test, 'shape', ()))}"
            )
        if not bool(torch.isfinite(X_test).all()):
            raise ValueError("X_test contains NaN or infinite values")
        with torch.no_grad():
            kss = self.kernel.diag(X_test)
            if self.backend == "cholesky":
                K = self.kernel(self.X)
                n = K.shape[0]
                A = K + self.noise * torch.eye(n, dtype=K.dtype, device=K.device)
                L = robust_cholesky(A).L
                Ks = self.kernel(self.X, X_test)
                alpha = torch.cholesky_solve(self.y[:, None], L)
                mean = (Ks.T @ alpha)[:, 0]
                if not return_var:
                    return mean, None
                Vs = torch.linalg.solve_triangular(L, Ks, upper=False)
                return mean, (kss - (Vs * Vs).sum(0)).clamp_min(0.0)
            precond = self._preconditioner()
            alpha, _, _ = self._solve(self.y[:, None], precond)
            cross = self._kernel_matvec(X_test, self.X)
            mean = cross(alpha)[:, 0]
            if not return_var:
                return mean, None
            var = torch.empty_like(kss)
            for s in range(0, X_test.shape[0], var_block):
                Xb = X_test[s : s + var_block]
                Kb = self.kernel(self.X, Xb)  # (n, b): O(n b) memory
                W, _, _ = self._solve(Kb, precond)
                var[s : s + var_block] = kss[s : s + var_block] - (Kb * W).sum(0)
            return mean, var.clamp_min(0.0)
