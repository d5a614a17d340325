"""Plots of GP predictions (matplotlib; every function takes and returns an ``ax``).

* :func:`plot_predictive_1d`: training data, predictive mean and a 95 % band
  (``mean +- 1.96 std``) on a grid, optionally test points.
* :func:`plot_slices`: for ``d > 1``, one panel per input dimension: the
  prediction along that dimension with the other inputs held at their training
  medians.

Both take as ``predictor`` a fitted estimator (``AmortizedGPRegressor``, a
``KernelEnsemble``, anything with ``predict(X, return_std=True)``), a fit result
(``KernelResult`` or a baseline's fit: ``predict(X)`` returns the mean and the
variance) or a callable ``X -> (mean, std)`` (:data:`Predictor`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Predictor", "as_predictor", "plot_predictive_1d", "plot_slices", "require_matplotlib"]

Predictor = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""Maps ``X (m, d)`` to the predictive ``(mean (m,), std (m,))`` in original units."""


def _takes_return_std(predict: Any) -> bool:
    try:
        return "return_std" in inspect.signature(predict).parameters
    except (TypeError, ValueError):
        return False


def as_predictor(model: Any) -> Predictor:
    """``model`` as a :data:`Predictor`: a fitted estimator (``predict(X,
    return_std=True)``), a fit result (``predict(X)`` -> mean and variance, e.g.
    ``KernelResult``) or a callable ``X -> (mean, std)`` (returned as numpy arrays).

    Raises:
        TypeError: none of these.
    """
    predict = getattr(model, "predict", None)
    if callable(predict) and _takes_return_std(predict):

        def from_estimator(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            mean, std = predict(X, return_std=True)
            return _numpy(mean), _numpy(std)

        return from_estimator
    if callable(predict):

        def from_fit(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            mean, var = predict(X)
            return _numpy(mean), np.sqrt(_numpy(var))

        return from_fit
    if callable(model):

        def from_callable(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            mean, std = model(X)
            return _numpy(mean), _numpy(std)

        return from_callable
    raise TypeError(
        "predictor must be a fitted estimator (predict(X, return_std=True)), a fit result "
        f"(predict(X) -> mean, variance) or a callable X -> (mean, std); got {type(model).__name__}"
    )


def _numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch tensor, possibly on a device
        a = a.detach().cpu()
    return np.asarray(a, dtype=np.float64).reshape(-1)


def require_matplotlib() -> Any:
    """Import ``matplotlib.pyplot`` with the non-interactive Agg backend.

    Raises:
        ValueError: matplotlib is not installed (with the install command).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError(
            "plotting needs matplotlib: pip install matplotlib (or amorgp-amortizer[plot])"
        ) from None
    return plt


def plot_predictive_1d(
    ax: Any,
    X: np.ndarray,
    y: np.ndarray,
    predictor: Any,
    *,
    X_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
    extend: float = 0.0,
    n_grid: int = 400,
    label: str = "mean",
    color: str = "C0",
) -> Any:
    """Data, predictive mean and 95 % band of a 1-D GP on ``ax``.

    Args:
        ax: a matplotlib axes.
        X: ``(n, 1)`` training inputs; ``y`` ``(n,)`` targets.
        predictor: a fitted estimator, a fit result or a callable (see
            :func:`as_predictor`).
        X_test, y_test: optional test points (``y_test`` may be ``None``).
        extend: grid extends this fraction of the data range beyond both ends.
        n_grid: grid size.
        label, color: legend label and colour of the mean.

    Returns:
        ``ax``.
    """
    x = np.asarray(X, dtype=np.float64).reshape(-1)
    pts = x if X_test is None else np.concatenate([x, np.asarray(X_test, np.float64).reshape(-1)])
    lo, hi = float(pts.min()), float(pts.max())
    pad = extend * (hi - lo)
    grid = np.linspace(lo - pad, hi + pad, n_grid)
    mean, std = as_predictor(predictor)(grid[:, None])
    ax.fill_between(
        grid, mean - 1.96 * std, mean + 1.96 * std, color=color, alpha=0.2, lw=0, label="95% band"
    )
    ax.plot(grid, mean, color=color, lw=1.5, label=label)
    ax.plot(x, y, "k.", ms=3, label="training data")
    if X_test is not None and y_test is not None:
        ax.plot(np.asarray(X_test).reshape(-1), y_test, "x", color="C3", ms=4, label="test data")
    ax.legend(loc="best", fontsize="small")
    return ax


def plot_slices(
    axes: Sequence[Any],
    X: np.ndarray,
    y: np.ndarray,
    predictor: Any,
    *,
    feature_names: Sequence[str] | None = None,
    n_grid: int = 200,
) -> Sequence[Any]:
    """One slice per input dimension of a ``d``-dimensional GP.

    Panel ``j`` shows the prediction along input ``j`` from its minimum to its
    maximum, the other inputs held at their training medians, over the training
    data projected on input ``j``.

    Args:
        axes: ``d`` matplotlib axes.
        X: ``(n, d)`` training inputs; ``y`` ``(n,)`` targets.
        predictor: a fitted estimator, a fit result or a callable (see
            :func:`as_predictor`).
        feature_names: axis labels.
        n_grid: grid size per slice.

    Returns:
        ``axes``.
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    if len(axes) != d:
        raise ValueError(f"need one axes per input dimension ({d}), got {len(axes)}")
    med = np.median(X, axis=0)
    predict = as_predictor(predictor)
    for j, ax in enumerate(axes):
        grid = np.linspace(X[:, j].min(), X[:, j].max(), n_grid)
        Q = np.tile(med, (n_grid, 1))
        Q[:, j] = grid
        mean, std = predict(Q)
        ax.plot(X[:, j], y, "k.", ms=2, alpha=0.4)
        ax.fill_between(grid, mean - 1.96 * std, mean + 1.96 * std, alpha=0.2, lw=0)
        ax.plot(grid, mean, lw=1.5)
        ax.set_xlabel(feature_names[j] if feature_names is not None else f"x{j}")
    return axes
