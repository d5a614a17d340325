"""Input laws: ranges, the normalisation contract, law-specific structure, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from amorgp.simulator import INPUT_LAWS, Simulator, SimulatorConfig, sample_input_columns


def _draw(law: str, B: int = 40, T: int = 120, C: int = 3, n_train: int = 100, seed: int = 0):
    train = torch.zeros(B, T, dtype=torch.bool)
    train[:, :n_train] = True
    X = sample_input_columns(law, (B, T, C), train, torch.Generator().manual_seed(seed))
    return X, train


@pytest.mark.parametrize("law", [law for law in INPUT_LAWS if law != "uniform"])
def test_training_points_are_min_max_scaled(law: str) -> None:
    X, _train = _draw(law)
    Xt = X[:, :100].numpy()
    lo, hi = Xt.min(axis=1), Xt.max(axis=1)
    const = np.isclose(Xt, 0.5).all(axis=1)
    np.testing.assert_allclose(lo[~const], 0.0, atol=1e-12)
    np.testing.assert_allclose(hi[~const], 1.0, atol=1e-12)
    assert np.isfinite(X.numpy()).all()


def test_minmax_scaling_against_numpy() -> None:
    """Test points are mapped with the training points' range; a constant column maps to 0.5."""
    from amorgp.simulator.inputs import _minmax

    rng = np.random.default_rng(0)
    raw = rng.normal(size=(4, 30, 3)) * 5 + 2
    raw[1, :, 2] = 7.0  # a constant column
    train = np.zeros((4, 30), dtype=bool)
    train[:, :20] = True
    train[3, 10:20] = False  # fewer training points in one dataset
    got = _minmax(torch.as_tensor(raw), torch.as_tensor(train)).numpy()
    for b in range(4):
        for c in range(3):
            col = raw[b, train[b], c]
            lo, hi = col.min(), col.max()
            want = np.full(30, 0.5) if hi == lo else (raw[b, :, c] - lo) / (hi - lo)
            np.testing.assert_allclose(got[b, :, c], want, rtol=1e-12, atol=1e-12)


def test_levels_give_few_distinct_values() -> None:
    X, _ = _draw("levels")
    counts = [np.unique(X[b, :100, c].numpy()).size for b in range(40) for c in range(3)]
    assert max(counts) <= 6
    assert min(counts) >= 1
    assert np.mean(counts) > 2.5  # k ~ U{2..6}: mostly several levels


def test_clusters_and_skew_are_not_uniform() -> None:
    for law in ("clusters", "skewed"):
        X, _ = _draw(law, B=20, C=1)
        pvalues = [stats.kstest(X[b, :100, 0].numpy(), "uniform").pvalue for b in range(20)]
        assert np.median(pvalues) < 0.05, law


def test_mixed_draws_every_law() -> None:
    X, _ = _draw("mixed", B=200, C=2, seed=5)
    distinct = np.array(
        [np.unique(X[b, :100, c].numpy()).size for b in range(200) for c in range(2)]
    )
    share_levels = float(np.mean(distinct <= 6))
    assert 0.17 < share_levels < 0.33  # 1/4 of the columns, binomial sd ~0.03


def test_mixed_half_keeps_half_the_datasets_uniform() -> None:
    """``mixed-half``: every column uniform in about half the datasets, ``mixed`` in the rest."""
    B, C = 400, 3
    X, _ = _draw("mixed-half", B=B, C=C, seed=7)
    levels = np.array(
        [[np.unique(X[b, :100, c].numpy()).size <= 6 for c in range(C)] for b in range(B)]
    )
    pvalues = np.array(
        [
            [stats.kstest(X[b, :100, c].numpy(), "uniform").pvalue for c in range(C)]
            for b in range(B)
        ]
    )
    # uniform datasets: no discrete-level column and every column passes a KS test
    plausibly_uniform = ~levels.any(1) & (pvalues > 1e-3).all(1)
    # 1/2 all-uniform + 1/2 * (1/4)^3 mixed ones that drew uniform throughout, plus the
    # mixed datasets whose clustered/skewed columns pass the test by chance (few)
    assert 0.42 < float(plausibly_uniform.mean()) < 0.62
    # discrete levels only in the mixed half: 1 - (3/4)^3 of it
    assert 0.16 < float(levels.any(1).mean()) < 0.34


def test_deterministic_and_unknown_law() -> None:
    a, _ = _draw("mixed", seed=11)
    b, _ = _draw("mixed", seed=11)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown input law"):
        _draw("gaussian")


@pytest.mark.parametrize("law", INPUT_LAWS)
def test_simulator_batches_keep_the_contract(law: str) -> None:
    cfg = SimulatorConfig(inputs=law, n_max=60, n_test=4)
    batch = Simulator(cfg).sample(16, torch.Generator().manual_seed(1))
    present = batch.point_mask[:, :, None] & batch.dim_mask[:, None, :]
    assert bool((batch.X[~present] == 0).all())
    assert bool(((batch.X[present] >= 0) & (batch.X[present] <= 1)).all())
    assert bool(batch.valid.all())
    assert SimulatorConfig.from_dict(cfg.to_dict()) == cfg


def test_config_rejects_unknown_law() -> None:
    with pytest.raises(ValueError, match="inputs must be one of"):
        SimulatorConfig(inputs="normal")
