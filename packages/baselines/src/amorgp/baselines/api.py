"""One interface for every baseline: ``fit``, ``fit_many`` and :class:`Baseline`.

======================  ============================================================
method                  what runs
======================  ============================================================
``gp-ml``               Type-2 ML, Adam lr 0.1, <= 150 steps, paper initialisation
``gp-ml-multistart``    ``gp-ml`` with 10 starts (paper start + 9 prior draws)
``gp-ml-lbfgs``         Type-2 ML, L-BFGS with strong-Wolfe line search, per pair
``map``                 ``gp-ml`` plus the log prior of the parameter specs
``map-lbfgs``           ``gp-ml-lbfgs`` plus the log prior
``svgp``                SVGP, I = n/2 k-means inducing points, Adam lr 0.03, <= 500 steps
``advi-meanfield``      ADVI posterior over the hyperparameters, mean-field family
``advi-fullrank``       ADVI, full-rank family
``diwp``                deep inverse Wishart process (a kernel names its Gram kernel)
======================  ============================================================

Each name is a :class:`BaselineMethod` (its ``name``, ``fit_many`` and ``result_type``)
in a registry: :func:`get_method` looks one up, :func:`register_method` adds one.
Data are normalised by the contract of :mod:`amorgp.baselines.data` before
fitting; hyperparameters are reported in normalised units and predictions in
original units.  ``fit_many`` fits all kernels of one dataset in one padded
batch (Adam and SVGP: one batched optimisation; L-BFGS and ADVI: one pair at a
time), and reports each pair's time as the batch time divided by the number
of kernels.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from amorgp.baselines.bayesian import (
    ADVISettings,
    GPPosterior,
    fit_advi_gp,
    mixture_log_density,
    mixture_moments,
)
from amorgp.baselines.diwp.fit import diwp_results
from amorgp.baselines.gp import exact_posterior, exact_predictive
from amorgp.baselines.results import FitResult, LogPredictive, Predictor
from amorgp.baselines.svgp import SVGPFit, SVGPSettings, fit_svgp_batch, svgp_predictive
from amorgp.baselines.type2ml import BatchFit, Type2MLSettings, fit_type2ml_batch
from amorgp.core.data import MIN_POINTS, Normalizer, as_dataset
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, Vocabulary
from amorgp.lazy_kernels import PaddedBatch

__all__ = [
    "METHODS",
    "Baseline",
    "BaselineMethod",
    "FitResult",
    "Method",
    "fit",
    "fit_many",
    "get_method",
    "register_method",
]

Method = Literal[
    "gp-ml",
    "gp-ml-multistart",
    "gp-ml-lbfgs",
    "map",
    "map-lbfgs",
    "svgp",
    "advi-meanfield",
    "advi-fullrank",
    "diwp",
]


@dataclass(frozen=True)
class _FitData:
    """What :meth:`BaselineMethod.fit_many` hands to a method's ``_fit``: the shared
    ``FitResult`` fields, the normalised data, their padded batch of ``(dataset, kernel)``
    pairs, the structures and the random source."""

    common: dict[str, Any]
    Xn: Tensor
    yn: Tensor
    batch: PaddedBatch
    structures: list[DimWiseStructure]
    gen: torch.Generator


class BaselineMethod:
    """One method of the registry: its :attr:`name`, the :attr:`result_type` of its fits and
    :meth:`fit_many`.

    :meth:`fit_many` validates and normalises the data, builds the padded batch of
    ``(dataset, kernel)`` pairs and hands them to :meth:`_fit`, which each method
    implements.  Methods are looked up by name (:func:`get_method`); a new one is
    added with :func:`register_method`.

    Args:
        name: the string users pass as ``method=``.
        description: one line saying what runs.
    """

    result_type: type[FitResult] = FitResult
    """The type of the results :meth:`fit_many` returns."""

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.description = description

    def fit_many(
        self,
        X: Any,
        y: Any,
        kernels: Sequence[str | DimWiseStructure],
        *,
        vocab: Vocabulary = PAPER_VOCABULARY,
        generator: torch.Generator | None = None,
        normalize: bool = True,
        **options: Any,
    ) -> list[FitResult]:
        """Fit several kernels to one dataset (arguments as :func:`fit_many`)."""
        t0 = time.perf_counter()
        Xt, yt = as_dataset(X, y, min_points=MIN_POINTS, training=True)
        if not kernels:
            raise OptionError("need at least one kernel")
        d = Xt.shape[1]
        structures = [DimWiseStructure.coerce(k, d, vocab) for k in kernels]
        norm = Normalizer.fit(Xt, yt) if normalize else Normalizer.identity(d)
        Xn, yn = norm.transform_x(Xt), norm.transform_y(yt)
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        batch = PaddedBatch.from_datasets([(Xn, yn)] * len(structures), structures, vocab)
        common: dict[str, Any] = {
            "method": self.name,
            "normalizer": norm,
            "n_points": Xt.shape[0],
            "call_time_s": math.nan,
        }
        results = self._fit(_FitData(common, Xn, yn, batch, structures, gen), options)
        elapsed = time.perf_counter() - t0
        return [replace(r, call_time_s=elapsed) for r in results]

    def _fit(self, data: _FitData, options: dict[str, Any]) -> list[FitResult]:
        """One result per structure of ``data`` (the normalised data and the shared fields)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _fit")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Type2MLMethod(BaselineMethod):
    """Type-2 ML or MAP (:func:`~amorgp.baselines.type2ml.fit_type2ml_batch`) with preset
    :class:`~amorgp.baselines.type2ml.Type2MLSettings` fields (options override them)."""

    def __init__(self, name: str, description: str, **preset: Any) -> None:
        super().__init__(name, description)
        self.preset = preset

    def settings(self, options: dict[str, Any]) -> Type2MLSettings:
        """The preset overridden by ``options``."""
        return Type2MLSettings(**{**self.preset, **options})

    def _fit(self, data: _FitData, options: dict[str, Any]) -> list[FitResult]:
        return _type2_results(data, self.settings(options))


