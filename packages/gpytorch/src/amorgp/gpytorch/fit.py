"""Initialise GPyTorch/BoTorch models in place and fit them from the amortized start."""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import time
import warnings
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, SingleTaskGP
from botorch.optim.fit import fit_gpytorch_mll_scipy
from torch import Tensor

from amorgp.amortizer.frontends.inference import Amortizer
from amorgp.amortizer.stages.multistart import has_periodic
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.errors import OptionError
from amorgp.gpytorch.kernels import _assign, read_kernel
from amorgp.gpytorch.lean import LeanObjective, fixed_noise
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.likelihoods.noise_models import HomoskedasticNoise
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


@functools.lru_cache(maxsize=1)
def default_amortizer() -> Amortizer:
    """The bundled pretrained :class:`~amorgp.amortizer.Amortizer` (loaded once, its
    forward prepared by :func:`warm_up`), its own network only: the fits here refine the
    start with L-BFGS, so a candidate network's second forward and likelihood selection
    would cost more than they can improve; pass ``amortizer=`` to use another."""
    return warm_up(Amortizer.from_pretrained(candidates=()))


_WARM: weakref.WeakSet[Amortizer] = weakref.WeakSet()
"""Amortizers whose forward :func:`warm_up` prepared."""


def warm_up(amortizer: Amortizer) -> Amortizer:
    """Prepare ``amortizer``'s network forward for repeated fits, once per amortizer.

    On the CPU the amortizer traces its network's forward on the second use and
    TorchScript optimises the traced graph on its second run
    (:func:`amorgp.amortizer.networks.forward.traced_forward`): without this, the second and third
    fits of a loop pay that preparation.  Here three forwards on a small synthetic
    dataset pay it up front (and, where the amortizer calibrates, one calibration: its
    first call scans the BLAS libraries once per process), so every fit of a Bayesian-optimisation loop costs the same
    from the first one and its network forward runs the same graph (the traced graph has
    no shape constants: other ``n`` and ``d`` reuse it).  Nothing to do on other devices
    or with ``AMORGP_JIT=0``.  :func:`initialize_gpytorch` and :class:`AmortizedFit` call
    it on the amortizer they use.  Returns ``amortizer``.
    """
    if amortizer in _WARM:
        return amortizer
    if amortizer.device.type != "cpu" or os.environ.get("AMORGP_JIT", "1") == "0":
        _WARM.add(amortizer)
        return amortizer
    g = torch.Generator().manual_seed(0)
    X = torch.rand(8, 2, generator=g, dtype=torch.float64)
    y = torch.randn(8, generator=g, dtype=torch.float64)
    symbols = amortizer.vocabulary.symbols
    try:
        structure = amortizer.structure("SE" if "SE" in symbols else symbols[0], 2)
    except ValueError:  # a network that takes no such kernel: its fits prepare it themselves
        _WARM.add(amortizer)
        return amortizer
    for _ in range(3):  # eager, traced (profiling run), optimised
        params, noise, _ = amortizer.predict_parameters(X, y, [structure])
    if amortizer.calibrate:  # the calibration's one-off scan of the BLAS libraries
        from amorgp.amortizer.stages.calibrate import calibrate as calibrate_scale_noise

        calibrate_scale_noise(X, y, [structure], amortizer.vocabulary, params, noise, scale=False)
    _WARM.add(amortizer)
    return amortizer


def model_data(model: Any, train_X: Any = None, train_Y: Any = None) -> tuple[Tensor, Tensor]:
    """The data as the model's kernel sees it: ``(X (n, d), y (n,))`` float64.

    ``X`` passes through the model's input transform (e.g. ``Normalize``, fitted bounds
    kept), ``y`` through its outcome transform (e.g. ``Standardize``, fitted statistics
    kept); without ``train_X``/``train_Y`` the model's own training data are used
    (``train_targets`` are already transformed).

    Raises:
        OptionError: a multi-output or batched model.
    """
    if train_X is None:
        X = model.train_inputs[0]
    else:
        X = torch.as_tensor(train_X)
    tf = getattr(model, "input_transform", None)
    if tf is not None:
        was = tf.training
        tf.eval()
        with torch.no_grad():
            X = tf(X)
        tf.train(was)
    if train_Y is None:
        y = model.train_targets
    else:
        Y = torch.as_tensor(train_Y)
        Y = Y[:, None] if Y.ndim == 1 else Y
        otf = getattr(model, "outcome_transform", None)
        if otf is not None:
            was = otf.training
            otf.eval()
            with torch.no_grad():
                Y = otf(Y)[0]
            otf.train(was)
        y = Y
    y = y.reshape(y.shape[0], -1) if y.ndim > 1 else y[:, None]
    if X.ndim != 2 or y.shape[1] != 1:
        raise OptionError(
            f"initialize_gpytorch needs a single-output, non-batched model; got inputs "
            f"{tuple(X.shape)} and targets {tuple(y.shape)}"
        )
    return X.detach().to(torch.float64), y[:, 0].detach().to(torch.float64)


