"""Training and prediction of a deep inverse Wishart process, and its place among the baselines.

:func:`fit_diwp` validates and normalises the data (the contract of
:class:`~amorgp.core.data.Normalizer`), picks ``P_i`` random training points as the
initial inducing inputs (their targets as the initial pseudo-data, with precisions
``n / (P_i sigma^2)``), and maximises the
ELBO with Adam (``lr`` for ``iterations - late_iterations`` steps, then ``lr_late``).
The predictive is the equal-weight mixture of the ``S = test_samples`` Gaussians
``N(mu_s(x), var_s(x) + sigma^2)``, one per joint sample of the inducing block: its mean
and variance (:meth:`DIWPFit.predict`) and its log density by log-sum-exp
(:meth:`DIWPFit.log_predictive_density`), in original units.  Prediction draws from a
generator seeded with 0 on every call (the same answer each time).

**Kernel structures** (``fit_many(X, y, kernels, method="diwp")``): a DIWP is a
deep-kernel model, not a kernel-structure method, so a kernel names the Gram-matrix
kernel of every DIWP layer: ``SE`` or ``MAT52`` in every dimension, one addend
(``MAT52`` needs a vocabulary that holds it, e.g. ``EXTENDED_VOCABULARY``); anything else
is refused with an :class:`~amorgp.core.errors.OptionError`.  The structure's reported
hyperparameters are the DIWP's ARD input lengthscales (the lengthscales of its first
kernel) and, for dimension 0, the top kernel's variance (other dimensions' variances
are 1); ``log_marginal_likelihood`` is the final ELBO (``objective="elbo"``), estimated
with ``test_samples`` samples.  Status: ``"max_iters"`` (the fixed schedule ran), or
``"failed"`` when the final ELBO is not finite.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from amorgp.baselines.bayesian import mixture_log_density, mixture_moments
from amorgp.baselines.diwp.model import DIWP, DIWPSettings
from amorgp.baselines.results import FitResult
from amorgp.core.data import Normalizer, as_dataset, as_inputs
from amorgp.core.errors import DataError, OptionError
from amorgp.kernel_grammar import DimWiseStructure, base_symbol

__all__ = ["DIWPFit", "diwp_kernel", "diwp_results", "fit_diwp", "fit_diwp_normalized"]

_STRUCTURE_KERNELS = ("SE", "MAT52")


@dataclass(frozen=True, eq=False)
class DIWPFit:
    """A trained DIWP with its data normalisation.

    Attributes:
        model: the trained :class:`~amorgp.baselines.diwp.DIWP` (normalised units).
        normalizer: the data normalisation.
        settings: the settings used.
        elbo: final ELBO of the normalised targets (``test_samples`` samples).
        trace: ``(iterations,)`` the ELBO estimate of each training step.
        n_points: training points.
        skipped: steps skipped because the ELBO estimate or its gradient was not finite
            or a factorisation failed (no parameter update; counted, never hidden).
        time_s: training time in seconds.
    """

    model: DIWP
    normalizer: Normalizer
    settings: DIWPSettings
    elbo: float
    trace: Tensor = field(repr=False)
    n_points: int
    skipped: int
    time_s: float

    @property
    def status(self) -> str:
        return "max_iters" if math.isfinite(self.elbo) else "failed"

    def components(self, Xn: Tensor, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """Mixture components ``(mean, var)``, each ``(S, m)``, at normalised ``Xn``."""
        gen = torch.Generator().manual_seed(0)  # the same draws on every call
        return self.model.predictive_components(
            Xn, self.settings.test_samples, gen, include_noise=include_noise
        )

    def _x(self, X_new: Any) -> Tensor:
        Xq = as_inputs(X_new, name="X_new", n_dims=self.normalizer.n_dims)
        return self.normalizer.transform_x(Xq)

    def predict(self, X_new: Any, *, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """Mean and variance ``(m,)`` of the predictive mixture at ``X_new (m, d)``, original units.

        Raises:
            DataError: wrong number of columns, NaN or infinite inputs.
        """
        mean, var = mixture_moments(*self.components(self._x(X_new), include_noise))
        return self.normalizer.unnormalize_predictive(mean, var)

    def log_predictive_density(self, X_new: Any, y_new: Any) -> Tensor:
        """``(m,)`` log density of ``y_new`` under the predictive mixture, original units."""
        Xn = self._x(X_new)
        y = torch.as_tensor(y_new, dtype=torch.float64).reshape(-1)
        if y.shape[0] != Xn.shape[0]:
            raise DataError(f"y_new has {y.shape[0]} values for {Xn.shape[0]} inputs")
        lp = mixture_log_density(*self.components(Xn), self.normalizer.transform_y(y))
        return lp + self.normalizer.log_density_offset()


def fit_diwp_normalized(
    Xn: Tensor,
    yn: Tensor,
    settings: DIWPSettings,
    generator: torch.Generator,
    normalizer: Normalizer | None = None,
) -> DIWPFit:
    """Train a DIWP on already normalised data (see :func:`fit_diwp`).

    Raises:
        DataError: fewer training points than inducing points.
    """
    s = settings
    n = Xn.shape[0]
    if n < s.n_inducing:
        raise DataError(
            f"need at least {s.n_inducing} training points for {s.n_inducing} inducing "
            f"points, got {n}; lower n_inducing"
        )
    t0 = time.perf_counter()
    idx = torch.randperm(n, generator=generator)[: s.n_inducing]
    model = DIWP(Xn[idx], yn[idx], s, n_data=n)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=s.lr)
    trace = torch.full((s.iterations,), math.nan, dtype=torch.float64)
    skipped = 0
    for it in range(s.iterations):
        if it == s.iterations - s.late_iterations:
            for group in opt.param_groups:
                group["lr"] = s.lr_late
        Xb, yb = Xn, yn
        if s.batch_size is not None and s.batch_size < n:
            rows = torch.randperm(n, generator=generator)[: s.batch_size]
            Xb, yb = Xn[rows], yn[rows]
        value = _step(model, opt, params, Xb, yb, s.train_samples, generator, n)
        if value is None:
            skipped += 1
        trace[it] = math.nan if value is None else value
    final = _evaluate(model, Xn, yn, s.test_samples, generator)
    return DIWPFit(
        model=model,
        normalizer=normalizer or Normalizer.identity(Xn.shape[1]),
        settings=s,
        elbo=final,
        trace=trace,
        n_points=n,
        skipped=skipped,
        time_s=time.perf_counter() - t0,
    )


def _step(
    model: DIWP,
    opt: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    X: Tensor,
    y: Tensor,
    n_samples: int,
    generator: torch.Generator,
    n_total: int,
) -> float | None:
    """One Adam step on ``-ELBO / n``; ``None`` (no step) when the estimate or its gradient is
    not finite or a factorisation failed (the inverse Wishart's Cholesky raises)."""
    opt.zero_grad()
    try:
        elbo = model.elbo(X, y, n_samples, generator, n_total=n_total)
    except ValueError:  # a scale matrix that is not positive definite or not finite
        return None
    if not torch.isfinite(elbo):
        return None
    (-elbo / n_total).backward()
    if not all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in params):
        return None
    opt.step()
    return float(elbo.detach())