class SVGPMethod(BaselineMethod):
    """SVGP (:func:`~amorgp.baselines.svgp.fit_svgp_batch`), options: ``SVGPSettings``."""

    def _fit(self, data: _FitData, options: dict[str, Any]) -> list[FitResult]:
        return _svgp_results(data, SVGPSettings(**options))


class ADVIMethod(BaselineMethod):
    """ADVI over the hyperparameters (:func:`~amorgp.baselines.bayesian.fit_advi_gp`) with
    one variational family; options: ``ADVISettings``."""

    def __init__(self, name: str, description: str, family: str) -> None:
        super().__init__(name, description)
        self.family = family

    def _fit(self, data: _FitData, options: dict[str, Any]) -> list[FitResult]:
        settings = ADVISettings(**{"family": self.family, **options})
        return _advi_results(data, settings)


class DIWPMethod(BaselineMethod):
    """Deep inverse Wishart process (:mod:`amorgp.baselines.diwp`); options: ``DIWPSettings``
    (``quick=True``: its quick configuration)."""

    def _fit(self, data: _FitData, options: dict[str, Any]) -> list[FitResult]:
        return diwp_results(data.common, data.Xn, data.yn, data.structures, options, data.gen)


_REGISTRY: dict[str, BaselineMethod] = {}


