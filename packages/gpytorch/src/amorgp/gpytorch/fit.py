"""Fit GPyTorch/BoTorch models from the amortized start (:class:`AmortizedFit`); the start
itself is written by :mod:`amorgp.gpytorch.initialize`, whose functions are re-exported here."""

from __future__ import annotations

import logging
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, SingleTaskGP
from botorch.optim.fit import fit_gpytorch_mll_scipy
from torch import Tensor

from amorgp.amortizer.frontends.inference import Amortizer
from amorgp.core.errors import OptionError
from amorgp.gpytorch.initialize import (
    _initialize,
    default_amortizer,
    initialize_gpytorch,
    model_data,
    warm_up,
)
from amorgp.gpytorch.lean import LeanObjective
from gpytorch.mlls import (
    ExactMarginalLogLikelihood,
    MarginalLogLikelihood,
    SumMarginalLogLikelihood,
)

__all__ = [
    "RACE_STEPS",
    "REFINE_STEPS",
    "AmortizedFit",
    "FallbackWarning",
    "default_amortizer",
    "fit_amortized",
    "initialize_gpytorch",
    "model_data",
    "warm_up",
]

_log = logging.getLogger(__name__)

#: Default L-BFGS-B iterations of :class:`AmortizedFit` (an upper limit: the stopping
#: rules usually end the refine earlier).
REFINE_STEPS = 50

RACE_STEPS = 3
"""L-BFGS-B iterations each of the two starts of :class:`AmortizedFit` runs before the
better one is refined further (the start's own score predicts the optimum it leads to
less well than a few iterations do)."""


class FallbackWarning(UserWarning):
    """:class:`AmortizedFit` fell back to BoTorch's ``fit_gpytorch_mll`` (the message
    says why); issued once per cause and process."""


_FALLBACK_ERRORS = (ValueError, ArithmeticError, RuntimeError)
"""What an amortized fit may meet and fall back from: the library's ``OptionError`` (a
kernel outside the vocabulary, e.g. ``MaternKernel``) and ``DataError`` (both
``ValueError``), a non-finite or mismatched objective (``ArithmeticError``), and
torch/GPyTorch numerical failures (``torch.linalg.LinAlgError``, ``NotPSDError``, out of
memory: ``RuntimeError``).  Anything else (``TypeError``, ``AttributeError``, ...) is a
bug and propagates."""

_WARNED: set[str] = set()
"""Causes of fallbacks warned about already (type and message without numbers)."""


def _warn_fallback(err: BaseException) -> None:
    cause = f"{type(err).__name__}: {re.sub(r'[-+0-9.e]+', '#', str(err))}"
    if cause in _WARNED:
        return
    _WARNED.add(cause)
    warnings.warn(
        f"amortized fit fell back to BoTorch's fit_gpytorch_mll: {type(err).__name__}: {err} "
        "(this warning is shown once per cause)",
        FallbackWarning,
        stacklevel=3,
    )


