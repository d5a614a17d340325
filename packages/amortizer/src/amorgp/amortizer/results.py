"""The result of amortized inference for one kernel: :class:`KernelResult`.

A :class:`KernelResult` extends the fit-result base :class:`amorgp.lazy_kernels.KernelFit`
(named hyperparameters in both units, ``predict``, ``log_predictive_density``,
``to_dict``) with what the amortizer adds: the points the dataset encoder read and the
refinement that ran.  It keeps one :class:`ConditionedGP`, the exact GP of its kernel
conditioned on the normalised training data, whose one cached posterior (one factor of
``K + sigma^2 I``) serves the log marginal likelihood and every prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import DimWiseKernel, ExactGP, KernelFit, Normalizer, Posterior

__all__ = ["ConditionedGP", "KernelResult"]

_CHUNK_BYTES = 256 * 2**20


class ConditionedGP:
    """The exact GP of one kernel conditioned on normalised data: one cached posterior.

    Wraps one :class:`amorgp.lazy_kernels.ExactGP` (``backend="auto"``: dense Cholesky,
    dense CG or KeOps CG by ``memory_budget``), created on first use.  Its
    :class:`~amorgp.lazy_kernels.Posterior` factors ``K + sigma^2 I`` once (Cholesky, or
    the CG preconditioner and ``alpha``) and serves the log marginal likelihood and every
    prediction from that factor; test points are processed in chunks that reuse it.

    Args:
        structure: the kernel structure.
        params: ``(D, L, P)`` parameters (at least the structure's dimensions and addends).
        noise: noise variance, normalised units.
        X: ``(n, d)`` normalised inputs (device and dtype of the GP algebra).
        y: ``(n,)`` standardised targets.
        memory_budget: bytes the dense backends may use.
        options: more ExactGP options (``cg_tol``, ``max_cg_iter``, ``precond_rank``,
            ``n_probes``).
        factor: a precomputed dense factorisation of ``K + sigma^2 I`` at these
            parameters: ``(L (n, n), alpha (n,), jitter, lml)`` (the lower Cholesky factor,
            ``alpha = (K + sigma^2 I)^{-1} y``, the absolute jitter it needed, the 0-d log
            marginal likelihood), e.g. one element of
            :func:`amorgp.amortizer.batched.factor`.  The posterior adopts it on the dense
            backend (no second factorisation); on another backend it is ignored.
    """

    def __init__(
        self,
        structure: DimWiseStructure,
        params: Tensor,
        noise: float,
        X: Tensor,
        y: Tensor,
        *,
        memory_budget: float,
        options: Mapping[str, Any] | None = None,
        factor: tuple[Tensor, Tensor, Tensor | float, Tensor | float] | None = None,
    ) -> None:
        self.structure = structure
        with torch.inference_mode(False):  # a normal tensor: ExactGP tracks its version
            self.params = (
                params[: structure.n_dims, : structure.max_addends]
                .detach()
                .to(device=X.device, dtype=X.dtype)
                .clone()
            )
        self.noise = float(noise)
        self.X, self.y = X, y
        self.memory_budget = float(memory_budget)
        self.options = dict(options or {})
        self._lml: float | None = None
        self._gp: ExactGP | None = None
        self._factor = factor

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the data and parameters, not the factor (``O(n^2)``): it is recomputed
        on first use, so fitted estimators travel cheaply between processes."""
        state = self.__dict__.copy()
        if state.get("_lml") is None and state.get("_factor") is not None:
            state["_lml"] = float(state["_factor"][3])
        state["_gp"] = None
        state["_factor"] = None
        return state

    @property
    def gp(self) -> ExactGP:
        """The one :class:`~amorgp.lazy_kernels.ExactGP` of this kernel (built on first use)."""
        if self._gp is None:
            if torch.is_inference_mode_enabled():
                with torch.inference_mode(False):
                    return self.gp
            kernel = DimWiseKernel(self.structure, self.params)
            self._gp = ExactGP(
                kernel,
                self.noise,
                self.X,
                self.y,
                backend="auto",
                memory_budget=self.memory_budget,
                chunk_budget=_CHUNK_BYTES,
                **self.options,
            )
            if self._factor is not None and self._gp.backend == "cholesky":
                _adopt(self._gp.posterior(), *self._factor[:3])
        return self._gp

    @property
    def posterior(self) -> Posterior:
        """The cached :class:`~amorgp.lazy_kernels.Posterior` (factored on first use)."""
        return self.gp.posterior()

    @property
    def backend(self) -> str:
        """``"cholesky"``, ``"cg"``, ``"keops"`` or ``"block"``."""
        return self.gp.backend

    @property
    def factored(self) -> bool:
        """Whether the posterior's dense Cholesky factor exists (see ``ExactGP.factored``;
        also when a precomputed factor waits to be adopted)."""
        if self._gp is None:
            return self._factor is not None
        return self._gp.factored

    def log_marginal_likelihood(self) -> float:
        """``log p(y~ | theta, S)`` from the posterior's factor (computed once, then cached)."""
        if self._lml is None and self._factor is not None:
            self._lml = float(self._factor[3])
        if self._lml is None:
            post = self.posterior
            with torch.inference_mode():
                self._lml = float(post.log_marginal_likelihood())
        return self._lml

    def predict(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        """Predictive ``(mean (m,), variance (m,))`` at normalised ``Xn (m, d)``."""
        Xq = torch.as_tensor(Xn, dtype=self.X.dtype, device=self.X.device)
        post = self.posterior
        with torch.inference_mode():
            mean, var = post.predict(Xq)
        assert var is not None
        return mean, var + self.noise if include_noise else var


def _adopt(post: Posterior, L: Tensor, alpha: Tensor, jitter: Tensor | float) -> None:
    """Give ``post`` its dense factor (``A + jitter I = L L^T``) and ``alpha = A^{-1} y``:
    one factorisation, counted once."""
    if post._L is None:
        with torch.inference_mode(False):
            post._L = L.detach().clone() if L.is_inference() else L.detach()
            post._alpha = alpha.detach().clone() if alpha.is_inference() else alpha.detach()
        post.cholesky_jitter = float(jitter)
        post.factorizations += 1


@dataclass(frozen=True, eq=False, kw_only=True)
class KernelResult(KernelFit):
    """Amortized hyperparameters of one kernel on one dataset, with the GP they define.

    Extends :class:`~amorgp.lazy_kernels.KernelFit`: ``kernel``, ``params (D, L, P)``,
    ``noise``, ``normalizer``, ``n_points``, ``time_s`` (the call's time divided by its
    number of kernels), ``call_time_s``; ``table``, ``hyperparameters``,
    ``hyperparameters_original``, ``noise_original``, ``log_marginal_likelihood_original``,
    ``predict``, ``log_predictive_density``.

    Attributes:
        encoder_points: points the dataset encoder read.
        refine_steps: L-BFGS iterations of Type-2 ML actually run after the network (0:
            no refinement).
        refine_status: why the refinement stopped: ``"none"`` (not asked for),
            ``"converged"`` (L-BFGS's own tolerances, or with ``refine="auto"`` the
            objective stopped improving), ``"max_iters"`` (the iteration budget ran out)
            or ``"failed"`` (non-finite objective; the last finite iterate is kept).
        calibrated: the global scale and the noise were set to their exact Type-2 ML
            values after the network (``calibrate=True``; :mod:`amorgp.amortizer.calibrate`).
        network: the name of the network whose prediction this is (the amortizer's
            primary network, or the candidate with the highest log marginal likelihood;
            see :mod:`amorgp.amortizer.selection`).
        start: which start won (:mod:`amorgp.amortizer.multistart`): ``"network"``,
            ``"periodogram"``, ``"harmonic x2"``...

    :attr:`log_marginal_likelihood` is computed by :meth:`Amortizer.infer_many
    <amorgp.amortizer.inference.Amortizer.infer_many>` when the dense backend applies (or
    when asked to), else on first access (a CG solve and a stochastic log-determinant on
    all ``n`` points, which is most of the cost at large ``n`` and not needed for
    predictions).
    """

    encoder_points: int
    refine_steps: int = 0
    refine_status: str = "none"
    calibrated: bool = False
    network: str = "primary"
    start: str = "network"
    _gp: ConditionedGP | None = field(default=None, repr=False)

    @property
    def log_marginal_likelihood(self) -> float:
        """``log p(y~ | theta, S)`` of the normalised targets on all ``n`` points.

        Exact with the dense backend; with the CG backends the solve is exact to the CG
        tolerance and the log-determinant a stochastic Lanczos quadrature estimate.
        """
        if self._gp is None:
            raise ValueError("this result holds no data to evaluate the likelihood on")
        return self._gp.log_marginal_likelihood()

    @property
    def posterior(self) -> Posterior:
        """The exact GP posterior of this kernel on the normalised training data (one factor,
        shared by :attr:`log_marginal_likelihood` and :meth:`predict`; its ``sample`` and
        ``covariance`` are in normalised units)."""
        if self._gp is None:
            raise ValueError("this result holds no data to condition on")
        return self._gp.posterior

    @property
    def factored(self) -> bool:
        """Whether the posterior's dense Cholesky factor already exists (the likelihood was
        evaluated on the dense backend): predictions then reuse it."""
        return self._gp is not None and self._gp.factored

    @property
    def normalization(self) -> Normalizer:
        """Alias of :attr:`normalizer` (the name used before the fit-result base)."""
        return self.normalizer

    def predict(self, X_new: Any, *, include_noise: bool = True) -> tuple[Any, Any]:
        """GP predictive ``(mean (m,), variance (m,))`` at ``X_new (m, d)``, original units
        (see :meth:`KernelFit.predict <amorgp.lazy_kernels.KernelFit.predict>`).

        Returns float64 CPU tensors for a tensor ``X_new``, float64 numpy arrays for
        anything else (a numpy array, a list).
        """
        mean, var = super().predict(X_new, include_noise=include_noise)
        if isinstance(X_new, Tensor):
            return mean, var
        return mean.numpy(), var.numpy()

    def _predict_normalized(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        if self._gp is None:
            raise ValueError("this result holds no data to condition on")
        return self._gp.predict(Xn, include_noise)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: the :class:`~amorgp.lazy_kernels.KernelFit` one plus the
        encoder subset and the refinement."""
        return {
            **super().to_dict(),
            "refine_steps": self.refine_steps,
            "refine_status": self.refine_status,
            "calibrated": self.calibrated,
            "encoder_points": self.encoder_points,
            "network": self.network,
            "start": self.start,
        }