def register_method(method: BaselineMethod) -> BaselineMethod:
    """Add ``method`` to the registry under its name (returned, for use as a decorator-like
    call).

    Raises:
        OptionError: a method of that name is already registered.
    """
    if method.name in _REGISTRY:
        raise OptionError(f"a baseline method named {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def get_method(method: str | BaselineMethod) -> BaselineMethod:
    """The registered method called ``method`` (a :class:`BaselineMethod` is returned as is).

    Raises:
        OptionError: no method of that name.
    """
    if isinstance(method, BaselineMethod):
        return method
    try:
        return _REGISTRY[method]
    except (KeyError, TypeError):
        known = ", ".join(_REGISTRY)
        raise OptionError(f"unknown method {method!r}; choose one of {known}") from None


for _m in (
    Type2MLMethod("gp-ml", "Type-2 ML, Adam lr 0.1, <= 150 steps, paper initialisation"),
    Type2MLMethod("gp-ml-multistart", "gp-ml with 10 starts", restarts=10),
    Type2MLMethod(
        "gp-ml-lbfgs", "Type-2 ML, L-BFGS with strong-Wolfe line search", optimizer="lbfgs"
    ),
    Type2MLMethod("map", "gp-ml plus the log prior", map=True),
    Type2MLMethod("map-lbfgs", "gp-ml-lbfgs plus the log prior", map=True, optimizer="lbfgs"),
    SVGPMethod("svgp", "SVGP, n/2 k-means inducing points, Adam lr 0.03, <= 500 steps"),
    ADVIMethod("advi-meanfield", "ADVI, mean-field family", "meanfield"),
    ADVIMethod("advi-fullrank", "ADVI, full-rank family", "fullrank"),
    DIWPMethod("diwp", "deep inverse Wishart process"),
):
    register_method(_m)
del _m

METHODS: tuple[str, ...] = get_args(Method)
"""The names of the built-in methods (the registry's, in order)."""


def _type2_settings(method: str, overrides: dict[str, Any]) -> Type2MLSettings:
    m = get_method(method)
    if not isinstance(m, Type2MLMethod):
        raise OptionError(f"{method!r} is not a Type-2 ML method")
    return m.settings(overrides)


def fit_many(
    X: Any,
    y: Any,
    kernels: Sequence[str | DimWiseStructure],
    method: Method | BaselineMethod = "gp-ml",
    *,
    vocab: Vocabulary = PAPER_VOCABULARY,
    generator: torch.Generator | None = None,
    normalize: bool = True,
    **options: Any,
) -> list[FitResult]:
    """Fit several kernels to one dataset.

    Args:
        X: ``(n, d)`` inputs (a 1-D array is ``n`` points in one dimension).
        y: ``(n,)`` targets.
        kernels: kernel expressions (``"SE + PER"`` applies to every dimension) or
            :class:`~amorgp.kernel_grammar.DimWiseStructure`.
        method: one of :data:`METHODS` (or a :class:`BaselineMethod`), looked up by
            :func:`get_method`.
        vocab: the symbol vocabulary.
        generator: random source (restarts, inducing points, ADVI); default a
            generator seeded with 0.
        normalize: apply the normalisation contract (else data are used as given).
        **options: fields of :class:`~amorgp.baselines.type2ml.Type2MLSettings`,
            :class:`~amorgp.baselines.svgp.SVGPSettings`,
            :class:`~amorgp.baselines.bayesian.ADVISettings` or
            :class:`~amorgp.baselines.diwp.DIWPSettings` (``quick=True``: its quick
            configuration) overriding the defaults.

    Returns:
        One :class:`FitResult` per kernel, in order.

    Raises:
        ValueError: invalid data, unknown method, or a kernel that does not parse or
            does not match the data's dimension.
    """
    return get_method(method).fit_many(
        X, y, kernels, vocab=vocab, generator=generator, normalize=normalize, **options
    )


def _cpu(params: Tensor) -> Tensor:
    return params.detach().to("cpu", torch.float64)


def _advi_predictors(post: GPPosterior, n_pred: int) -> tuple[Predictor, LogPredictive]:
    def components(Xq: Tensor, noise: bool) -> tuple[Tensor, Tensor]:
        g = torch.Generator().manual_seed(0)  # same draws for every call
        return post.predictive_components(Xq, n_pred, g, include_noise=noise)

    def predictor(Xq: Tensor, noise: bool) -> tuple[Tensor, Tensor]:
        return mixture_moments(*components(Xq, noise))

    def log_pred(Xq: Tensor, yq: Tensor) -> Tensor:
        mean, var = components(Xq, True)
        return mixture_log_density(mean, var, yq)

    return predictor, log_pred


def _advi_results(data: _FitData, settings: ADVISettings) -> list[FitResult]:
    out = []
    for b, structure in enumerate(data.structures):
        post = fit_advi_gp(data.batch.select(b), settings, generator=data.gen)
        predictor, log_pred = _advi_predictors(post, settings.n_predictive_samples)
        res = post.result
        status = res.status if res.status in ("failed", "max_iters") else "converged"
        out.append(
            FitResult(
                **data.common,
                kernel=structure,
                params=_cpu(post.median_params),
                noise=float(post.median_noise),
                objective="elbo",
                objective_value=float(res.elbo),
                time_s=post.time_s,
                iterations=int(res.iterations),
                status=status,
                _predictor=predictor,
                _log_predictive=log_pred,
            )
        )
    return out


def _svgp_predictor(fit: SVGPFit, one: PaddedBatch) -> Predictor:
    def predictor(Xq: Tensor, noise: bool) -> tuple[Tensor, Tensor]:
        mean, var = svgp_predictive(fit, one, Xq[None], include_noise=noise)
        return mean[0], var[0]

    return predictor


def _svgp_results(data: _FitData, settings: SVGPSettings) -> list[FitResult]:
    sfit = fit_svgp_batch(data.batch, settings, generator=data.gen)
    return _batch_results(
        data,
        sfit,
        "elbo",
        sfit.elbo,
        lambda b: _svgp_predictor(_select_svgp(sfit, b), data.batch.select(b)),
    )


def _exact_predictor(one: PaddedBatch, params: Tensor, noise: Tensor) -> Predictor:
    """Predictions from one exact posterior, factored on the first call and then held."""
    held: list[Any] = []  # the DensePosterior, once built

    def predictor(Xq: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        if not held:
            held.append(exact_posterior(one, params.detach(), noise.detach()))
        mean, var = exact_predictive(
            one, params, noise, Xq[None], include_noise=include_noise, posterior=held[0]
        )
        return mean[0], var[0]

    return predictor


def _type2_results(data: _FitData, settings: Type2MLSettings) -> list[FitResult]:
    tfit = fit_type2ml_batch(data.batch, settings, generator=data.gen)
    return _batch_results(
        data,
        tfit,
        "lml",
        tfit.log_marginal_likelihood,
        lambda b: _exact_predictor(
            data.batch.select(b), tfit.params[b : b + 1], tfit.noise[b : b + 1]
        ),
        log_posterior=tfit.objective if settings.map else None,
    )


def _batch_results(
    data: _FitData,
    fit: SVGPFit | BatchFit,
    objective: str,
    values: Tensor,
    predictor: Callable[[int], Predictor],
    log_posterior: Tensor | None = None,
) -> list[FitResult]:
    """One result per structure of a batched fit, each with its ``objective`` value
    ``values[b]``, its predictor ``predictor(b)`` and an even share of the batch time."""
    B = len(data.structures)
    return [
        FitResult(
            **data.common,
            kernel=structure,
            params=_cpu(fit.params[b]),
            noise=float(fit.noise[b]),
            objective=objective,
            objective_value=float(values[b]),
            time_s=fit.time_s / B,
            iterations=int(fit.iterations[b]),
            status=fit.status(b),
            log_posterior=math.nan if log_posterior is None else float(log_posterior[b]),
            _predictor=predictor(b),
        )
        for b, structure in enumerate(data.structures)
    ]


def _select_svgp(fit: SVGPFit, b: int) -> SVGPFit:
    sl = slice(b, b + 1)
    return replace(
        fit,
        params=fit.params[sl],
        noise=fit.noise[sl],
        Z=fit.Z[sl],
        z_mask=fit.z_mask[sl],
        m=fit.m[sl],
        S=fit.S[sl],
        elbo=fit.elbo[sl],
        iterations=fit.iterations[sl],
        converged=fit.converged[sl],
        failed=fit.failed[sl],
    )


def fit(
    X: Any,
    y: Any,
    kernel: str | DimWiseStructure,
    method: Method | BaselineMethod = "gp-ml",
    *,
    vocab: Vocabulary = PAPER_VOCABULARY,
    generator: torch.Generator | None = None,
    normalize: bool = True,
    **options: Any,
) -> FitResult:
    """Fit one kernel to one dataset (see :func:`fit_many` for the arguments).

    Example:
        >>> import torch
        >>> from amorgp.baselines import fit
        >>> X = torch.linspace(0, 1, 30)[:, None]
        >>> y = torch.sin(6 * X[:, 0])
        >>> result = fit(X, y, "SE", method="gp-ml")
        >>> mean, var = result.predict(X)
    """
    return fit_many(
        X, y, [kernel], method, vocab=vocab, generator=generator, normalize=normalize, **options
    )[0]


class Baseline:
    """A configured method that satisfies :class:`~amorgp.baselines.protocol.HyperparameterInference`.

    Args:
        method: one of :data:`METHODS` (or a :class:`BaselineMethod`).
        vocab: the symbol vocabulary.
        seed: seed of the generator created for each call (deterministic results).
        **options: settings overrides (see :func:`fit_many`).
    """

    def __init__(
        self,
        method: Method | BaselineMethod = "gp-ml",
        *,
        vocab: Vocabulary = PAPER_VOCABULARY,
        seed: int = 0,
        **options: Any,
    ):
        self.registered = get_method(method)
        """The :class:`BaselineMethod` that runs."""
        self.method: str = self.registered.name
        self.vocab = vocab
        self.seed = seed
        self.options = options

    def fit(self, X: Any, y: Any, kernel: str | DimWiseStructure) -> FitResult:
        return self.fit_many(X, y, [kernel])[0]

    def fit_many(
        self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]
    ) -> list[FitResult]:
        gen = torch.Generator().manual_seed(self.seed)
        return self.registered.fit_many(
            X, y, kernels, vocab=self.vocab, generator=gen, **self.options
        )

    def __repr__(self) -> str:
        return f"Baseline({self.method!r})"