@dataclass
class AmortizedFit:
    """A fitting function for BoTorch: amortized start, L-BFGS-B refine, fallback.

    ``fit = AmortizedFit(); fit(mll)`` is used like ``fit_gpytorch_mll(mll)``: it
    returns ``mll`` in eval mode with fitted hyperparameters.  It sets the start with
    :func:`initialize_gpytorch`, then runs at most ``refine_steps`` L-BFGS-B iterations
    (scipy's, with its stopping rules ``ftol``/``gtol``) of the model's own objective
    (``ExactMarginalLogLikelihood``: likelihood plus priors).  Where the model is
    supported (:class:`~amorgp.gpytorch.lean.LeanObjective`: the RBF models
    BoTorch builds by default in closed form, other kernel trees of the amortizer's
    vocabulary in plain torch) the objective is evaluated directly from the raw
    parameters and the result written to the model once; otherwise BoTorch's
    ``fit_gpytorch_mll_scipy`` runs the iterations (:attr:`slow_refines` counts those).
    Unless the model is BoTorch's ``SingleTaskGP`` on the closed form, the final value is
    checked against the model's own MLL.  When anything fails (an exception, a
    non-finite objective or parameter, a mismatch, a kernel outside the vocabulary; see
    :data:`_FALLBACK_ERRORS`) the state is restored, a :class:`FallbackWarning` names
    the reason (once per cause) and BoTorch's ``fit_gpytorch_mll`` runs instead;
    :attr:`fallbacks` counts those.  Other exceptions (bugs) propagate.

    The network's start: its hyperparameters, and (``calibrate``) on a model the lean
    objective supports, the noise and a common factor on the RBF/Matern lengthscales
    searched on the model's own objective, priors included
    (:meth:`~amorgp.gpytorch.lean.LeanObjective.tune_start`; a model that holds a global
    scale gets the amortizer's exact scale and noise first).  The model's priors move its
    optimum away from the likelihood's alone: BoTorch's noise prior puts a noiseless
    function's noise near ``exp(-5)``, where Type-2 ML would go to the constraint's bound.

    Two starts (``model_start=True``, the default): the model's own hyperparameters when
    the fit is called (for a new BoTorch model, BoTorch's initial values: the start
    ``fit_gpytorch_mll`` refines) and the network's start.  On the lean objective each
    runs :data:`RACE_STEPS` L-BFGS-B iterations and the better one is refined on (with
    ``refine_steps <= RACE_STEPS``, or outside the lean objective, the better start by its
    score), so the network's start never leaves the fit below where the model's own start
    would be after as many iterations.  :attr:`last_start` says which was refined
    (``"network"`` or ``"model"``), :attr:`model_starts` counts the fits the model's start
    won and :attr:`network_better` the fits whose network start scored higher than the
    model's before any iteration; they are logged at ``DEBUG`` (logger
    ``amorgp.gpytorch.fit``).

    A fixed-noise model (``SingleTaskGP(X, Y, train_Yvar=...)``) keeps its known noise
    (see :func:`initialize_gpytorch`).  A ``SumMarginalLogLikelihood`` of a
    ``ModelListGP`` is fitted one sub-model after another, as ``fit_gpytorch_mll`` does,
    each with its own start and, where it fails, its own fallback.

    Attributes:
        refine_steps: L-BFGS-B iterations at most after the amortized start (0: none).
        amortizer: the network (default: :func:`default_amortizer`).
        ftol: stop when the relative decrease of ``-MLL`` is at most ``ftol``.
        gtol: stop when the projected gradient's largest entry is at most ``gtol``.
        calibrate: start from the calibrated prediction (the noise and a lengthscale
            factor on the model's objective, above; outside the lean objective the exact
            Type-2 ML scale and noise given the network's other hyperparameters,
            :func:`initialize_gpytorch`); ``None``: the amortizer's own setting (on for
            the bundled default).
        model_start: also race the model's own start and refine the better of the two.
        calls: fits run (one per model; a model list counts each sub-model).
        fallbacks: fits that fell back to ``fit_gpytorch_mll``.
        slow_refines: refines run through BoTorch's scipy fit (model outside the lean
            objective).
        abnormal_stops: lean refines that scipy stopped abnormally (a failed line search;
            the parameters are the best found, no fallback).
        model_starts: fits whose refine went on from the model's own start.
        network_better: fits whose network start scored higher than the model's own
            before any iteration.
        last_start: the start the last fit refined: ``"network"`` or ``"model"``.
        last_error: why the last fallback happened.
        last_evaluations: objective evaluations of the last fit's L-BFGS-B iterations on
            the lean objective (both starts' iterations included; 0 where none ran, or
            where BoTorch's scipy fit ran them).
        evaluations: the same, summed over all fits.
    """

    refine_steps: int = REFINE_STEPS
    amortizer: Amortizer | None = None
    ftol: float = 2.220446e-9
    gtol: float = 1e-5
    calibrate: bool | None = None
    model_start: bool = True
    calls: int = 0
    fallbacks: int = 0
    slow_refines: int = 0
    abnormal_stops: int = 0
    model_starts: int = 0
    network_better: int = 0
    last_start: str = ""
    last_error: str = ""
    last_evaluations: int = 0
    evaluations: int = 0
    _race: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __call__(self, mll: Any, **kwargs: Any) -> Any:
        """Fit ``mll``'s model; ``kwargs`` go to the fallback ``fit_gpytorch_mll``.

        Raises:
            OptionError: ``mll`` is not a GPyTorch marginal log likelihood.
        """
        if not isinstance(mll, MarginalLogLikelihood):
            raise OptionError(
                "the amortized fit takes a GPyTorch marginal log likelihood "
                f"(ExactMarginalLogLikelihood), got {type(mll).__name__}"
            )
        if isinstance(mll, SumMarginalLogLikelihood) and isinstance(mll.model, ModelListGP):
            mll.train()
            for sub in mll.mlls:
                self(sub, **kwargs)
            return mll.eval() if not any(sub.training for sub in mll.mlls) else mll
        self.calls += 1
        self.last_evaluations = 0
        state = {k: v.detach().clone() for k, v in mll.state_dict().items()}
        try:
            if not isinstance(mll, ExactMarginalLogLikelihood):
                raise OptionError(
                    f"{type(mll).__name__}: the amortized fit takes an "
                    "ExactMarginalLogLikelihood or a ModelListGP's SumMarginalLogLikelihood"
                )
            mll.train()
            objective = self._start(mll, state)
            lean, trusted = self._refine(mll, objective) if self.refine_steps > 0 else (None, False)
            if not trusted:
                _check(mll, lean)
        except _FALLBACK_ERRORS as err:
            self.fallbacks += 1
            self.last_error = f"{type(err).__name__}: {err}"
            self.last_start = ""
            mll.load_state_dict(state)
            _warn_fallback(err)
            return fit_gpytorch_mll(mll, **kwargs)
        return mll.eval()

    def _start(
        self, mll: ExactMarginalLogLikelihood, state: dict[str, Tensor]
    ) -> LeanObjective | None:
        """Write the start to the model: the network's, or (``model_start``) the better by
        the model's objective of the network's and the model's own (``state``).  Returns
        the lean objective of the model (None outside it)."""
        model = mll.model
        try:
            objective: LeanObjective | None = LeanObjective(mll)
        except OptionError:
            objective = None
        own = None if objective is None else objective.x0()
        amz = warm_up(self.amortizer if self.amortizer is not None else default_amortizer())
        calibrate = amz.calibrate if self.calibrate is None else self.calibrate
        tune = calibrate and objective is not None
        _initialize(model, None, None, amz, 0, calibrate, full=False, noise_alone=not tune)
        if tune:
            assert objective is not None
            # the noise and a common lengthscale factor on the model's own objective
            # (priors included), the network's other hyperparameters kept
            objective.write(objective.tune_start(objective.x0())[0])
        self.last_start = "network"
        if not self.model_start:
            return objective
        self._race = None
        if objective is not None and own is not None:
            # -MLL of [model's start, network's start] in one batched evaluation
            network = objective.x0()
            values = objective.values(np.stack([own, network]))
            model_wins = bool(values[0] < values[1])
            self.network_better += not model_wins
            if self.refine_steps > RACE_STEPS:
                self._race = (own, network)  # decided by _refine
                return objective
        else:
            value = -_objective(mll)
            ours = {k: v.detach().clone() for k, v in mll.state_dict().items()}
            mll.load_state_dict(state)
            values = np.array([-_objective(mll), value])  # -MLL, as the lean values
            model_wins = bool(values[0] < values[1])
            self.network_better += not model_wins
            if not model_wins:
                mll.load_state_dict(ours)
        if model_wins:
            if objective is not None:
                _restore_parameters(mll, state)
            self.model_starts += 1
            self.last_start = "model"
        _log.debug(
            "amortized fit: -MLL of the model's start %.6g, of the network's %.6g; "
            "refining the %s's",
            values[0],
            values[1],
            self.last_start,
        )
        return objective

    def _refine(
        self, mll: ExactMarginalLogLikelihood, objective: LeanObjective | None
    ) -> tuple[float | None, bool]:
        """The L-BFGS-B iterations: ``(final MLL of the lean objective or None, whether
        that value needs no check against the model's own MLL)``."""
        if objective is None:
            self.slow_refines += 1
            fit_gpytorch_mll_scipy(
                mll,
                options={"maxiter": int(self.refine_steps), "ftol": self.ftol, "gtol": self.gtol},
            )
            return None, False
        steps = self.refine_steps
        if self._race is not None:
            raced: list[tuple[float, np.ndarray]] = []
            for start in self._race:  # (model's, network's)
                objective.write(start)
                try:
                    first = objective.minimize(RACE_STEPS, ftol=self.ftol, gtol=self.gtol)
                except FloatingPointError:  # this start leaves the finite region: out
                    raced.append((-math.inf, start))
                    continue
                self._count(first.evaluations)
                raced.append((first.mll, objective.x0()))
            if not any(math.isfinite(value) for value, _ in raced):
                raise FloatingPointError("both starts' iterations reached a non-finite objective")
            model_wins = raced[0][0] > raced[1][0]
            objective.write(raced[0][1] if model_wins else raced[1][1])
            self.model_starts += model_wins
            self.last_start = "model" if model_wins else "network"
            _log.debug(
                "amortized fit: MLL after %d iterations from the model's start %.6g, from "
                "the network's %.6g; refining the %s's",
                RACE_STEPS,
                raced[0][0],
                raced[1][0],
                self.last_start,
            )
            steps -= RACE_STEPS
        res = objective.minimize(steps, ftol=self.ftol, gtol=self.gtol)
        self._count(res.evaluations)
        self.abnormal_stops += res.status == 2
        trusted = objective.closed_form is not None and (
            type(mll.model).forward is SingleTaskGP.forward
        )
        return res.mll, trusted

    def _count(self, evaluations: int) -> None:
        self.last_evaluations += evaluations
        self.evaluations += evaluations


