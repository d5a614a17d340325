"""An sklearn-style regressor over the amortized GP: ``fit``, ``predict``, ``score``, ``sample_y``.

``AmortizedGPRegressor`` mirrors scikit-learn's ``GaussianProcessRegressor``:
``predict(return_std=..., return_cov=...)``, ``sample_y``, ``log_marginal_likelihood(theta,
eval_gradient)``, ``kernel_`` (a :class:`~amorgp.amortizer.fitted_kernel.FittedKernel` with
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
from typing import Any, Literal

import numpy as np
import torch

from amorgp.amortizer.fitted_kernel import FittedKernel
from amorgp.amortizer.inference import Amortizer
from amorgp.amortizer.io import MIN_POINTS
from amorgp.amortizer.options import check_seed
from amorgp.amortizer.results import KernelResult
from amorgp.core.data import as_dataset, as_real
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
    the amortization network (optionally refined by ``refine`` L-BFGS steps of
    Type-2 ML) and conditions the GP on all points; ``predict`` returns the
    predictive mean (and standard deviation of the targets, noise included) in
    the original units.

    Args:
        kernel: kernel expression; without ``@`` indices the same sum is used in
            every input dimension (``"SE + PER"``).
        refine: most L-BFGS iterations of Type-2 ML after the network (0 = none), or
            ``"auto"``: until the log marginal likelihood stops improving.
        calibrate: set the kernel's global scale and the noise to their exact Type-2 ML
            values after the network (the default; see :mod:`amorgp.amortizer.calibrate`);
            ``False``: the network's prediction alone.
        starts: starts of a kernel with a periodic term (periodogram periods,
            harmonics...; :mod:`amorgp.amortizer.multistart`); ``None``: 8 with
            ``calibrate``, 1 (the network's prediction) without.
        checkpoint: checkpoint directory; ``None`` for the bundled default.
        device: ``"cpu"``, ``"cuda"``; ``None`` picks CUDA when available.
        encoder_points: most points the dataset encoder reads (``None``: the
            checkpoint's training range).
        seed: seed of the encoder subset of large datasets.
        noise_floor: the smallest noise variance of the fit, in normalised units (the
            targets standardised); ``None``: ``1e-6``.  Lower it (e.g. ``1e-10``, with
            ``refine="auto"``) for near-noiseless data; a fit that ends at the floor warns
            (:class:`~amorgp.amortizer.constraints.NoiseFloorWarning`).
        fixed: ``{name: value}`` held fixed, names as ``result_.hyperparameters``
            (``(dim, addend, name)``) or ``"noise"``, normalised units (scikit-learn's
            ``*_bounds="fixed"``).
        bounds: ``{name: (low, high)}`` within which ``refine`` optimises (scikit-learn's
            ``*_bounds``), same names and units.
        priors: ``True``: ``refine`` fits the MAP hyperparameters under the grammar's
            priors (normalised units) instead of Type-2 ML; needs ``refine``.
        backend: the GP solver: ``"auto"`` (the memory rule: dense Cholesky, dense CG,
            KeOps or block CG), ``"cholesky"``, ``"cg"``, ``"keops"``, ``"block"`` or
            ``"dense"`` (:func:`~amorgp.lazy_kernels.plan_solver`).
        memory_budget: bytes the dense GP backends may use (``None``: 4 GiB); beyond it
            ``"auto"`` turns to the lazy solvers.

    Attributes (after ``fit``):
        result_: the :class:`~amorgp.amortizer.results.KernelResult`.
        hyperparameters_: ``"d<dim>.<addend>.<symbol>.<name>" -> value`` in
            normalised units, plus ``"noise"`` (see ``result_.table`` for original units).
        log_marginal_likelihood_: log marginal likelihood of the training targets
            in original units.
        log_marginal_likelihood_value_: the same (scikit-learn's name).
        kernel_: the fitted kernel and noise as a :class:`~amorgp.amortizer.fitted_kernel.FittedKernel`
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
        refine: int | Literal["auto"] = 0,
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

    def fit(self, X: Any, y: Any) -> AmortizedGPRegressor:
        """Predict the hyperparameters of ``kernel`` for ``X (n, d)``, ``y (n,)``.

        Raises:
            ValueError: invalid data (see :func:`~amorgp.core.data.as_dataset`) or
                a kernel that does not parse or match the data's dimension.
        """
        if _validate_data is not None:  # sklearn's messages and conversions when available
            X, y = _validate_data(self, X, y, ensure_min_samples=MIN_POINTS, y_numeric=True)
        Xa, ya = as_dataset(_as_2d(X), _host(y), min_points=MIN_POINTS, training=True)
        amz = self._amortizer()
        result = amz.infer(
            Xa,
            ya,
            self.kernel,
            refine=self.refine,
            calibrate=self.calibrate,
            starts=self.starts,
            noise_floor=self.noise_floor,
            fixed=self.fixed,
            bounds=self.bounds,
            priors=self.priors,
        )
        self.result_: KernelResult = result
        self.n_features_in_ = Xa.shape[1]
        self.X_train_: np.ndarray = Xa.numpy().copy()
        self.kernel_ = FittedKernel(result.kernel, result.params, result.noise, result.normalizer)
        hyper = {f"d{h.dim}.{h.addend}.{h.symbol}.{h.name}": h.value for h in result.table}
        self.hyperparameters_: dict[str, float] = {**hyper, "noise": result.noise}
        logger.info(
            "fitted %s on n = %d, d = %d: log marginal likelihood %.6g (original units), %.3f s",
            result.kernel_text,
            Xa.shape[0],
            Xa.shape[1],
            result.log_marginal_likelihood_original,
            result.call_time_s,
        )
        return self

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
    L, info = torch.linalg.cholesky_ex(K)
    if int(info) != 0:
        return torch.tensor(-math.inf, dtype=torch.float64) + 0.0 * theta.sum()
    a = torch.cholesky_solve(y[:, None], L)[:, 0]
    value = -0.5 * (y * a).sum() - torch.log(torch.diagonal(L)).sum()
    return value - 0.5 * n * math.log(2 * math.pi) + res.normalizer.lml_offset(n)


def _check_random_state(seed: Any) -> np.random.RandomState:
    try:
        from sklearn.utils import check_random_state
    except ImportError:  # pragma: no cover - without scikit-learn
        if isinstance(seed, np.random.RandomState):
            return seed
        return np.random.RandomState(seed)
    return check_random_state(seed)


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
