"""Kernel ensembles: many structures fitted by any inference method, averaged.

:class:`KernelEnsemble` consumes the inference protocol ("given a dataset and a list
of kernels, return one fit per kernel, each with hyperparameters, a log marginal
likelihood and a predictive"): the amortization network, every baseline, or a user's
own method.  With the amortizer the dataset is encoded once and every kernel decoded
in one batch (its ``fit_many``), so a 24-kernel ensemble costs little more than one kernel.

Example:
    >>> import torch
    >>> from amorgp.ensembles import KernelEnsemble
    >>> from amorgp.ensembles.testing import PriorMeanInference
    >>> X = torch.linspace(0, 1, 30)[:, None]
    >>> y = torch.sin(6 * X[:, 0])
    >>> ens = KernelEnsemble.fit(PriorMeanInference(), X, y, ["SE", "SE + PER", "LIN"])
    >>> mean, std = ens.predict(X[:5], return_std=True)
    >>> round(float(ens.weights.sum()), 6)
    1.0
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from amorgp.core.data import MIN_POINTS, Normalizer, as_dataset
from amorgp.core.errors import DataError, OptionError
from amorgp.core.fit import HyperparameterInference, KernelFit
from amorgp.core.warn import warn
from amorgp.ensembles.batched import batched_member_predictive
from amorgp.ensembles.mixture import GaussianMixture
from amorgp.ensembles.weights import bma_weights, stacking_weights, uniform_weights
from amorgp.kernel_grammar import DimWiseStructure, KernelSyntaxError, Vocabulary

__all__ = [
    "FitLike",
    "InferenceLike",
    "KernelEnsemble",
    "Weighting",
    "check_data",
    "check_inputs",
]


Weighting = Literal["bma", "uniform", "stacking"]


InferenceLike = HyperparameterInference
"""The inference protocol consumed here (:class:`amorgp.core.fit.HyperparameterInference`):
``fit_many(X, y, kernels)`` returns one fit per kernel, in order.  Besides the project's
:class:`~amorgp.core.fit.KernelFit` results (amortizer, baselines), any fit with
``kernel``, ``noise``, ``log_marginal_likelihood`` and ``predict(X_new) -> (mean, var)``
works."""

FitLike = KernelFit


def _label(kernel: Any) -> str:
    return str(kernel)


def check_data(X: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Validate training data as every fit would (float64, finite, at least three rows, a
    target that varies, ranges float64 can normalise), once, before any fit.

    Raises:
        DataError: see :func:`amorgp.core.data.as_dataset` and
            :meth:`amorgp.core.data.Normalizer.fit`.
    """
    Xt, yt = as_dataset(X, y, min_points=MIN_POINTS, training=True)
    with warnings.catch_warnings():  # constant columns: the fits warn about them themselves
        warnings.simplefilter("ignore", UserWarning)
        Normalizer.fit(Xt, yt)
    return Xt, yt


def check_inputs(
    inference: InferenceLike, X: Any, y: Any, kernels: str | DimWiseStructure | Sequence[Any]
) -> tuple[Tensor, Tensor, list[Any]]:
    """Validate the data and the kernels once, before any fit.

    A single kernel (text or structure) is one kernel, never iterated character by
    character.  The data are checked as every fit would check them (float64, finite,
    at least three rows, a target that varies, target and input ranges float64 can
    normalise), so that a bad input raises its typed error here instead of failing
    every member.

    Returns:
        ``(X (n, d), y (n,))`` as float64 tensors and the kernels as a list (the
        texts/structures given, in order).

    Raises:
        OptionError: no kernel, a kernel that is neither text nor a structure, or a
            symbol outside ``inference.vocabulary`` (where the method has one).
        DataError: invalid data (see :func:`amorgp.core.data.as_dataset` and
            :meth:`amorgp.core.data.Normalizer.fit`), or a kernel structure with a
            different number of input dimensions than ``X`` has columns.
        KernelSyntaxError: a kernel text that does not parse.
    """
    items = [kernels] if isinstance(kernels, str | DimWiseStructure) else list(kernels)
    if not items:
        raise OptionError("an ensemble needs at least one kernel")
    Xt, yt = check_data(X, y)
    vocabulary = getattr(inference, "vocabulary", None)
    if not isinstance(vocabulary, Vocabulary):
        vocabulary = None
    d = Xt.shape[1]
    for k in items:
        if not isinstance(k, str | DimWiseStructure):
            raise OptionError(
                f"a kernel is text or a DimWiseStructure, got {type(k).__name__} ({k!r})"
            )
        if isinstance(k, DimWiseStructure) and k.n_dims != d:
            raise DataError(f"kernel {k} has {k.n_dims} input dimension(s) but X has {d} column(s)")
        try:
            DimWiseStructure.coerce(k, d, vocabulary)
        except KernelSyntaxError:
            raise
        except ValueError as err:
            raise OptionError(f"kernel {_label(k)}: {err}") from None
    return Xt, yt, items


