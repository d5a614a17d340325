"""Exact GP regression for one kernel: a convenience front end over :class:`Posterior`.

Model: ``y = f(X) + eps``, ``f ~ GP(0, k)``, ``eps ~ N(0, sigma^2 I)``, ``A = K + sigma^2 I``.
:class:`ExactGP` picks a kernel operator and a solver by a backend name, builds one
:class:`~amorgp.lazy_kernels.Posterior` (lazily, on the first query) and reuses its factor
for every log marginal likelihood and prediction:

``"cholesky"``
    dense operator (batched evaluator) and one Cholesky; ``O(n^3)`` time, ``O(n^2)`` memory.
``"cg"``
    dense operator kept in memory, used through matvecs by preconditioned CG + SLQ.
``"keops"``
    :class:`~amorgp.lazy_kernels.keops.KeOpsOperator` (``K`` never formed, ``O(n)``
    memory) and preconditioned CG + SLQ.  Where KeOps fails its probe on the device
    (:func:`~amorgp.lazy_kernels.keops_usable`, which warns once with the reason), the
    block backend instead.
``"block"``
    :class:`~amorgp.lazy_kernels.BlockKernelOperator` (``K`` never formed: matvecs by row
    blocks of the dense evaluator sized to the memory budget, ``O(n x block)`` memory, any
    device, no compiler) and preconditioned CG + SLQ.
``"dense"``
    the dense operator with the solver of the memory rule: ``"cholesky"`` where it fits,
    ``"cg"`` otherwise (never KeOps).

``backend="auto"`` picks (see :func:`choose_backend`): Cholesky up to
:data:`CHOLESKY_MAX_N` points when the dense evaluator's working memory (which grows with
the number of addends) and the Cholesky workspace fit the memory budget, dense CG while the
evaluator's working memory fits, KeOps CG beyond where KeOps works on the device, else
block CG.  Any :class:`KernelOperator` may be
given instead of a kernel; then ``backend`` only picks the solver.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from amorgp.kernel_grammar import DataError, OptionError
from amorgp.lazy_kernels.evaluation import blockwise_graph
from amorgp.lazy_kernels.factory import kernel_operator
from amorgp.lazy_kernels.keops import KeOpsOperator
from amorgp.lazy_kernels.operators import (
    EVALUATOR_MATRICES_PER_TERM,
    DenseKernel,
    KernelOperator,
)
from amorgp.lazy_kernels.posterior import Method, Posterior
from amorgp.lazy_kernels.solvers import (
    PivotedCholeskyPreconditioner,
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

LAZY_VAR_BLOCK = 2**30
"""``var_block`` of the lazy backends: no limit beyond the chunk of test points."""

Backend = Literal["auto", "cholesky", "cg", "keops", "block", "dense"]

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


def choose_backend(
    n: int,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    memory_budget: float = 4 * 2**30,
    keops: bool | None = None,
    n_terms: int = 1,
    graph: bool = True,
    input_graph: bool = False,
) -> str:
    """The backend ``"auto"`` uses for ``n`` training points.

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
    """
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


class ExactGP:
    """Exact GP regression with a fixed kernel and noise, over one cached :class:`Posterior`.

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
            fails its probe, with a warning).
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
        backend: Backend = "auto",
        memory_budget: float = 4 * 2**30,
        cg_tol: float = 1e-8,
        max_cg_iter: int = 1000,
        precond_rank: int = 64,
        n_probes: int = 15,
        generator: torch.Generator | None = None,
        chunk_budget: float = 256 * 2**20,
        var_block: int | None = None,
    ) -> None:
        _check_data(X, y)
        if backend not in ("auto", "cholesky", "cg", "keops", "block", "dense"):
            raise OptionError(
                f"unknown backend {backend!r}; use auto, cholesky, cg, keops, block or dense"
            )
        self.noise = torch.as_tensor(noise, dtype=X.dtype, device=X.device)
        nd = self.noise.detach()
        if nd.ndim != 0 or not bool(torch.isfinite(nd)) or not float(nd) > 0:
            raise DataError(f"noise must be a positive finite scalar, got {noise!r}")
        n = X.shape[0]
        if isinstance(kernel, KernelOperator):
            self._operator = _given_operator(kernel, X, backend)
            item = torch.finfo(X.dtype).bits // 8
            dense_fits = n * n * (kernel.bytes_per_entry + 2 * item) <= memory_budget
            self.backend: str = backend
            if backend in ("auto", "dense"):
                self.backend = "cholesky" if n <= CHOLESKY_MAX_N and dense_fits else "cg"
        else:
            _check_kernel(kernel, X)
            self.backend = backend
            params = getattr(kernel, "params", None)
            graph = X.requires_grad or bool(getattr(params, "requires_grad", False))
            if backend in ("auto", "dense"):
                self.backend = choose_backend(
                    n,
                    X.dtype,
                    X.device,
                    memory_budget,
                    keops=True if backend == "dense" else None,
                    n_terms=kernel.n_terms,
                    graph=graph,
                    input_graph=X.requires_grad,
                )
                if backend == "dense" and self.backend == "keops":
                    self.backend = "cg"  # where only KeOps would fit: dense CG as asked
            lazy = self.backend in ("keops", "block")
            self._operator = kernel_operator(
                kernel,
                X,
                backend=self.backend if lazy else "dense",
                memory_budget=memory_budget / 2,
            )
            if self.backend == "keops" and not isinstance(self._operator, KeOpsOperator):
                self.backend = "block"  # KeOps failed its probe (warned)
        self.kernel, self.X, self.y = kernel, X, y
        self._options: dict[str, Any] = {
            "cg_tol": cg_tol,
            "max_cg_iter": max_cg_iter,
            "precond_rank": precond_rank,
            "n_probes": n_probes,
            "memory_budget": max(chunk_budget, memory_budget / 2)
            if self.backend in ("keops", "block")
            else chunk_budget,
            "var_block": var_block
            if var_block is not None
            else (LAZY_VAR_BLOCK if self.backend in ("keops", "block") else 16),
            "generator": generator if generator is not None else torch.Generator().manual_seed(0),
        }
        self._posterior: Posterior | None = None
        self._versions: tuple[int, ...] = ()

    def _state(self) -> tuple[int, ...]:
        owner = getattr(self.kernel, "kernel", self.kernel)  # an operator's kernel
        params = getattr(owner, "params", None)
        tensors = [self.noise] + ([params] if isinstance(params, Tensor) else [])
        return tuple(t._version for t in tensors)

    def posterior(self) -> Posterior:
        """The cached :class:`Posterior` (built on first use; rebuilt after an in-place change
        of the kernel parameters or the noise)."""
        if self._posterior is None or self._state() != self._versions:
            method: Method = "cholesky" if self.backend == "cholesky" else "cg"
            operator = self._operator if self._posterior is None else self._operator.on(self.X)
            self._posterior = Posterior(
                operator, self.y, self.noise, method=method, **self._options
            )
            self._versions = self._state()
        return self._posterior

    @property
    def factored(self) -> bool:
        """Whether the dense Cholesky factor of the current parameters exists (a prediction
        then costs no factorisation)."""
        post = self._posterior
        return (
            self.backend == "cholesky"
            and post is not None
            and post.factorizations > 0
            and self._state() == self._versions
        )

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


def _check_data(X: Tensor, y: Tensor) -> None:
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


def _given_operator(op: KernelOperator, X: Tensor, backend: str) -> KernelOperator:
    if backend in ("keops", "block"):
        raise OptionError("with a KernelOperator, backend picks the solver: auto, cholesky or cg")
    if op.X2 is not op.X1:
        raise OptionError("the operator must be the symmetric training operator K(X, X)")
    if op.X1.shape != X.shape or not bool(torch.equal(op.X1, X)):
        raise DataError("the operator's inputs differ from X")
    return op