def initialize_gpytorch(
    model: Any,
    train_X: Any = None,
    train_Y: Any = None,
    *,
    amortizer: Amortizer | None = None,
    refine: int = 0,
    calibrate: bool | None = None,
) -> KernelResult:
    """Set ``model``'s kernel hyperparameters and noise from one forward pass.

    Reads ``model.covar_module`` as a dimension-wise structure (:func:`read_kernel`: RBF
    with or without ARD, periodic, linear (+ constant), their sums and products per
    column, ``ScaleKernel``), runs the amortizer on the data as the kernel sees them
    (:func:`model_data`: after ``Normalize``/``Standardize`` that is already the
    network's contract, min-max inputs and standardised targets), maps its
    hyperparameters to the model's units (exact for variances, lengthscales and
    periods; a LIN offset, which has no exact map, is taken in normalised units) and
    writes them, each clamped into its GPyTorch constraint.  Priors and the mean are
    left as they are.  Then ``fit_gpytorch_mll`` can run from there.

    A fixed-noise likelihood (BoTorch's ``SingleTaskGP(X, Y, train_Yvar=...)``:
    ``FixedNoiseGaussianLikelihood``) keeps its known noise: the noise is not a free
    hyperparameter, so the network's noise and the calibration (whose exact scale and
    noise assume one free homoskedastic noise) are not used and the kernel is written
    as the network predicts it.

    Args:
        model: a GPyTorch ``ExactGP`` (e.g. BoTorch's ``SingleTaskGP``) with a
            ``GaussianLikelihood`` or a ``FixedNoiseGaussianLikelihood`` (without
            additional learned noise).
        train_X, train_Y: the training data (default: the model's own).
        amortizer: the network (default: :func:`default_amortizer`).
        refine: L-BFGS steps of amorgp's Type-2 ML after the network.
        calibrate: set the kernel's global scale and the noise to their exact Type-2 ML
            values after the network (:mod:`amorgp.amortizer.stages.calibrate`); where the
            model cannot hold the scale (a kernel without ``ScaleKernel``, as BoTorch's
            default), the noise alone, exact for the kernel it holds.  ``None``: the
            amortizer's own setting (on for the bundled default).

    Returns:
        The amortizer's :class:`~amorgp.amortizer.KernelResult` (``calibrated`` whether
        the start was; where the noise alone was calibrated, the model holds that noise,
        not the result's).

    Raises:
        OptionError: a kernel outside the vocabulary, a multi-output model, or a
            likelihood other than these two.
    """
    amz = warm_up(amortizer if amortizer is not None else default_amortizer())
    return _initialize(model, train_X, train_Y, amz, refine, calibrate, full=True)


def _initialize(
    model: Any,
    train_X: Any,
    train_Y: Any,
    amz: Amortizer,
    refine: int,
    calibrate: bool | None,
    *,
    full: bool,
    noise_alone: bool = True,
) -> KernelResult:
    """:func:`initialize_gpytorch`; ``full=False`` (:class:`AmortizedFit`): where the
    amortizer's pipeline would add nothing to the start (no refinement, no periodic
    multi-start, no candidate networks) the network's prediction comes from
    :func:`_network_start`, which returns a result without the posterior the fit would
    discard.  ``noise_alone=False``: a model that cannot hold the calibrated scale keeps
    the network's noise (the caller searches it on the model's own objective)."""
    lik = getattr(model, "likelihood", None)
    fixed = fixed_noise(lik) is not None
    if not fixed and not (
        isinstance(lik, GaussianLikelihood)
        and isinstance(getattr(lik, "noise_covar", None), HomoskedasticNoise)
    ):
        raise OptionError(
            f"{type(lik).__name__}: the amortized start needs a GaussianLikelihood with a "
            "homoskedastic noise or a FixedNoiseGaussianLikelihood"
        )
    X, y = model_data(model, train_X, train_Y)
    kmap = read_kernel(model.covar_module, X.shape[1])
    calibrate = amz.calibrate if calibrate is None else calibrate
    lean = not full and refine == 0 and not amz.candidates
    if fixed:
        if lean:
            res = _network_start(amz, X, y, kmap.structure, scaled=False)
        else:
            res = amz.infer(
                X, y, kmap.structure, refine=refine, calibrate=False, evaluate_lml=False, starts=1
            )
        kmap.write(_model_units(res))
        return res
    # a tree that cannot hold a global scale (BoTorch's default RBF) gets the noise alone
    # calibrated, below, rather than a scale it would drop
    scaled = calibrate and kmap.holds_scale()
    # the null starts of the multi-start are left out here: the model's own start plays
    # their part (AmortizedFit scores it beside the network's); periodic kernels keep
    # their periodogram starts
    periodic = has_periodic(kmap.structure)
    if lean and not periodic:
        res = _network_start(amz, X, y, kmap.structure, scaled=scaled)
    else:
        res = amz.infer(
            X,
            y,
            kmap.structure,
            refine=refine,
            calibrate=scaled,
            evaluate_lml=False,
            starts=None if periodic else 1,
        )
    want = _model_units(res)
    kmap.write(want)
    noise = res.noise_original
    held = kmap.read()
    if calibrate and noise_alone and not (scaled and _holds(kmap.structure, held, want)):
        # the model does not hold the calibrated scale (no holder, clamped variances):
        # the noise alone, exact for the kernel the model holds
        from amorgp.amortizer.stages.calibrate import calibrate as calibrate_scale_noise

        cal = calibrate_scale_noise(
            X, y, [kmap.structure], amz.vocabulary, held[None], torch.tensor([noise]), scale=False
        )
        noise = float(cal.noise[0])
        res = replace(res, calibrated=True)
    _assign(model.likelihood.noise_covar, "noise", noise)
    return res