@torch.no_grad()
def _evaluate(model: DIWP, X: Tensor, y: Tensor, n_samples: int, gen: torch.Generator) -> float:
    """The ELBO estimate with ``n_samples`` samples (NaN if a factorisation fails)."""
    try:
        return float(model.elbo(X, y, n_samples, gen))
    except ValueError:
        return math.nan


def fit_diwp(
    X: Any,
    y: Any,
    settings: DIWPSettings | None = None,
    *,
    generator: torch.Generator | None = None,
    normalize: bool = True,
) -> DIWPFit:
    """Train a DIWP on ``X (n, d)``, ``y (n,)`` (module docstring).

    Args:
        X, y: the training data (validated; a 1-D ``X`` is one dimension).
        settings: defaults: the paper's setting (:class:`DIWPSettings`).
        generator: every random draw (default: seeded with 0).
        normalize: apply the normalisation contract (else data are used as given).

    Raises:
        DataError: invalid data (NaN, shapes, constant targets) or fewer points than
            inducing points.
    """
    s = settings or DIWPSettings()
    Xt, yt = as_dataset(X, y, training=True, min_points=2)
    norm = Normalizer.fit(Xt, yt) if normalize else Normalizer.identity(Xt.shape[1])
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    return fit_diwp_normalized(norm.transform_x(Xt), norm.transform_y(yt), s, gen, norm)