def _fit_members(
    inference: InferenceLike, X: Any, y: Any, kernels: Sequence[Any]
) -> list[Any | None]:
    """``fit_many`` on all kernels; if it raises, kernel by kernel (failures become None)."""
    try:
        fits: list[Any | None] = list(inference.fit_many(X, y, list(kernels)))
    except (ValueError, RuntimeError, ArithmeticError, torch.linalg.LinAlgError) as err:
        warn(
            f"fitting the {len(kernels)} kernels together failed ({err}); fitting one by one",
            RuntimeWarning,
        )
        fits = []
        for k in kernels:
            try:
                fits.append(inference.fit_many(X, y, [k])[0])
            except (ValueError, RuntimeError, ArithmeticError, torch.linalg.LinAlgError):
                fits.append(None)
    if len(fits) != len(kernels):
        raise ValueError(
            f"the inference method returned {len(fits)} fits for {len(kernels)} kernels"
        )
    return fits


def _lml(fit: Any | None) -> float:
    if fit is None or getattr(fit, "status", "ok") == "failed":
        return math.nan
    try:
        return float(fit.log_marginal_likelihood)
    except (ValueError, RuntimeError, ArithmeticError):
        return math.nan


def _log_normal(y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    return -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)


@dataclass
class KernelEnsemble:
    """An ensemble of fitted kernel structures with weights.

    Attributes:
        kernels: the member structures, in the order given.
        fits: one fit per kernel (``None`` where inference failed).
        weights: ``(M,)`` float64 member weights (0 for failed members).
        weighting: how the weights were formed.
        log_marginal_likelihoods: ``(M,)`` (NaN for failed members).
        time_s: wall-clock time of fitting (inference and weights).
    """

    kernels: tuple[DimWiseStructure | Any, ...]
    fits: tuple[Any | None, ...]
    weights: Tensor
    weighting: str
    log_marginal_likelihoods: Tensor
    time_s: float = 0.0
    X: Any = field(default=None, repr=False)
    y: Any = field(default=None, repr=False)

    @classmethod
    def fit(
        cls,
        inference: InferenceLike,
        X: Any,
        y: Any,
        kernels: str | DimWiseStructure | Sequence[str | DimWiseStructure],
        *,
        weighting: Weighting = "bma",
        validation: tuple[Any, Any] | None = None,
        validation_fraction: float = 0.2,
        generator: torch.Generator | None = None,
    ) -> KernelEnsemble:
        """Fit every kernel with ``inference`` and weight the members.

        Args:
            inference: anything with ``fit_many(X, y, kernels)`` (the inference protocol).
            X: ``(n, d)`` inputs; y: ``(n,)`` targets (original units).
            kernels: kernel texts or structures (at least one; a single text or
                structure is one kernel).
            weighting: ``"bma"`` (softmax of log marginal likelihoods), ``"uniform"`` or
                ``"stacking"`` (weights maximising the held-out log predictive density).
            validation: held-out ``(X_val, y_val)`` for stacking; default a random
                ``validation_fraction`` of the data (members are then refitted on all data).
            validation_fraction: share of the data held out for stacking.
            generator: random source of the stacking split.

        Raises:
            OptionError: no kernels, an unknown weighting, a kernel outside the method's
                vocabulary.
            DataError: data that no member could fit (see :func:`check_inputs`).
            KernelSyntaxError: a kernel text that does not parse.
            ValueError: every member failed.
        """
        if weighting not in ("bma", "uniform", "stacking"):
            raise OptionError(f"unknown weighting {weighting!r}; use bma, uniform or stacking")
        _, _, kernels = check_inputs(inference, X, y, kernels)
        start = time.perf_counter()
        labels = [_label(k) for k in kernels]
        fits = _fit_members(inference, X, y, kernels)
        lml = torch.tensor([_lml(f) for f in fits], dtype=torch.float64)
        if weighting == "bma":
            weights = bma_weights(lml, labels=labels)
        elif weighting == "uniform":
            weights = uniform_weights(torch.isfinite(lml), labels=labels)
        else:
            weights = _stacking(
                inference, X, y, kernels, labels, validation, validation_fraction, generator
            )
            weights = torch.where(torch.isfinite(lml), weights, torch.zeros_like(weights))
            if not bool((weights > 0).any()):
                raise ValueError("every ensemble member failed; no weights can be formed")
            weights = weights / weights.sum()
        return cls(
            tuple(f.kernel if f is not None else k for f, k in zip(fits, kernels, strict=True)),
            tuple(fits),
            weights,
            weighting,
            lml,
            time.perf_counter() - start,
            X,
            y,
        )

    @property
    def n_members(self) -> int:
        return len(self.fits)

    def predictive(self, X_new: Any) -> GaussianMixture:
        """The mixture predictive of targets at ``X_new (m, d)`` (original units).

        Members with zero weight are not evaluated.  When every member already holds the
        Cholesky factor of its posterior (``factored``: the amortizer's results after their
        likelihood was evaluated on the dense backend) each member's ``predict`` reuses it:
        no matrix is factored twice.  Otherwise, when the fits expose their normalised
        hyperparameters and normalisation (the amortizer's and the baselines' results
        do), all members are computed in one batch
        (:func:`~amorgp.ensembles.batched.batched_member_predictive`); else each member's
        ``predict`` is called.  A member whose prediction fails or is non-finite is
        dropped with a warning and the others renormalised.
        """
        live = [
            i
            for i, (f, w) in enumerate(zip(self.fits, self.weights.tolist(), strict=True))
            if w > 0 and f is not None
        ]
        factored = all(getattr(self.fits[i], "factored", False) for i in live)
        batched = None
        if self.X is not None and not factored:
            batched = batched_member_predictive([self.fits[i] for i in live], self.X, self.y, X_new)
        rows: list[tuple[Tensor, Tensor] | None]
        if batched is not None:
            rows = list(zip(batched[0], batched[1], strict=True))
        else:
            rows = [self._member_predict(i, X_new) for i in live]
        means, variances, keep = [], [], []
        for i, row in zip(live, rows, strict=True):
            if row is None:
                continue
            mean, var = row
            mean = torch.as_tensor(mean, dtype=torch.float64).reshape(-1)
            var = torch.as_tensor(var, dtype=torch.float64).reshape(-1)
            ok = torch.isfinite(mean).all() & torch.isfinite(var).all() & (var > 0).all()
            if not bool(ok):
                warn(
                    f"member {self.kernels[i]} gave a non-finite predictive; dropped",
                    RuntimeWarning,
                )
                continue
            means.append(mean)
            variances.append(var)
            keep.append(i)
        if not keep:
            raise ValueError("no ensemble member could predict")
        w = self.weights[keep]
        return GaussianMixture(w / w.sum(), torch.stack(means), torch.stack(variances))

    def _member_predict(self, i: int, X_new: Any) -> tuple[Tensor, Tensor] | None:
        fit = self.fits[i]
        if fit is None:
            return None
        try:
            mean, var = fit.predict(X_new)
        except (RuntimeError, ArithmeticError, torch.linalg.LinAlgError) as err:
            warn(f"member {self.kernels[i]} failed to predict: {err}", RuntimeWarning)
            return None
        return torch.as_tensor(mean), torch.as_tensor(var)

    def predict(self, X_new: Any, *, return_std: bool = False) -> Any:
        """Mixture mean (and standard deviation) at ``X_new``, original units.

        Like ``KernelResult.predict``: float64 CPU tensors for a tensor ``X_new``, float64
        numpy arrays for anything else (a numpy array, a list).
        """
        mix = self.predictive(X_new)
        moments = [mix.mean(), mix.variance().sqrt()] if return_std else [mix.mean()]
        out: list[Any] = moments
        if not isinstance(X_new, Tensor):
            out = [t.detach().to("cpu", torch.float64).numpy() for t in moments]
        return tuple(out) if return_std else out[0]

    def log_predictive_density(self, X_new: Any, y_new: Any) -> Tensor:
        """``(m,)`` log mixture density of ``y_new`` at ``X_new`` (original units)."""
        return self.predictive(X_new).log_prob(torch.as_tensor(y_new, dtype=torch.float64))

    def table(self) -> list[dict[str, Any]]:
        """One row per member: kernel text, weight, log marginal likelihood, noise, status."""
        rows = []
        for k, f, w, lml in zip(
            self.kernels,
            self.fits,
            self.weights.tolist(),
            self.log_marginal_likelihoods.tolist(),
            strict=True,
        ):
            rows.append(
                {
                    "kernel": str(k),
                    "weight": w,
                    "log_marginal_likelihood": lml if math.isfinite(lml) else None,
                    "noise": float(f.noise) if f is not None else None,
                    "status": "failed" if not math.isfinite(lml) else "ok",
                }
            )
        return rows