def _restore_parameters(mll: ExactMarginalLogLikelihood, state: dict[str, Tensor]) -> None:
    """Copy every parameter of ``mll`` back from ``state`` (its ``state_dict`` taken
    before the start was written; the start writes parameters only, so this restores
    what ``load_state_dict`` would, without its per-module traversal)."""
    with torch.no_grad():
        for name, p in mll.named_parameters():
            p.copy_(state[name])


def _check(mll: ExactMarginalLogLikelihood, lean: float | None) -> None:
    """Raise unless the model's MLL and parameters are finite and (``lean`` given) the MLL
    equals ``lean``."""
    loss = _objective(mll)
    finite = all(bool(torch.isfinite(p).all()) for p in mll.parameters())
    if not (math.isfinite(loss) and finite):
        raise FloatingPointError(f"non-finite objective {loss} after the amortized start")
    if lean is not None and abs(lean - loss) > 1e-6 * max(1.0, abs(loss)):
        raise ArithmeticError(f"the lean objective ({lean}) differs from the model's MLL ({loss})")


def _objective(mll: ExactMarginalLogLikelihood) -> float:
    """The model's own MLL (GPyTorch's; ``-inf`` where it cannot be evaluated)."""
    from linear_operator.utils.errors import NanError, NotPSDError

    model = mll.model
    try:
        with torch.no_grad():
            out = model(*model.train_inputs)
            value = float(mll(out, model.train_targets))
    except (NanError, NotPSDError):
        return -math.inf
    return value if math.isfinite(value) else -math.inf


def fit_amortized(
    mll: ExactMarginalLogLikelihood,
    *,
    refine_steps: int = REFINE_STEPS,
    amortizer: Amortizer | None = None,
    calibrate: bool | None = None,
    **kwargs: Any,
) -> ExactMarginalLogLikelihood:
    """``fit_gpytorch_mll`` with an amortized start (see :class:`AmortizedFit`).

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> from gpytorch.mlls import ExactMarginalLogLikelihood
        >>> import torch
        >>> X = torch.rand(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> model = SingleTaskGP(X, (X.sin().sum(-1, keepdim=True)))
        >>> mll = fit_amortized(ExactMarginalLogLikelihood(model.likelihood, model))
        >>> model.training
        False
    """
    return AmortizedFit(refine_steps, amortizer, calibrate=calibrate)(mll, **kwargs)
