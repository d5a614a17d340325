"""Plots of simulated datasets (matplotlib is an optional extra: ``amorgp-simulator[plot]``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from amorgp.kernel_grammar import Vocabulary
from amorgp.simulator.batch import SimulatedBatch

__all__ = ["plot_datasets"]


def plot_datasets(
    batch: SimulatedBatch,
    indices: Sequence[int] | None = None,
    *,
    ax: Any = None,
    dim: int = 0,
    show_test: bool = True,
    vocab: Vocabulary | None = None,
) -> Any:
    """Scatter ``y`` against input dimension ``dim`` for a few datasets of a batch.

    Each dataset gets one colour; its label gives the noise variance, the true
    structure when ``vocab`` is given, and "negative pair" when the presented
    structure differs from the true one.  Test points, when present, are drawn
    as hollow markers.

    Args:
        batch: a simulated batch.
        indices: which datasets (default: the first five).
        ax: a matplotlib ``Axes`` to draw on (default: a new figure's).
        dim: the input dimension on the horizontal axis.
        show_test: also draw the test points.
        vocab: the batch's vocabulary; when given, labels name the true structures.

    Returns:
        The ``Axes``.

    Raises:
        ValueError: an index outside the batch or ``dim`` outside its dimensions.
        ImportError: matplotlib is not installed (install the ``plot`` extra).
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plot_datasets needs matplotlib: pip install 'amorgp-simulator[plot]'"
        ) from err
    chosen = list(range(min(5, len(batch)))) if indices is None else [int(i) for i in indices]
    for i in chosen:
        if not 0 <= i < len(batch):
            raise ValueError(f"dataset index {i} outside 0..{len(batch) - 1}")
        if not (0 <= dim < batch.dim_mask.shape[1] and bool(batch.dim_mask[i, dim])):
            raise ValueError(f"dataset {i} has no input dimension {dim}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    names = batch.select(torch.tensor(chosen)).true_structures(vocab) if vocab else None
    for k, i in enumerate(chosen):
        m = batch.point_mask[i]
        label = f"#{i}: noise {float(batch.noise[i]):.3g}"
        if names is not None:
            label = f"#{i}: {names[k]}, noise {float(batch.noise[i]):.3g}"
        if not bool(batch.is_positive[i]):
            label += " (negative pair)"
        points = ax.scatter(batch.X[i, m, dim].numpy(), batch.y[i, m].numpy(), s=12, label=label)
        if show_test and batch.X_test is not None and batch.y_test is not None:
            ax.scatter(
                batch.X_test[i, :, dim].numpy(),
                batch.y_test[i].numpy(),
                s=30,
                facecolors="none",
                edgecolors=points.get_facecolor(),
            )
    ax.set_xlabel(f"x[{dim}]")
    ax.set_ylabel("y")
    ax.legend(fontsize="small")
    return ax