def _stacking(
    inference: InferenceLike,
    X: Any,
    y: Any,
    kernels: Sequence[Any],
    labels: list[str],
    validation: tuple[Any, Any] | None,
    fraction: float,
    generator: torch.Generator | None,
) -> Tensor:
    if validation is not None:
        X_fit, y_fit = X, y
        X_val, y_val = validation
    else:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got {fraction}")
        Xt = torch.as_tensor(X, dtype=torch.float64)
        yt = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
        n = yt.shape[0]
        n_val = max(1, round(fraction * n))
        if n - n_val < 3:
            raise ValueError(f"stacking needs more data: {n} points leave {n - n_val} to fit on")
        perm = torch.randperm(n, generator=generator)
        X_val, y_val = Xt[perm[:n_val]], yt[perm[:n_val]]
        X_fit, y_fit = Xt[perm[n_val:]], yt[perm[n_val:]]
    fits = _fit_members(inference, X_fit, y_fit, kernels)
    y_v = torch.as_tensor(y_val, dtype=torch.float64).reshape(-1)
    rows = []
    for fit in fits:
        if fit is None or not math.isfinite(_lml(fit)):
            rows.append(torch.full_like(y_v, math.nan))
            continue
        mean, var = fit.predict(X_val)
        rows.append(
            _log_normal(
                y_v,
                torch.as_tensor(mean, dtype=torch.float64).reshape(-1),
                torch.as_tensor(var, dtype=torch.float64).reshape(-1),
            )
        )
    return stacking_weights(torch.stack(rows), labels=labels)
