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
======================  ============================================================

Data are normalised by the contract of :mod:`amorgp.baselines.data` before
fitting; hyperparameters are reported in normalised units and predictions in
original units.  ``fit_many`` fits all kernels of one dataset in one padded
batch (Adam and SVGP: one batched optimisation; L-BFGS and ADVI: one pair at a
time), and reports each pair's time as the batch time divided by the number
of kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, Vocabulary
from torch import Tensor

from amorgp.baselines.bayesian import ADVISettings, fit_advi_gp, mixture_log_density, mixture_moments
from amorgp.baselines.data import Normalizer, as_dataset
from amorgp.baselines.gp import GPBatch, exact_predictive
from amorgp.baselines.svgp import SVGPSettings, fit_svgp_batch, svgp_predictive
from amorgp.baselines.type2ml import Type2MLSettings, fit_type2ml_batch

__all__ = ["METHODS", "Baseline", "FitResult", "Method", "fit", "fit_many"]

Method = Literal[
    "gp-ml",
    "gp-ml-multistart",
    "gp-ml-lbfgs",
    "map",
    "map-lbfgs",
    "svgp",
    "advi-meanfield",
    "advi-fullrank",
]
METHODS: tuple[str, ...] = get_args(Method)

Predictor = Callable[[Tensor, bool], tuple[Tensor, Tensor]]
LogPredictive = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class FitResult:
    """Hyperparameters of one kernel on one dataset, with its predictive.

    Attributes:
        method: the method name (see :data:`METHODS`).
        kernel: the fitted dimension-wise structure.
        hyperparameters: ``(dim, addend, name) -> value``, normalised units.
        noise: noise variance, normalised units.
        log_marginal_likelihood: exact log marginal likelihood of the normalised
            targets (Type-2 ML, MAP), or the ELBO (SVGP, ADVI) — see ``objective``.
        objective: ``"lml"``, ``"elbo"``.
        log_posterior: LML + log prior (MAP only, else NaN).
        time_s: wall-clock fitting time (batch time / batch size for batched fits).
        iterations: optimiser iterations.
        status: ``"converged"``, ``"max_iters"`` or ``"failed"``.
        normalizer: the data normalisation used.
    """

    method: str
    kernel: DimWiseStructure
    hyperparameters: dict[tuple[int, int, str], float]
    noise: float
    log_marginal_likelihood: float
    objective: str
    time_s: float
    iterations: int
    status: str
    normalizer: Normalizer
    log_posterior: float = math.nan
    _predictor: Predictor | None = field(default=None, repr=False, compare=False)
    _log_predictive: LogPredictive | None = field(default=None, repr=False, compare=False)

    def hyperparameters_original(self) -> dict[tuple[int, int, str], float | None]:
        """Hyperparameters in original units where the map is exact (else ``None``)."""
        return {
            k: self.normalizer.to_original(k[2], k[0], v) for k, v in self.hyperparameters.items()
        }

    def _x(self, X_new: Any) -> Tensor:
        X = torch.as_tensor(X_new, dtype=torch.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[1] != self.kernel.n_dims:
            raise ValueError(
                f"X_new must have shape (m, {self.kernel.n_dims}), got {tuple(X.shape)}"
            )
        if not torch.isfinite(X).all():
            raise ValueError("X_new contains NaN or infinite values")
        return self.normalizer.transform_x(X)

    def predict(self, X_new: Any, *, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """Predictive ``(mean (m,), variance (m,))`` at ``X_new (m, d)`` in original units.

        ``include_noise`` adds the observation noise (predictive of ``y``, not ``f``).

        Raises:
            ValueError: wrong shape, NaN/inf input, or a failed fit.
        """
        if self._predictor is None or self.status == "failed":
            raise ValueError(f"no predictive: the {self.method} fit of {self.kernel} failed")
        mean, var = self._predictor(self._x(X_new), include_noise)
        return self.normalizer.unnormalize_predictive(mean, var)

    def log_predictive_density(self, X_new: Any, y_new: Any) -> Tensor:
        """``(m,)`` log predictive density of ``y_new`` in original units (mixture for ADVI)."""
        Xn = self._x(X_new)
        y = torch.as_tensor(y_new, dtype=torch.float64).reshape(-1)
        if y.shape[0] != Xn.shape[0]:
            raise ValueError(f"y_new has {y.shape[0]} values for {Xn.shape[0]} inputs")
        yn = self.normalizer.transform_y(y)
        if self._log_predictive is not None:
            lp = self._log_predictive(Xn, yn)
        else:
            if self._predictor is None or self.status == "failed":
                raise ValueError(f"no predictive: the {self.method} fit of {self.kernel} failed")
            mean, var = self._predictor(Xn, True)
            lp = -0.5 * (math.log(2.0 * math.pi) + var.log() + (yn - mean) ** 2 / var)
        return lp + self.normalizer.log_density_offset()


def _structure(kernel: str | DimWiseStructure, d: int, vocab: Vocabulary) -> DimWiseStructure:
    if isinstance(kernel, DimWiseStructure):
        s = kernel
    elif isinstance(kernel, str):
        s = DimWiseStructure.parse(kernel, d)
    else:
        raise ValueError(f"a kernel is a string or a DimWiseStructure, got {type(kernel).__name__}")
    if s.n_dims != d:
        raise ValueError(f"kernel {s} has {s.n_dims} input dimensions but the data has {d}")
    s.check_vocabulary(vocab)
    return s


def _hyper(structure: DimWiseStructure, params: Tensor) -> dict[tuple[int, int, str], float]:
    return {(p.dim, p.addend, p.param): float(params[p.dim, p.addend, p.slot]) for p in structure.param_names()}


def _type2_settings(method: str, overrides: dict[str, Any]) -> Type2MLSettings:
    base: dict[str, Any] = {
        "gp-ml": {},
        "gp-ml-multistart": {"restarts": 10},
        "gp-ml-lbfgs": {"optimizer": "lbfgs"},
        "map": {"map": True},
        "map-lbfgs": {"map": True, "optimizer": "lbfgs"},
    }[method]
    return Type2MLSettings(**{**base, **overrides})


def fit_many(
    X: Any,
    y: Any,
    kernels: Sequence[str | DimWiseStructure],
    method: Method = "gp-ml",
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
        method: one of :data:`METHODS`.
        vocab: the symbol vocabulary.
        generator: random source (restarts, inducing points, ADVI); default a
            generator seeded with 0.
        normalize: apply the normalisation contract (else data are used as given).
        **options: fields of :class:`~amorgp.baselines.type2ml.Type2MLSettings`,
            :class:`~amorgp.baselines.svgp.SVGPSettings` or
            :class:`~amorgp.baselines.bayesian.ADVISettings` overriding the defaults.

    Returns:
        One :class:`FitResult` per kernel, in order.

    Raises:
        ValueError: invalid data, unknown method, or a kernel that does not parse or
            does not match the data's dimension.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    Xt, yt = as_dataset(X, y)
    if not kernels:
        raise ValueError("need at least one kernel")
    d = Xt.shape[1]
    structures = [_structure(k, d, vocab) for k in kernels]
    norm = Normalizer.fit(Xt, yt) if normalize else Normalizer.identity(d)
    Xn, yn = norm.transform_x(Xt), norm.transform_y(yt)
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    batch = GPBatch.from_pairs([(Xn, yn)] * len(structures), structures, vocab)
    B = len(structures)

    if method.startswith("advi"):
        family = "meanfield" if method == "advi-meanfield" else "fullrank"
        settings = ADVISettings(**{"family": family, **options})
        out = []
        for b in range(B):
            post = fit_advi_gp(batch.select(b), settings, generator=gen)
            n_pred = settings.n_predictive_samples

            def components(Xq: Tensor, noise: bool, post: Any = post) -> tuple[Tensor, Tensor]:
                g = torch.Generator().manual_seed(0)
                return post.predictive_components(Xq, n_pred, g, include_noise=noise)  # type: ignore[no-any-return]

            def predictor(Xq: Tensor, noise: bool, components: Any = components) -> tuple[Tensor, Tensor]:
                return mixture_moments(*components(Xq, noise))  # type: ignore[no-any-return]

            def log_pred(Xq: Tensor, yq: Tensor, components: Any = components) -> Tensor:
                return mixture_log_density(*components(Xq, True), yq)  # type: ignore[no-any-return]

            ok = post.result.status != "failed"
            out.append(
                FitResult(
                    method,
                    structures[b],
                    _hyper(structures[b], post.median_params),
                    post.median_noise,
                    post.result.elbo,
                    "elbo",
                    post.time_s,
                    post.result.iterations,
                    "failed" if not ok else ("converged" if post.result.converged else "max_iters"),
                    norm,
                    _predictor=predictor,
                    _log_predictive=log_pred,
                )
            )
        return out

    if method == "svgp":
        sfit = fit_svgp_batch(batch, SVGPSettings(**options), generator=gen)
        out = []
        for b in range(B):
            one = batch.select(b)

            def predictor(Xq: Tensor, noise: bool, b: int = b, one: GPBatch = one) -> tuple[Tensor, Tensor]:
                sub = _select_svgp(sfit, b)
                mean, var = svgp_predictive(sub, one, Xq[None], include_noise=noise)
                return mean[0], var[0]

            out.append(
                FitResult(
                    method,
                    structures[b],
                    _hyper(structures[b], sfit.params[b]),
                    float(sfit.noise[b]),
                    float(sfit.elbo[b]),
                    "elbo",
                    sfit.time_s / B,
                    int(sfit.iterations[b]),
                    sfit.status(b),
                    norm,
                    _predictor=predictor,
                )
            )
        return out

    settings2 = _type2_settings(method, options)
    tfit = fit_type2ml_batch(batch, settings2, generator=gen)
    out = []
    for b in range(B):
        one = batch.select(b)
        params_b, noise_b = tfit.params[b : b + 1], tfit.noise[b : b + 1]

        def predictor(
            Xq: Tensor, noise: bool, one: GPBatch = one, p: Tensor = params_b, s2: Tensor = noise_b
        ) -> tuple[Tensor, Tensor]:
            mean, var = exact_predictive(one, p, s2, Xq[None], include_noise=noise)
            return mean[0], var[0]

        out.append(
            FitResult(
                method,
                structures[b],
                _hyper(structures[b], tfit.params[b]),
                float(tfit.noise[b]),
                float(tfit.log_marginal_likelihood[b]),
                "lml",
                tfit.time_s / B,
                int(tfit.iterations[b]),
                tfit.status(b),
                norm,
                log_posterior=float(tfit.objective[b]) if settings2.map else math.nan,
                _predictor=predictor,
            )
        )
    return out


def _select_svgp(fit: Any, b: int) -> Any:
    from dataclasses import replace

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
    method: Method = "gp-ml",
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
    return fit_many(X, y, [kernel], method, vocab=vocab, generator=generator, normalize=normalize, **options)[0]


class Baseline:
    """A configured method that satisfies :class:`~amorgp.baselines.protocol.HyperparameterInference`.

    Args:
        method: one of :data:`METHODS`.
        vocab: the symbol vocabulary.
        seed: seed of the generator created for each call (deterministic results).
        **options: settings overrides (see :func:`fit_many`).
    """

    def __init__(
        self, method: Method = "gp-ml", *, vocab: Vocabulary = PAPER_VOCABULARY, seed: int = 0, **options: Any
    ):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        self.method: Method = method
        self.vocab = vocab
        self.seed = seed
        self.options = options

    def fit(self, X: Any, y: Any, kernel: str | DimWiseStructure) -> FitResult:
        return self.fit_many(X, y, [kernel])[0]

    def fit_many(self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]) -> list[FitResult]:
        gen = torch.Generator().manual_seed(self.seed)
        return fit_many(X, y, kernels, self.method, vocab=self.vocab, generator=gen, **self.options)

    def __repr__(self) -> str:
        return f"Baseline({self.method!r})"