def diwp_kernel(structure: DimWiseStructure) -> str:
    """The Gram-matrix kernel a kernel structure names for a DIWP (module docstring).

    Raises:
        OptionError: a structure other than one ``SE`` or ``MAT52`` addend in every dimension.
    """
    names = {tuple(dim) for dim in structure.dims}
    only = next(iter(names))
    if len(names) == 1 and len(only) == 1 and only[0] in _STRUCTURE_KERNELS:
        return only[0]
    raise OptionError(
        "diwp: a kernel names the Gram-matrix kernel of every DIWP layer and must be one "
        f"of {', '.join(_STRUCTURE_KERNELS)} in every dimension (one addend); got {structure}"
    )


def _structure_params(structure: DimWiseStructure, fit: DIWPFit) -> Tensor:
    ls = fit.model.input_lengthscales.detach()
    var = float(fit.model.variance.detach())
    n_slots = len(base_symbol(structure.dims[0][0]).params)
    params = torch.ones(structure.n_dims, 1, n_slots, dtype=torch.float64)
    for pn in structure.param_names():
        kind = base_symbol(pn.symbol).params[pn.slot].kind.value
        if kind == "lengthscale":
            params[pn.dim, 0, pn.slot] = ls[pn.dim]
        elif kind == "variance" and pn.dim == 0:
            params[pn.dim, 0, pn.slot] = var
    return params


def diwp_results(
    common: dict[str, Any],
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    options: dict[str, Any],
    generator: torch.Generator,
) -> list[FitResult]:
    """One DIWP per kernel structure as baselines' ``FitResult`` (``method="diwp"``).

    ``options`` are :class:`DIWPSettings` fields, plus ``quick=True`` for
    :meth:`DIWPSettings.quick`; ``common`` holds the shared ``FitResult`` fields.
    """
    opts = dict(options)
    quick = bool(opts.pop("quick", False))
    kernels = [diwp_kernel(s) for s in structures]
    out = []
    for structure, name in zip(structures, kernels, strict=True):
        settings = (
            DIWPSettings.quick(**opts, kernel=name)
            if quick
            else DIWPSettings(**{**opts, "kernel": name})
        )
        fit = fit_diwp_normalized(Xn, yn, settings, generator, common["normalizer"])

        def predictor(Xq: Tensor, noise: bool, fit: DIWPFit = fit) -> tuple[Tensor, Tensor]:
            return mixture_moments(*fit.components(Xq, noise))

        def log_pred(Xq: Tensor, yq: Tensor, fit: DIWPFit = fit) -> Tensor:
            return mixture_log_density(*fit.components(Xq), yq)

        out.append(
            FitResult(
                **common,
                kernel=structure,
                params=_structure_params(structure, fit),
                noise=float(fit.model.noise.detach()),
                objective="elbo",
                objective_value=fit.elbo,
                time_s=fit.time_s,
                iterations=settings.iterations,
                status=fit.status,
                _predictor=predictor,
                _log_predictive=log_pred,
            )
        )
    return out
