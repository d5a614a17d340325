"""The figures of ``predict --plot`` and ``demo --plot`` (the path is checked beforehand
by :func:`~amorgp.cli._output.check_plot_path`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amorgp.cli._output import atomic_write

if TYPE_CHECKING:
    from amorgp.amortizer.api import KernelResult
    from amorgp.amortizer.frontends.io import Dataset
    from amorgp.ensembles import KernelEnsemble

__all__ = ["plot_demo", "plot_ensemble", "plot_prediction"]


def _predictor(result: KernelResult) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    def f(Xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, v = result.predict(Xq, include_noise=True)
        return np.asarray(m), np.sqrt(np.asarray(v))

    return f


def _save(fig: Any, path: Path) -> None:
    fmt = path.suffix.lower().lstrip(".")
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight"))


def plot_prediction(path: Path, result: KernelResult, train: Dataset, test: Dataset | None) -> None:
    """Write the predictive mean and band (1-D) or slices through the medians (d > 1)."""
    from amorgp.cli.plotting import plot_predictive_1d, plot_slices, require_matplotlib

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
    from amorgp.cli.plotting import plot_predictive_1d, require_matplotlib

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


def plot_ensemble(path: Path, ens: KernelEnsemble, train: Dataset, test: Dataset | None) -> None:
    """The mixture mean and band with the top members (1-D), or predicted vs observed (d > 1)."""
    from amorgp.cli.plotting import require_matplotlib

    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(7, 4))
    if train.X.shape[1] == 1:
        lo, hi = float(train.X.min()), float(train.X.max())
        if test is not None:
            lo, hi = min(lo, float(test.X.min())), max(hi, float(test.X.max()))
        grid = np.linspace(lo, hi, 400)[:, None]
        mix = ens.predictive(grid)
        mean, sd = mix.mean().numpy(), mix.variance().sqrt().numpy()
        order = np.argsort(-ens.weights.numpy())[:3]
        for i in order:
            fit = ens.fits[i]
            if fit is not None and float(ens.weights[i]) > 0:
                ax.plot(
                    grid[:, 0],
                    np.asarray(fit.predict(grid)[0]),
                    lw=0.8,
                    alpha=0.8,
                    label=f"{ens.kernels[i]} (w {float(ens.weights[i]):.2f})",
                )
        ax.fill_between(grid[:, 0], mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2)
        ax.plot(grid[:, 0], mean, color="k", lw=1.5, label="ensemble mean +- 2 sd")
        ax.plot(train.X[:, 0], train.y, "k.", ms=3, label="training data")
        if test is not None and test.y is not None:
            ax.plot(test.X[:, 0], test.y, "rx", ms=3, label="held out")
        ax.set_xlabel(train.feature_names[0])
    else:
        assert test is not None
        assert test.y is not None
        mix = ens.predictive(test.X)
        ax.errorbar(
            test.y, mix.mean().numpy(), yerr=2 * mix.variance().sqrt().numpy(), fmt=".", alpha=0.6
        )
        lim = [
            float(min(test.y.min(), mix.mean().min())),
            float(max(test.y.max(), mix.mean().max())),
        ]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set_xlabel(f"observed {train.target_name}")
    ax.set_ylabel(train.target_name or "target")
    ax.set_title(f"{ens.n_members}-kernel ensemble ({ens.weighting})")
    ax.legend(fontsize=7)
    fmt_ = path.suffix.lower().lstrip(".")
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt_, dpi=120, bbox_inches="tight"))
    plt.close(fig)
