"""An sklearn-style regressor over the amortized GP: ``fit``, ``predict``, ``score``, ``sample_y``.

``AmortizedGPRegressor`` mirrors scikit-learn's ``GaussianProcessRegressor``:
``predict(return_std=..., return_cov=...)``, ``sample_y``, ``log_marginal_likelihood(theta,
eval_gradient)``, ``kernel_`` (a :class:`~amorgp.amortizer.frontends.fitted_kernel.FittedKernel` with
``to_sklearn()``), ``X_train_``, ``alpha_``, ``log_marginal_likelihood_value_``.

>>> import numpy as np
>>> from amorgp.amortizer import AmortizedGPRegressor
>>> X = np.linspace(0, 10, 40)[:, None]
>>> reg = AmortizedGPRegressor(kernel="SE + PER").fit(X, np.sin(X[:, 0]))
>>> mean, std = reg.predict(X[:3], return_std=True)
>>> mean.shape, bool((std > 0).all())
((3,), True)

scikit-learn is not needed at run time: with it installed the class derives
from ``BaseEstimator``/``RegressorMixin`` (tags, ``clone``, pipelines, html
repr); without it a minimal base provides ``get_params``/``set_params``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import torch

from amorgp.amortizer.frontends.fitted_kernel import FittedKernel
from amorgp.amortizer.frontends.inference import Amortizer
from amorgp.amortizer.frontends.io import MIN_POINTS
from amorgp.amortizer.frontends.options import check_seed
from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.constraints import DEFAULT_NOISE_FLOOR, Name, check_constraints
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.data import Normalizer, as_dataset, as_real
from amorgp.core.errors import DataError, OptionError
from amorgp.core.units import Unit
from amorgp.kernel_grammar import FLOORS, DimWiseStructure, base_symbol
from amorgp.lazy_kernels import MEMORY_BUDGET, DimWiseKernel, check_backend
from amorgp.lazy_kernels.block import check_memory_budget

logger = logging.getLogger(__name__)

__all__ = ["AmortizedGPRegressor"]


class _ParamsMixin:
    """``get_params``/``set_params`` by constructor signature (sklearn's convention)."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return sorted(p for p in sig.parameters if p != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> Any:
        valid = self._get_param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(
                    f"invalid parameter {key!r} for {type(self).__name__}; valid: {valid}"
                )
            setattr(self, key, value)
        return self

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Coefficient of determination ``R^2`` of ``predict(X)``."""
        y = np.asarray(y, dtype=np.float64)
        pred = self.predict(X)  # type: ignore[attr-defined]
        w = (
            np.ones_like(y)
            if sample_weight is None
            else np.asarray(sample_weight, dtype=np.float64)
        )
        ss_res = float((w * (y - pred) ** 2).sum())
        ss_tot = float((w * (y - np.average(y, weights=w)) ** 2).sum())
        return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)


try:  # sklearn integration when available (it is a test dependency only)
    from sklearn.base import BaseEstimator, RegressorMixin
    from sklearn.utils.validation import validate_data as _validate_data

    _Bases: tuple[type, ...] = (RegressorMixin, BaseEstimator)
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    _Bases = (_ParamsMixin,)
    _validate_data = None


class AmortizedGPRegressor(*_Bases):  # type: ignore[misc]
    """GP regression with amortized hyperparameters for a kernel structure.

    ``fit`` normalises the data, predicts the hyperparameters of ``kernel`` with
    the amortization network, refines them by Type-2 ML where they are not at an optimum
    (``refine``) and conditions the GP on all points; ``predict`` returns the
    predictive mean (and standard deviation of the targets, noise included) in
    the original units.

    Args:
        kernel: kernel expression; without ``@`` indices the same sum is used in
            every input dimension (``"SE + PER"``).
        refine: ``None`` (the default): Type-2 ML from the network's start until one more
            step is predicted to gain less than 0.01 nats, where the dense float64
            refinement applies (at most 2000 points), by L-BFGS rounds up to 5000 points,
            above on a seeded subset of 2000 points (``refine_status`` ``"subset"``), none
            in float32 (``"skipped"``); ``"auto"``: the same, and L-BFGS
            at any size within the dense limit; ``k``: at most ``k``
            iterations; ``0``: the network's answer alone (see
            :meth:`Amortizer.infer_many <amorgp.amortizer.frontends.inference.Amortizer.infer_many>`).
        calibrate: set the kernel's global scale and the noise to their exact Type-2 ML
            values after the network (the default; see :mod:`amorgp.amortizer.stages.calibrate`);
            ``False``: the network's prediction alone.
        starts: starts of a kernel with a periodic term (periodogram periods,
            harmonics...; :mod:`amorgp.amortizer.stages.multistart`); ``None``: 8 with
            ``calibrate``, 1 (the network's prediction) without.
        checkpoint: checkpoint directory; ``None`` for the bundled default.
        device: ``"cpu"``, ``"cuda"``; ``None`` picks CUDA when available.
        encoder_points: most points the dataset encoder reads (``None``: the
            checkpoint's training range).
        seed: seed of the encoder subset of large datasets.
        noise_floor: the smallest noise variance of the fit, in normalised units (the
            targets standardised, so ``noise_floor * y.var()`` in units of ``y^2``);
            ``None``: ``1e-6``.  Lower it (e.g. ``1e-10``, with ``refine="auto"``) for
            near-noiseless data; a fit that ends at the floor warns
            (:class:`~amorgp.amortizer.stages.constraints.NoiseFloorWarning`).
        fixed: ``{name: value}`` held fixed (scikit-learn's ``*_bounds="fixed"``), in the
            user's units (see *Constraints* below).
        bounds: ``{name: (low, high)}`` within which ``refine`` optimises (scikit-learn's
            ``*_bounds``; the start is clipped into them), same names and units.
        priors: ``True``: ``refine`` fits the MAP hyperparameters under the grammar's
            priors (normalised units) instead of Type-2 ML; needs ``refine``.
        backend: the GP solver: ``"auto"`` (the memory rule: dense Cholesky, dense CG,
            KeOps or block CG), ``"cholesky"``, ``"cg"``, ``"keops"``, ``"block"`` or
            ``"dense"`` (:func:`~amorgp.lazy_kernels.plan_solver`).
        memory_budget: bytes the dense GP backends may use (``None``: 4 GiB); beyond it
            ``"auto"`` turns to the lazy solvers.

        alpha: scikit-learn's noise added to the kernel's diagonal: ``None`` (the default:
            the noise variance is fitted, ``noise_floor`` below it) or a number, a lower
            bound of the fitted noise variance in normalised units (it raises
            ``noise_floor``; scikit-learn's fitted ``WhiteKernel`` plus ``alpha`` is at
            least ``alpha`` too).  An array, per-point noise, is refused with an
            :class:`~amorgp.core.errors.OptionError` at ``fit`` (hold a known noise with
            ``fixed={"noise": v}``, in units of ``y^2``).

    Constraints (``fixed``, ``bounds``) take scikit-learn's semantics: values in the
    units of the data, converted exactly to the normalised units the model works in
    (each input column min-max scaled to ``[0, 1]``, ``y`` standardised; the inverse of
    the map of ``result_.hyperparameters_original``):

    * lengthscales and periods in the units of their input column (divided by its
      range ``max - min`` internally); ``PER``'s lengthscale is unit-free;
    * the variances of column 0 in units of ``y^2`` (divided by ``y.var()``, the
      population variance); the variances of other columns are unit-free factors of the
      product (unchanged), as in ``result_.hyperparameters_original``;
    * ``"noise"`` in units of ``y^2``;
    * a ``LIN`` factor's variance and offset have no exact original-unit form: refused
      (constrain them in normalised units with ``Amortizer.infer``).

    Names: every name the estimator prints is accepted back: the keys of
    ``hyperparameters_`` and ``hyperparameters_original_`` (``"d0.0.SE.lengthscale"``,
    ``"noise"``), ``kernel_.hyperparameter_names`` (``"noise_level"`` is the noise; a
    ``weight`` of a multi-column ``kernel_`` is relative to another variance and is
    refused), the command line's ``"0.0.lengthscale"``, the result's
    ``"d0.0.lengthscale"`` and the tuples ``(0, 0, "lengthscale")`` of
    ``result_.hyperparameters``.  ``kernel_.bounds`` shows the bounds (a fixed value:
    ``(v, v)``) in ``kernel_``'s units: lengthscales and periods as given, variances and
    the noise level of the standardised targets (the given ones divided by ``y.var()``);
    an entry of a multi-column ``kernel_`` that folds several variances keeps the default
    bounds.  An unknown name, a bad value or one below its kind's floor (converted to
    the user's units in the message) is a one-line
    :class:`~amorgp.core.errors.OptionError`.

    Not supported, refused with a one-line error at ``fit``: ``sample_weight`` other
    than ``None`` or a constant (a constant weight changes nothing: the noise is
    fitted; repeat points to weight them); a ``y`` of several columns (multi-output:
    fit one estimator per column, e.g. ``sklearn.multioutput.MultiOutputRegressor``);
    per-point noise (an ``alpha`` array).  A ``y`` of two distinct values warns: GP regression
    treats it as continuous (use a classifier for class labels).

    Attributes (after ``fit``):
        result_: the :class:`~amorgp.amortizer.stages.results.KernelResult`.
        hyperparameters_: ``"d<dim>.<addend>.<symbol>.<name>" -> value`` in
            normalised units, plus ``"noise"`` (see ``result_.table`` for original units).
        hyperparameters_original_: the same names in the user's units, those of
            ``fixed`` and ``bounds`` (``None`` where no exact value exists).
        log_marginal_likelihood_: log marginal likelihood of the training targets
            in original units.
        log_marginal_likelihood_value_: the same (scikit-learn's name).
        kernel_: the fitted kernel and noise as a :class:`~amorgp.amortizer.frontends.fitted_kernel.FittedKernel`
            (scikit-learn's ``normalize_y=True`` units; ``kernel_.to_sklearn()``).
        X_train_: ``(n, d)`` training inputs (float64 copy).
        alpha_: ``(n,)`` ``(K + sigma^2 I)^{-1} y~`` for the standardised targets ``y~``
            (scikit-learn's ``alpha_`` with ``normalize_y=True``).
        n_features_in_: number of input columns.

    scikit-learn parity: ``GaussianProcessRegressor(kernel=reg.kernel_.to_sklearn(),
    normalize_y=True, optimizer=None, alpha=0)`` fitted on the same data gives the same
    ``predict`` (mean, ``return_std``, ``return_cov``), ``alpha_`` and, up to the constant
    ``n log std(y)`` (scikit-learn reports it for the standardised targets), the same log
    marginal likelihood.
    """

    def __init__(
        self,
        kernel: str = "SE",
        *,
        refine: int | Literal["auto"] | None = None,
        calibrate: bool = True,
        starts: int | None = None,
        checkpoint: str | None = None,
        device: str | None = None,
        encoder_points: int | None = None,
        seed: int = 0,
        noise_floor: float | None = None,
        fixed: dict[Any, float] | None = None,
        bounds: dict[Any, tuple[float, float]] | None = None,
        backend: str = "auto",
        memory_budget: float | None = None,
        priors: bool = False,
        alpha: Any = None,
    ) -> None:
        self.kernel = kernel
        self.refine = refine
        self.calibrate = calibrate
        self.starts = starts
        self.checkpoint = checkpoint
        self.device = device
        self.encoder_points = encoder_points
        self.seed = seed
        self.noise_floor = noise_floor
        self.fixed = fixed
        self.bounds = bounds
        self.backend = backend
        self.memory_budget = memory_budget
        self.priors = priors
        self.alpha = alpha

    def _amortizer(self) -> Amortizer:
        budget = MEMORY_BUDGET if self.memory_budget is None else self.memory_budget
        return _load(
            self.checkpoint,
            self.device,
            self.encoder_points,
            check_seed(self.seed),
            check_backend(self.backend),
            float(check_memory_budget(budget)),
        )

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> AmortizedGPRegressor:
        """Predict the hyperparameters of ``kernel`` for ``X (n, d)``, ``y (n,)``.

        Args:
            X: ``(n, d)`` inputs.
            y: ``(n,)`` targets (a single column; a binary ``y`` warns).
            sample_weight: ``None``, or a constant (which changes nothing); anything else
                is refused.

        Raises:
            ValueError: invalid data (see :func:`~amorgp.core.data.as_dataset`), a ``y``
                of several columns, or a kernel that does not parse or match the data's
                dimension.
            OptionError: bad ``fixed``/``bounds`` (see *Constraints*), an ``alpha`` or a
                non-constant ``sample_weight``.
        """
        noise_floor = _noise_floor(self.noise_floor, self.alpha)
        _check_multi_output(y)
        if _validate_data is not None:  # sklearn's messages and conversions when available
            X, y = _validate_data(self, X, y, ensure_min_samples=MIN_POINTS, y_numeric=True)
        Xa, ya = as_dataset(_as_2d(X), _host(y), min_points=MIN_POINTS, training=True)
        _check_sample_weight(sample_weight, Xa.shape[0])
        amz = self._amortizer()
        fixed, bounds = self._constraints(amz, Xa, ya, noise_floor)
        result = amz.infer(
            Xa,
            ya,
            self.kernel,
            refine=self.refine,
            calibrate=self.calibrate,
            starts=self.starts,
            noise_floor=noise_floor,
            fixed=fixed,
            bounds=bounds,
            priors=self.priors,
        )
        self.result_: KernelResult = result
        self.n_features_in_ = Xa.shape[1]
        self.X_train_: np.ndarray = Xa.numpy().copy()
        limits: dict[Any, tuple[float, float]] = {n: (v, v) for n, v in result.fixed.items()}
        limits.update(result.bounds)
        self.kernel_ = FittedKernel(
            result.kernel, result.params, result.noise, result.normalizer, limits
        )
        hyper = {f"d{h.dim}.{h.addend}.{h.symbol}.{h.name}": h.value for h in result.table}
        self.hyperparameters_: dict[str, float] = {**hyper, "noise": result.noise}
        original = {f"d{h.dim}.{h.addend}.{h.symbol}.{h.name}": h.original for h in result.table}
        self.hyperparameters_original_: dict[str, float | None] = {
            **original,
            "noise": result.noise_original,
        }
        logger.info(
            "fitted %s on n = %d, d = %d: log marginal likelihood %.6g (original units), %.3f s",
            result.kernel_text,
            Xa.shape[0],
            Xa.shape[1],
            result.log_marginal_likelihood_original,
            result.call_time_s,
        )
        return self

    def _constraints(
        self, amz: Amortizer, X: torch.Tensor, y: torch.Tensor, noise_floor: Any
    ) -> tuple[dict[Name, float] | None, dict[Name, tuple[float, float]] | None]:
        """``fixed`` and ``bounds`` in normalised units, from the user's names and units
        (see *Constraints* in the class docstring)."""
        if not self.fixed and not self.bounds:
            return self.fixed, self.bounds
        for option, mapping in (("fixed", self.fixed), ("bounds", self.bounds)):
            if mapping is not None and not isinstance(mapping, Mapping):
                raise OptionError(f"{option} must be a mapping of names to values, got {mapping!r}")
        structure = amz.structure(self.kernel, X.shape[1])
        fixed = {_name(k, "fixed", structure): v for k, v in (self.fixed or {}).items()}
        bounds = {_name(k, "bounds", structure): v for k, v in (self.bounds or {}).items()}
        given = check_constraints(fixed, bounds, noise_floor)  # values checked
        with warnings.catch_warnings():  # the fit warns about the data itself
            warnings.simplefilter("ignore")
            norm = Normalizer.fit(X, y)
        units = {(pn.dim, pn.addend, pn.param): (pn, u) for pn, u in _units(structure)}
        floor = given.noise_floor
        out_fixed = {
            n: _to_normalised(n, v, "fixed", units, norm, floor) for n, v in given.fixed.items()
        }
        out_bounds = {
            n: (
                _to_normalised(n, lo, "bounds", units, norm, floor),
                _to_normalised(n, hi, "bounds", units, norm, floor),
            )
            for n, (lo, hi) in given.bounds.items()
        }
        return out_fixed, out_bounds

    @property
    def log_marginal_likelihood_(self) -> float:
        """Log marginal likelihood of the training targets in original units.

        Computed on first access above the dense limit (see :class:`KernelResult`).
        """
        if "result_" not in self.__dict__:
            raise AttributeError("log_marginal_likelihood_ is available after fit")
        return self.result_.log_marginal_likelihood_original

    @property
    def log_marginal_likelihood_value_(self) -> float:
        """scikit-learn's name of :attr:`log_marginal_likelihood_` (original units: add
        ``n log std(y)`` to compare with scikit-learn's ``normalize_y=True`` value)."""
        if "result_" not in self.__dict__:
            raise AttributeError("log_marginal_likelihood_value_ is available after fit")
        return self.log_marginal_likelihood_

    @property
    def alpha_(self) -> np.ndarray:
        """``(n,)`` ``(K + sigma^2 I)^{-1} y~`` for the standardised targets ``y~``."""
        if "result_" not in self.__dict__:
            raise AttributeError("alpha_ is available after fit")
        with torch.inference_mode():
            alpha = self.result_.posterior.alpha()
        return alpha.detach().to("cpu", torch.float64).numpy().copy()

    def _inputs(self, X: Any) -> torch.Tensor:
        if not hasattr(self, "result_"):
            _not_fitted(self)
        if _validate_data is not None:
            X = _validate_data(self, X, reset=False)
        Xa, _ = as_dataset(_as_2d(X))
        if Xa.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {Xa.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )
        return Xa

    def predict(self, X: Any, return_std: bool = False, return_cov: bool = False) -> Any:
        """Predictive mean ``(m,)`` at ``X (m, d)``; with ``return_std`` also the std of ``y``,
        with ``return_cov`` the ``(m, m)`` covariance of ``y`` (noise on the diagonal), as
        scikit-learn's ``GaussianProcessRegressor.predict`` with a ``WhiteKernel``.

        Raises:
            ValueError: ``fit`` was not called, or ``X`` is invalid / has the wrong width.
            RuntimeError: both ``return_std`` and ``return_cov`` (scikit-learn's rule).
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        Xa = self._inputs(X)
        mean, var = self.result_.predict(Xa, include_noise=True)
        m = mean.numpy()
        if return_cov:
            return m, self._covariance(Xa)
        return (m, np.sqrt(var.numpy())) if return_std else m

    def _covariance(self, Xa: torch.Tensor) -> np.ndarray:
        """``(m, m)`` predictive covariance of ``y`` at validated inputs, original units."""
        res = self.result_
        Xn = res.normalizer.transform_x(Xa)
        post = res.posterior
        with torch.inference_mode():
            cov = post.covariance(Xn.to(device=post.X.device, dtype=post.X.dtype))
            cov = cov.to("cpu", torch.float64)
        cov = cov + res.noise * torch.eye(cov.shape[0], dtype=torch.float64)
        return (cov * res.normalizer.y_std**2).numpy()

    def sample_y(self, X: Any, n_samples: int = 1, random_state: Any = 0) -> np.ndarray:
        """Joint draws of ``y`` at ``X (m, d)`` from the predictive, ``(m, n_samples)``.

        As scikit-learn's ``GaussianProcessRegressor.sample_y``: ``random_state`` is an int,
        a ``numpy.random.RandomState`` or ``None`` (draws by
        ``RandomState.multivariate_normal`` of ``predict(X, return_cov=True)``, the same
        numbers scikit-learn draws for the same mean and covariance); a ``torch.Generator``
        draws ``mean + Q sqrt(max(lambda, 0)) e`` from the covariance's eigendecomposition
        with ``e`` from the generator.

        Raises:
            ValueError: ``n_samples`` is not a positive integer, or invalid ``X``.
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)):
            raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
        if n_samples < 1:
            raise ValueError(f"n_samples must be a positive integer, got {n_samples}")
        mean, cov = self.predict(X, return_cov=True)
        if isinstance(random_state, torch.Generator):
            evals, Q = torch.linalg.eigh(torch.from_numpy(cov))
            root = Q * evals.clamp_min(0).sqrt()
            e = torch.randn(
                mean.shape[0], int(n_samples), generator=random_state, dtype=torch.float64
            )
            return mean[:, None] + (root @ e).numpy()
        rng = _check_random_state(random_state)
        return rng.multivariate_normal(mean, cov, int(n_samples)).T

    def log_marginal_likelihood(
        self, theta: Any = None, eval_gradient: bool = False, clone_kernel: bool = True
    ) -> Any:
        """Log marginal likelihood of the training targets (original units) at ``theta``.

        Args:
            theta: log-space hyperparameters in the order of ``kernel_.theta`` (the kernel's
                parameters, then the noise level); ``None``: the fitted value
                :attr:`log_marginal_likelihood_value_`.
            eval_gradient: also return the gradient with respect to ``theta`` (autograd).
            clone_kernel: accepted for scikit-learn compatibility (nothing is modified).

        The likelihood is evaluated densely (Cholesky of ``n x n``, float64) for a given
        ``theta``.

        Returns:
            the value, or ``(value, gradient (len(theta),))`` with ``eval_gradient``.

        Raises:
            ValueError: not fitted, ``theta`` of the wrong length or not finite, or
                ``eval_gradient`` without ``theta`` (scikit-learn's rule).
        """
        if not hasattr(self, "result_"):
            _not_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        th = as_real(theta, "theta").reshape(-1).clone()
        if th.shape[0] != self.kernel_.theta.shape[0] or not bool(torch.isfinite(th).all()):
            raise ValueError(
                f"theta must hold {self.kernel_.theta.shape[0]} finite log-space values "
                f"(order of kernel_.theta: {', '.join(self.kernel_.hyperparameter_names)})"
            )
        with torch.inference_mode(False), torch.enable_grad():
            th.requires_grad_(eval_gradient)
            value = _dense_lml(self.result_, self.kernel_, th)
            if not eval_gradient:
                return float(value)
            (grad,) = torch.autograd.grad(value, th)
        return float(value.detach()), grad.numpy()


def _dense_lml(res: KernelResult, kernel: FittedKernel, theta: torch.Tensor) -> torch.Tensor:
    """``log p(y | theta)`` in original units by a dense float64 Cholesky (differentiable)."""
    post = res.posterior
    X = post.X.detach().to("cpu", torch.float64)
    y = post.y.detach().to("cpu", torch.float64)
    params, noise = kernel.params_from_theta(theta)
    n = y.shape[0]
    K = DimWiseKernel(res.kernel, params)(X) + noise * torch.eye(n, dtype=torch.float64)
    _, _, value, ok = exact_solve(K, y)
    if not bool(ok):
        return torch.tensor(-math.inf, dtype=torch.float64) + 0.0 * theta.sum()
    return value + res.normalizer.lml_offset(n)


def _check_random_state(seed: Any) -> np.random.RandomState:
    try:
        from sklearn.utils import check_random_state
    except ImportError:  # pragma: no cover - without scikit-learn
        if isinstance(seed, np.random.RandomState):
            return seed
        return np.random.RandomState(seed)
    return check_random_state(seed)


def _is_index(text: str) -> bool:
    """Whether ``text`` is a dimension or addend index: ASCII digits, at most six
    (``str.isdigit`` alone accepts superscripts and other scripts' digits)."""
    return text.isascii() and text.isdigit() and len(text) <= 6


_NAME_FORMS = (
    "'noise' (or 'noise_level'), a printed name 'd<dim>.<addend>.<symbol>.<name>' (keys of "
    "hyperparameters_, e.g. 'd0.0.SE.lengthscale'), 'DIM.ADDEND.NAME' (e.g. "
    "'0.0.lengthscale') or (dim, addend, name)"
)


def _name(key: Any, option: str, structure: DimWiseStructure) -> Name:
    """A ``fixed``/``bounds`` key in any of the printed forms as ``(dim, addend, name)`` or
    ``"noise"``, checked against ``structure``.

    Raises:
        OptionError: not a name, a symbol that is not the one at that place, a folded
            ``weight`` or a hyperparameter the structure does not have.
    """
    symbol = None
    if isinstance(key, str):
        text = key.strip()
        if text in ("noise", "noise_level"):
            return "noise"
        parts = text.split(".")
        if parts[0][:1] == "d":
            parts[0] = parts[0][1:]
        if not (len(parts) in (3, 4) and _is_index(parts[0]) and _is_index(parts[1]) and parts[-1]):
            raise OptionError(f"{option} key {key!r} is not a hyperparameter name: {_NAME_FORMS}")
        name: tuple[int, int, str] = (int(parts[0]), int(parts[1]), parts[-1])
        symbol = parts[2] if len(parts) == 4 else None
    elif (
        isinstance(key, tuple)
        and len(key) == 3
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in key[:2])
        and isinstance(key[2], str)
    ):
        name = (int(key[0]), int(key[1]), key[2])
    else:
        raise OptionError(f"{option} key {key!r} is not a hyperparameter name: {_NAME_FORMS}")
    dim, addend, param = name
    here = (
        structure.dims[dim][addend]
        if dim < len(structure.dims) and addend < len(structure.dims[dim])
        else None
    )
    if param == "weight":
        raise OptionError(
            f"{option} key {key!r} is a weight of kernel_, relative to its column's first "
            f"variance; constrain the variance itself, 'd{dim}.{addend}.{here}.variance' as "
            "in hyperparameters_"
        )
    if here is None or param not in base_symbol(here).param_names:
        known = ", ".join(
            f"'d{pn.dim}.{pn.addend}.{pn.symbol}.{pn.param}'" for pn in structure.param_names()
        )
        raise OptionError(
            f"{option} names {key!r}, not a hyperparameter of {structure}; known: 'noise', {known}"
        )
    if symbol is not None and symbol != here:
        raise OptionError(
            f"{option} key {key!r}: addend {addend} of column {dim} is {here}, not {symbol}"
        )
    return name


def _units(structure: DimWiseStructure) -> list[tuple[Any, Unit]]:
    return list(zip(structure.param_names(), structure.param_units(), strict=True))


def _to_normalised(
    name: Name,
    value: float,
    option: str,
    units: dict[tuple[int, int, str], tuple[Any, Unit]],
    norm: Normalizer,
    noise_floor: float,
) -> float:
    """One constraint value from the user's units to normalised ones (the inverse of
    :meth:`~amorgp.core.data.Normalizer.to_original`), checked against its floor.

    Raises:
        OptionError: a parameter without an exact original-unit form (``LIN``), a
            lengthscale of a constant column, or a value below its kind's floor.
    """
    var_y = norm.y_std * norm.y_std
    if name == "noise":
        factor, floor = var_y, noise_floor
        what = "the noise"
    else:
        assert isinstance(name, tuple)
        pn, unit = units[name]
        floor = FLOORS[base_symbol(pn.symbol).params[pn.slot].kind]
        what = f"d{pn.dim}.{pn.addend}.{pn.symbol}.{pn.param}"
        if unit is Unit.INPUT:
            factor = float(norm.x_range[pn.dim])
            if factor <= 0:
                raise OptionError(
                    f"{option}[{what!r}]: input column {pn.dim + 1} is constant, so its "
                    "lengths have no value in its units; drop the column or the constraint"
                )
        elif unit is Unit.FREE:
            factor = 1.0
        elif unit is Unit.VARIANCE:
            factor = var_y if pn.dim == 0 else 1.0
        else:
            raise OptionError(
                f"{option}[{what!r}]: {pn.symbol}'s {pn.param} has no exact value in the data's "
                "units (an affine input map changes its form); constrain it in normalised "
                "units with Amortizer.infer"
            )
    out = float(value) / factor
    if not math.isfinite(out) or out <= 0.0:
        raise OptionError(
            f"{option}[{what!r}] = {value:g} is not representable in normalised units "
            f"(divided by {factor:g})"
        )
    if out < floor:
        raise OptionError(
            f"{option}[{what!r}] = {value:g} is below the floor {floor * factor:g} in the "
            f"data's units ({floor:g} normalised"
            + ("; lower noise_floor too)" if name == "noise" else ")")
        )
    return out


def _noise_floor(noise_floor: Any, alpha: Any) -> Any:
    """``noise_floor`` with scikit-learn's ``alpha``: ``None`` leaves it, a number raises
    it to ``alpha`` (normalised units), an array (per-point noise) is refused."""
    if alpha is None:
        return noise_floor
    if np.ndim(alpha) != 0 or isinstance(alpha, bool):
        raise OptionError(
            "alpha as an array (per-point noise) is not supported: the noise variance is "
            "fitted, one value for every point; pass a number or None (fixed={'noise': v} "
            "holds a known noise, units of y^2)"
        )
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise OptionError(f"alpha must be a number or None, got {alpha!r}") from None
    base = DEFAULT_NOISE_FLOOR if noise_floor is None else noise_floor
    return a if isinstance(base, numbers.Real) and a > base else base


def _check_multi_output(y: Any) -> None:
    shape = getattr(y, "shape", None)
    if shape is None:
        try:
            shape = np.asarray(y).shape
        except (TypeError, ValueError):  # ragged or odd input: left to the validation
            return
    if len(shape) == 2 and shape[1] > 1:
        raise DataError(
            f"y has {shape[1]} columns: multi-output regression is not supported; fit one "
            "estimator per column (e.g. sklearn.multioutput.MultiOutputRegressor)"
        )


def _check_sample_weight(sample_weight: Any, n: int) -> None:
    """Accept ``None`` or a constant positive weight (it changes nothing: the noise is
    fitted); refuse anything else."""
    if sample_weight is None:
        return
    try:
        w = np.asarray(_host(sample_weight), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise OptionError(f"sample_weight must be numeric: {err}") from None
    w = np.broadcast_to(w, (n,)) if w.ndim == 0 else w
    if w.shape != (n,):
        raise OptionError(f"sample_weight has shape {w.shape}, expected ({n},) for {n} samples")
    if not np.isfinite(w).all() or (w <= 0).any():
        raise OptionError(
            "sample_weight must hold positive finite weights (zero or negative weights are refused)"
        )
    if not (w == w[0]).all():
        raise OptionError(
            "sample_weight is not supported: the GP is unweighted (a constant weight changes "
            "nothing); pass sample_weight=None, or repeat points to weight them"
        )


@functools.lru_cache(maxsize=8)
def _load(
    checkpoint: str | None,
    device: str | None,
    encoder_points: int | None,
    seed: int,
    backend: Any = "auto",
    memory_budget: float = MEMORY_BUDGET,
) -> Amortizer:
    """Load and verify the weights once per configuration (estimators are cloned often)."""
    return Amortizer.from_pretrained(
        checkpoint,
        device=device,
        encoder_points=encoder_points,
        seed=seed,
        backend=backend,
        memory_budget=memory_budget,
    )


def _as_2d(X: Any) -> np.ndarray:
    try:
        arr = np.asarray(_host(X), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"X must be numeric: {err}") from None
    if arr.ndim != 2:
        raise ValueError(
            f"Expected 2D array, got {arr.ndim}D array instead: reshape your data "
            "(X.reshape(-1, 1) for a single feature)"
        )
    return arr


def _host(a: Any) -> Any:
    """A tensor as a host numpy array (anything else unchanged, for :func:`as_dataset`)."""
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a


def _not_fitted(est: Any) -> None:
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:  # pragma: no cover
        raise ValueError(f"this {type(est).__name__} is not fitted yet; call fit first") from None
    raise NotFittedError(f"This {type(est).__name__} instance is not fitted yet. Call 'fit' first.")
