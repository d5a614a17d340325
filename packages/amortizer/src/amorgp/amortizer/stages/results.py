"""The result of amortized inference for one kernel: :class:`KernelResult`.

A :class:`KernelResult` extends the fit-result base :class:`amorgp.core.fit.KernelFit`
(named hyperparameters in both units, ``predict``, ``log_predictive_density``,
``to_dict``) with what the amortizer adds: the points the dataset encoder read and the
refinement that ran.  It holds :attr:`KernelResult.posterior`, the
:class:`~amorgp.lazy_kernels.Posterior` of its kernel on the normalised training data
(:func:`conditioned_posterior`): its one factor of ``K + sigma^2 I`` (adopted from the
batched factorisation of :mod:`amorgp.amortizer.stages.batched` where that ran) serves the log
marginal likelihood and every prediction.

Every result says how it got there: the start that won (:attr:`KernelResult.start`), the
refinement's iterations and why it stopped, and whether it is at an optimum of the log
marginal likelihood (:meth:`KernelResult.optimality`, :attr:`KernelResult.at_optimum`:
the Fisher-scoring test of :mod:`amorgp.amortizer.stages.fisher`, the refinement's own or
evaluated on demand).  :meth:`KernelResult.untouched` names the hyperparameters that are
still a start's constant (:func:`start_constants`), not moved by the data.  The
optimality test lives in :mod:`amorgp.amortizer.stages.optimality` and the starts'
constants in :mod:`amorgp.amortizer.stages.start_constants`; their names are also
importable from here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from amorgp.amortizer.stages.batched import Factor
from amorgp.amortizer.stages.constraints import (
    DEFAULT_NOISE_FLOOR,
    KernelConstraints,
    Name,
    name_key,
)
from amorgp.amortizer.stages.optimality import (
    Optimality,
    evaluate_optimality,
    evaluate_rows,
    stored_optimality,
    unknown_optimality,
)
from amorgp.amortizer.stages.start_constants import UNTOUCHED_RTOL, start_constants
from amorgp.core.data import Normalizer
from amorgp.core.fit import KernelFit
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import DimWiseKernel, Posterior, SolverPlan

logger = logging.getLogger(__name__)

__all__ = [
    "UNTOUCHED_RTOL",
    "KernelResult",
    "Optimality",
    "conditioned_posterior",
    "evaluate_optimality",
    "start_constants",
]


def conditioned_posterior(
    structure: DimWiseStructure,
    params: Tensor,
    noise: float,
    X: Tensor,
    y: Tensor,
    *,
    plan: SolverPlan,
    options: Mapping[str, Any] | None = None,
    factor: Factor | None = None,
) -> Posterior:
    """The exact posterior of one kernel on normalised data.

    With ``factor`` (a dense factorisation at these parameters) the posterior adopts it:
    dense Cholesky solver, no second factorisation, its likelihood known.  Without, the
    solver and operator are ``plan``'s (dense Cholesky, dense CG, KeOps or block CG),
    factored on first use.  Test points are processed in chunks of the plan's
    prediction budget that reuse the factor.

    Args:
        structure: the kernel structure.
        params: ``(D, L, P)`` parameters (at least the structure's dimensions and addends).
        noise: noise variance, normalised units.
        X: ``(n, d)`` normalised inputs (device and dtype of the GP algebra).
        y: ``(n,)`` standardised targets.
        plan: the call's :class:`~amorgp.lazy_kernels.SolverPlan` (solver and budgets).
        options: more solver options (``cg_tol``, ``max_cg_iter``, ``precond_rank``,
            ``n_probes``).
        factor: a precomputed dense factorisation (:data:`Factor`); the caller
            guarantees the dense backend applies (as the batched path does).
    """
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False):
            return conditioned_posterior(
                structure,
                params,
                noise,
                X,
                y,
                plan=plan,
                options=options,
                factor=factor,
            )
    p = params[: structure.n_dims, : structure.max_addends].detach()
    p = p.to(device=X.device, dtype=X.dtype).clone()
    kernel = DimWiseKernel(structure, p)
    opts = dict(options or {})
    if factor is not None:
        L, alpha, jitter, lml = factor
        logger.debug("posterior of %s on n = %d: dense factor adopted", structure, X.shape[0])
        return Posterior.from_cholesky(
            kernel.operator(X),
            y,
            float(noise),
            L,
            alpha,
            jitter=jitter,
            log_marginal_likelihood=lml,
            check=False,  # built here from checked data: no host read-back per kernel
            memory_budget=plan.chunk_bytes,
            **opts,
        )
    post = Posterior.from_kernel(
        kernel,
        X,
        y,
        float(noise),
        backend=plan,
        **opts,
    )
    logger.debug("posterior of %s on n = %d: backend %s", structure, X.shape[0], post.backend)
    return post


def _lml(post: Posterior) -> float:
    with torch.inference_mode():
        return float(post.log_marginal_likelihood())


def _predict(post: Posterior, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
    Xq = torch.as_tensor(Xn, dtype=post.X.dtype, device=post.X.device)
    with torch.inference_mode():
        mean, var = post.predict(Xq)
    assert var is not None
    return mean, var + float(post.noise) if include_noise else var


@dataclass(frozen=True, eq=False, kw_only=True)
class KernelResult(KernelFit):
    """Amortized hyperparameters of one kernel on one dataset, with the GP they define.

    Extends :class:`~amorgp.core.fit.KernelFit`: ``kernel``, ``params (D, L, P)``,
    ``noise``, ``normalizer``, ``n_points``, ``time_s`` (the call's time divided by its
    number of kernels), ``call_time_s``; ``table``, ``hyperparameters``,
    ``hyperparameters_original``, ``noise_original``, ``log_marginal_likelihood_original``,
    ``predict``, ``log_predictive_density``.

    Attributes:
        encoder_points: points the dataset encoder read.
        refine_steps: iterations of Type-2 ML actually run after the network (0: no
            refinement): L-BFGS iterations for one dataset, Fisher-scoring evaluations
            for many datasets at once (:mod:`amorgp.amortizer.stages.fisher`).
        refine_status: why the refinement stopped: ``"none"`` (not asked for),
            ``"converged"`` (L-BFGS's own tolerances, or with ``refine="auto"`` the
            objective stopped improving; Fisher scoring: the predicted gain fell below
            :data:`~amorgp.amortizer.stages.fisher.GAIN_TOL`), ``"max_iters"`` (the iteration
            budget ran out), ``"stalled"`` (Fisher scoring's steps kept failing before
            the predicted gain was small), ``"failed"`` (non-finite objective; the last
            finite iterate is kept), ``"subset"`` (the default refined on a seeded subset
            of :data:`~amorgp.amortizer.stages.refine.SUBSET_POINTS` points: the subset's
            optimum, not checked on all points) or ``"skipped"`` (the default refined
            nothing: :data:`~amorgp.amortizer.stages.refine.SKIPPED`).
        refine_gain: the log marginal likelihood (nats) that one more Fisher-scoring step
            is predicted to gain at the reported hyperparameters (``g^T F^-1 g / 2``;
            :mod:`amorgp.amortizer.stages.fisher`): below
            :data:`~amorgp.amortizer.stages.fisher.GAIN_TOL` the fit is at an optimum; NaN
            where it was not computed (:meth:`optimality` then evaluates it on demand).
        grad_norm: the norm of the log marginal likelihood's gradient in the log
            parameters there (NaN where not computed).
        calibrated: the global scale and the noise were set to their exact Type-2 ML
            values after the network (``calibrate=True``; :mod:`amorgp.amortizer.stages.calibrate`).
        network: the name of the network whose prediction this is (the amortizer's
            primary network, or the candidate with the highest log marginal likelihood;
            see :mod:`amorgp.amortizer.networks.selection`).
        start: which start won (:mod:`amorgp.amortizer.stages.multistart`): ``"network"``,
            ``"periodogram"``, ``"harmonic x2"``, ``"prior-mean"``, ``"heuristic"``...,
            or ``"nested: <kernel>"`` where the default refinement restarted this kernel
            from the point of a kernel of the same call nested in it
            (:func:`~amorgp.amortizer.stages.refine_rows.restart_nested`).
            Without refinement the constants it set stay (:meth:`untouched`).
        noise_floor: the smallest noise variance the fit could return (normalised units;
            ``noise_floor=`` of :meth:`Amortizer.infer_many
            <amorgp.amortizer.frontends.inference.Amortizer.infer_many>`).
        fixed: the hyperparameters held fixed, ``{name: value}`` (names as
            :attr:`hyperparameters`, or ``"noise"``; normalised units); empty if none.
        bounds: the bounded hyperparameters, ``{name: (low, high)}``; empty if none.
        priors: the refinement maximised the likelihood times the grammar's priors (MAP,
            ``priors=True``) rather than the likelihood.

    :attr:`log_marginal_likelihood` is computed by :meth:`Amortizer.infer_many
    <amorgp.amortizer.frontends.inference.Amortizer.infer_many>` when the dense backend applies (or
    when asked to), else on first access (a CG solve and a stochastic log-determinant on
    all ``n`` points, which is most of the cost at large ``n`` and not needed for
    predictions).
    """

    encoder_points: int
    refine_steps: int = 0
    refine_status: str = "none"
    refine_gain: float = math.nan
    grad_norm: float = math.nan
    calibrated: bool = False
    network: str = "primary"
    start: str = "network"
    noise_floor: float = DEFAULT_NOISE_FLOOR
    fixed: Mapping[Name, float] = field(default_factory=dict)
    bounds: Mapping[Name, tuple[float, float]] = field(default_factory=dict)
    priors: bool = False
    _posterior: Posterior | None = field(default=None, repr=False)
    _optimality_cache: ClassVar[Optimality | None] = None  # set per instance on first use

    def optimality(self) -> Optimality:
        """Whether the hyperparameters are at an optimum of the log marginal likelihood:
        the predicted gain of one more Fisher-scoring step and the gradient norm
        (:class:`Optimality`).

        The refinement's own numbers where Fisher scoring produced the result
        (:attr:`refine_gain`, :attr:`grad_norm`), else one Fisher evaluation at the result
        on its normalised data (about ``m`` products of ``n x n`` matrices for ``m``
        hyperparameters; the constraints and priors of the fit), computed on first call
        and kept.  Above :data:`~amorgp.amortizer.stages.fisher.CHECK_POINTS` points it is not
        evaluated: NaN, and :attr:`Optimality.source` says so.  Many results at once:
        :func:`evaluate_optimality`.
        """
        cached = self._optimality_cache
        if cached is not None:
            return cached
        from amorgp.amortizer.stages.fisher import CHECK_POINTS
        from amorgp.amortizer.stages.refine import SUBSET, SUBSET_POINTS

        out = stored_optimality(self)
        if out is None:
            if self._posterior is None:
                out = unknown_optimality("no data")
            elif self.n_points > CHECK_POINTS:  # the L-BFGS refinement's gradient norm, if any
                reason = f"not evaluated: n = {self.n_points} > {CHECK_POINTS} points"
                if self.refine_status == SUBSET:
                    reason += f"; refined on a subset of {SUBSET_POINTS} points"
                out = Optimality(math.nan, self.grad_norm, reason)
            else:
                out = evaluate_rows([self])[0]
        object.__setattr__(self, "_optimality_cache", out)
        return out

    @property
    def at_optimum(self) -> bool | None:
        """Whether the fit is at an optimum: the predicted gain of one more Fisher-scoring
        step is below :data:`~amorgp.amortizer.stages.fisher.GAIN_TOL` (0.01 nats); ``None``
        where unknown (above :data:`~amorgp.amortizer.stages.fisher.CHECK_POINTS` points, or a
        covariance that cannot be factored).  See :meth:`optimality`."""
        return self.optimality().at_optimum

    def untouched(self) -> tuple[tuple[int, int, str], ...]:
        """The hyperparameters (names as :attr:`hyperparameters`) that are a start's
        constant, not moved by the data: where the winning :attr:`start` set a constant
        (:func:`start_constants`: every hyperparameter of ``"prior-mean"``, the periodic
        lengthscale ``1.0`` and the trend lengthscale ``0.5`` of a periodogram start...)
        and the value still equals it (to :data:`UNTOUCHED_RTOL`), with no refinement
        step after.  Empty for a refined result (:attr:`refine_steps` > 0, or a
        refinement that found the start at an optimum already) and for the network's and
        the harmonics' starts; a hyperparameter the user fixed is :attr:`fixed`, not
        listed here.  ``refine="auto"`` fits them."""
        if self.refine_steps > 0 or self.refine_status == "converged":
            return ()
        constants = start_constants(self.kernel, self.params, self.start)
        out = []
        for pn in self.kernel.param_names():
            name = (pn.dim, pn.addend, pn.param)
            if name in self.fixed:
                continue
            value = float(self.params[pn.dim, pn.addend, pn.slot])
            if any(
                math.isclose(value, c, rel_tol=UNTOUCHED_RTOL, abs_tol=0.0)
                for c in constants.get((pn.dim, pn.addend, pn.slot), ())
            ):
                out.append(name)
        return tuple(out)

    @property
    def log_marginal_likelihood(self) -> float:
        """``log p(y~ | theta, S)`` of the normalised targets on all ``n`` points.

        Exact with the dense backend; with the CG backends the solve is exact to the CG
        tolerance and the log-determinant a stochastic Lanczos quadrature estimate.
        """
        if self._posterior is None:
            raise ValueError("this result holds no data to evaluate the likelihood on")
        return _lml(self._posterior)

    @property
    def posterior(self) -> Posterior:
        """The exact GP posterior of this kernel on the normalised training data (one factor,
        shared by :attr:`log_marginal_likelihood` and :meth:`predict`; its ``sample`` and
        ``covariance`` are in normalised units; ``posterior.backend`` names its solver)."""
        if self._posterior is None:
            raise ValueError("this result holds no data to condition on")
        return self._posterior

    @property
    def factored(self) -> bool:
        """Whether the posterior's dense Cholesky factor already exists (the likelihood was
        evaluated on the dense backend): predictions then reuse it."""
        return self._posterior is not None and self._posterior.factored

    @property
    def normalization(self) -> Normalizer:
        """Alias of :attr:`normalizer` (the name used before the fit-result base)."""
        return self.normalizer

    def predict(self, X_new: Any, *, include_noise: bool = True) -> tuple[Any, Any]:
        """GP predictive ``(mean (m,), variance (m,))`` at ``X_new (m, d)``, original units
        (see :meth:`KernelFit.predict <amorgp.core.fit.KernelFit.predict>`).

        Returns float64 CPU tensors for a tensor ``X_new``, float64 numpy arrays for
        anything else (a numpy array, a list).
        """
        mean, var = super().predict(X_new, include_noise=include_noise)
        logger.debug("prediction of %s at %d point(s)", self.kernel_text, mean.shape[0])
        if isinstance(X_new, Tensor):
            return mean, var
        return mean.numpy(), var.numpy()

    def predict_mean(self, X_new: Any) -> Any:
        """The predictive mean alone at ``X_new (m, d)``, original units: ``K(X*, X) alpha``
        with the posterior's cached ``alpha = (K + sigma^2 I)^{-1} y``, one cross-kernel
        product per chunk of test points (a KeOps reduction on that backend) and no solve
        after the first.  Same types as :meth:`predict`."""
        if self._posterior is None:
            raise ValueError("this result holds no data to condition on")
        post = self._posterior
        Xn = torch.as_tensor(self._x(X_new), dtype=post.X.dtype, device=post.X.device)
        with torch.inference_mode():
            mean = post.mean(Xn)
        mean = mean.to("cpu", torch.float64) * self.normalizer.y_std + self.normalizer.y_mean
        return mean if isinstance(X_new, Tensor) else mean.numpy()

    def _predict_normalized(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        if self._posterior is None:
            raise ValueError("this result holds no data to condition on")
        return _predict(self._posterior, Xn, include_noise)

    def to_dict(self, *, optimality: bool = True) -> dict[str, Any]:
        """JSON-ready summary: the :class:`~amorgp.core.fit.KernelFit` one plus the
        encoder subset, the start and the refinement, and how the fit ended:
        ``refine_gain`` and ``grad_norm`` are :meth:`optimality`'s (the refinement's, or
        evaluated at the result up to :data:`~amorgp.amortizer.stages.fisher.CHECK_POINTS`
        points; ``None`` where unknown), ``at_optimum`` (``true``, ``false`` or
        ``null``), ``optimality`` (where the gain comes from) and ``untouched``
        (:meth:`untouched`, named ``"d<dim>.<addend>.<name>"`` as ``fixed``).
        ``optimality=False``: the refinement's numbers only, nothing evaluated (a Fisher
        evaluation costs about one ``n x n`` product per hyperparameter)."""
        opt = self.optimality() if optimality else self._optimality_cache
        opt = opt or stored_optimality(self)
        if opt is None:
            opt = unknown_optimality("not evaluated")
        return {
            **super().to_dict(),
            "refine_steps": self.refine_steps,
            "refine_status": self.refine_status,
            "refine_gain": None if math.isnan(opt.gain) else opt.gain,
            "grad_norm": None if math.isnan(opt.grad_norm) else opt.grad_norm,
            "at_optimum": opt.at_optimum,
            "optimality": opt.source,
            "untouched": [name_key(name) for name in self.untouched()],
            "calibrated": self.calibrated,
            "encoder_points": self.encoder_points,
            "network": self.network,
            "start": self.start,
            **KernelConstraints(
                self.kernel, self.noise_floor, self.fixed, self.bounds, self.priors
            ).describe(),
        }
