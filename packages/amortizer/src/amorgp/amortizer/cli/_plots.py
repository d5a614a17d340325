"""The figures of ``predict --plot`` and ``demo --plot`` (the path is checked beforehand
by :func:`~amorgp.amortizer.cli._output.check_plot_path`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amorgp.amortizer.cli._output import atomic_write

if TYPE_CHECKING:
    from amorgp.amortizer.api import KernelResult
    from amorgp.amortizer.io import Dataset

__all__ = ["plot_demo", "plot_prediction"]


def _predictor(result: KernelResult) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    def f(Xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, v = result.predict(Xq, include_noise=True)
        return m.numpy(), np.sqrt(v.numpy())

    return f


def _save(fig: Any, path: Path) -> None:
    fmt = path.suffix.lower().lstrip(".")
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight"))


def plot_prediction(path: Path, result: KernelResult, train: Dataset, test: Dataset | None) -> None:
    """Write the predictive mean and band (1-D) or slices through the medians (d > 1)."""
    from amorgp.amortizer.plotting import plot_predictive_1d, plot_slices, require_matplotlib

    plt = require_matplotlib()
    assert train.y is not None
    d = train.X.shape[1]
    if d == 1:
        fig, ax = plt.subplots(figsize=(8, 4))
        plot_predictive_1d(
            ax,
            train.X,
            train.y,
            _predictor(result),
            X_test=None if test is None else test.X,
            y_test=None if test is None else test.y,
            label=result.kernel_text,
        )
        ax.set_xlabel(train.feature_names[0])
        ax.set_ylabel(train.target_name or "y")
    else:
        cols = min(d, 4)
        rows = math.ceil(d / cols)
        fig, axs = plt.subplots(
            rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, layout="constrained"
        )
        flat = list(axs.reshape(-1))
        plot_slices(
            flat[:d], train.X, train.y, _predictor(result), feature_names=train.feature_names
        )
        for ax in flat[d:]:
            ax.axis("off")
        for ax in axs[:, 0]:
            ax.set_ylabel(train.target_name or "y")
        fig.suptitle(f"{result.kernel_text}: slices through the training medians")
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def plot_demo(path: Path, table: Dataset, result: KernelResult, baseline: Any | None) -> None:
    """Write the amortized prediction of the demo, beside the Type-2 ML one if given."""
    from amorgp.amortizer.plotting import plot_predictive_1d, require_matplotlib

    plt = require_matplotlib()
    assert table.y is not None
    panels = 1 if baseline is None else 2
    fig, axs = plt.subplots(1, panels, figsize=(6 * panels, 3.8), squeeze=False, sharey=True)
    plot_predictive_1d(
        axs[0, 0], table.X, table.y, _predictor(result), extend=0.25, label="amortized"
    )
    axs[0, 0].set_title(f"amortized: {result.kernel_text}")
    if baseline is not None:

        def base_pred(Xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            m, v = baseline.predict(Xq)
            return np.asarray(m), np.sqrt(np.asarray(v))

        plot_predictive_1d(
            axs[0, 1], table.X, table.y, base_pred, extend=0.25, label="Type-2 ML", color="C1"
        )
        axs[0, 1].set_title(f"Type-2 ML: {result.kernel_text}")
    for ax in axs[0]:
        ax.set_xlabel(table.feature_names[0])
    axs[0, 0].set_ylabel(table.target_name or "y")
    try:
        _save(fig, path)
    finally:
        plt.close(fig)
