"""plot_datasets draws what it is given (skipped without matplotlib)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.simulator import Simulator, SimulatorConfig

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from amorgp.simulator.plot import plot_datasets  # noqa: E402


def test_plot_draws_each_dataset_and_returns_the_axes(gen: torch.Generator) -> None:
    import matplotlib.pyplot as plt

    cfg = SimulatorConfig(n_min=5, n_max=15, n_test=3, d_max=1)
    batch = Simulator(cfg).sample(4, gen)
    fig, ax = plt.subplots()
    out = plot_datasets(batch, [0, 2], ax=ax)
    assert out is ax
    assert len(ax.collections) == 4  # training + test points of two datasets
    offsets = ax.collections[0].get_offsets()
    n0 = int(batch.point_mask[0].sum())
    np.testing.assert_array_equal(offsets[:, 1], batch.y[0, :n0].numpy())
    plt.close(fig)
    fig, ax = plt.subplots()
    plot_datasets(batch, [1], ax=ax, vocab=cfg.vocabulary)
    label = ax.get_legend().get_texts()[0].get_text()
    assert str(batch.true_structures(cfg.vocabulary)[1]) in label
    plt.close(fig)
    with pytest.raises(ValueError, match="index"):
        plot_datasets(batch, [9])
    with pytest.raises(ValueError, match="dimension"):
        plot_datasets(batch, [0], dim=3)
