"""Initialise GPyTorch/BoTorch models in place from the amortized start: the network's
hyperparameters written to the model's kernel and likelihood (:func:`initialize_gpytorch`),
the bundled amortizer and its prepared forward (:func:`default_amortizer`, :func:`warm_up`)."""

from __future__ import annotations

import functools
import math
import os
import time
import weakref
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.frontends.inference import Amortizer
from amorgp.amortizer.stages.multistart import has_periodic
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.errors import OptionError
from amorgp.gpytorch.kernels import _assign, read_kernel
from amorgp.gpytorch.lean import fixed_noise
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.likelihoods.noise_models import HomoskedasticNoise

__all__ = [
    "default_amortizer",
    "initialize_gpytorch",
    "model_data",
    "warm_up",
]


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