def _network_start(
    amz: Amortizer, X: Tensor, y: Tensor, structure: Any, *, scaled: bool
) -> KernelResult:
    """The result ``amz.infer(X, y, structure, calibrate=scaled, evaluate_lml=False,
    starts=1)`` returns (the same validation, warnings, normalisation, network forward and
    calibration, so the same hyperparameters and noise), without conditioning its
    posterior: the result holds no data (no likelihood, no predictions), which
    :class:`AmortizedFit` does not read.  For an amortizer without candidate networks."""
    from amorgp.amortizer.networks.structures import KernelBatch
    from amorgp.amortizer.stages import candidates, pipeline
    from amorgp.amortizer.stages.constraints import check_constraints

    t0 = time.perf_counter()
    norm, Xn, yn, parsed = amz.prepare(X, y, [structure], 0)
    structures = KernelBatch(parsed, amz.vocabulary, amz.device)
    cons = check_constraints(None, None, None, False)
    opts = candidates.FitOptions(
        steps=0,
        calibrate=scaled,
        starts=1,
        constraints=cons,
        kernel_constraints=cons.resolve(structures),
        groups=[],
        evaluate_lml=False,
    )
    # the pipeline's first stages on a batch of one (infer's), without its posterior
    batch = candidates.new_batch(amz, Xn[None], yn[None], structures)
    batch = pipeline.calibrate(amz, pipeline.predict(amz, batch, opts), opts)
    params, noise, n_enc, names = batch.params, batch.noise, batch.encoder_points, batch.network
    s = parsed[0]
    elapsed = time.perf_counter() - t0
    return KernelResult(
        kernel=s,
        params=params[0, : s.n_dims, : s.max_addends].detach().to("cpu", torch.float64),
        noise=float(noise[0]),
        normalizer=norm,
        n_points=int(Xn.shape[0]),
        time_s=elapsed,
        call_time_s=elapsed,
        encoder_points=n_enc,
        calibrated=scaled,
        network=names[0],
        noise_floor=cons.noise_floor,
    )


def _holds(structure: Any, held: Tensor, want: Tensor) -> bool:
    """Whether the model holds the kernel of ``want`` (``(D, L, P)``): every parameter as
    written, up to a per-dimension factor on the variances whose product over the
    dimensions is 1 (a root ``ScaleKernel`` holds the product of the dimensions' scales,
    which :meth:`~amorgp.gpytorch.kernels.KernelMap.read` books on one dimension:
    the same kernel)."""
    from amorgp.kernel_grammar import ParamKind, base_symbol

    log_total = 0.0
    for d, row in enumerate(structure.dims):
        factors = []
        for ell, name in enumerate(row):
            for i, p in enumerate(base_symbol(name).params):
                h, w = float(held[d, ell, i]), float(want[d, ell, i])
                if p.kind == ParamKind.VARIANCE and h > 0 and w > 0:
                    factors.append(math.log(h / w))
                elif not math.isclose(h, w, rel_tol=1e-6, abs_tol=0.0):
                    return False
        if factors and max(factors) - min(factors) > 1e-6:
            return False
        log_total += factors[0] if factors else 0.0
    return abs(log_total) <= 1e-6


def _model_units(res: KernelResult) -> Tensor:
    """``(D, L, P)`` parameters of ``res`` in original units (normalised where no exact
    map exists)."""
    out = res.params.detach().to("cpu", torch.float64).clone()
    s = res.kernel
    out = out[: s.n_dims, : s.max_addends]
    for h in res.table:
        if h.original is not None:
            names = [
                p
                for p in s.param_names()
                if (p.dim, p.addend, p.param) == (h.dim, h.addend, h.name)
            ]
            out[h.dim, h.addend, names[0].slot] = h.original
    return out


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
        self.abnormal_stops += res.status == 2
        trusted = objective.closed_form is not None and (
            type(mll.model).forward is SingleTaskGP.forward
        )
        return res.mll, trusted


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
