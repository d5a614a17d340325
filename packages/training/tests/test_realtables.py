"""Tests of real tables in training batches (:mod:`amorgp.training.realtables`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.testing import TINY_TRAIN
from amorgp.core.errors import DataError, TrainingError
from amorgp.simulator import SimulatedBatch
from amorgp.simulator.config import SimulatorConfig
from amorgp.simulator.simulator import Simulator
from amorgp.training.realtables import RealTables, mix_real
from amorgp.training.train import train

NET = PRESETS["tiny"].network


def _batch(size: int = 8, seed: int = 0, d_max: int = 3) -> SimulatedBatch:
    cfg = SimulatorConfig(n_min=12, n_max=30, d_max=d_max, vocabulary=NET.vocabulary)
    return Simulator(cfg).sample(size, torch.Generator().manual_seed(seed))


def _monotone_table(rows: int = 60, cols: int = 4, seed: int = 0) -> np.ndarray:
    """Columns that are distinct increasing functions of one variable, rows shuffled:
    a piece keeps its rows aligned exactly where every pair of its columns has Spearman
    correlation 1."""
    x = np.random.default_rng(seed).permutation(rows).astype(float) + 1.0
    return np.stack([x ** (j + 1) + 3.0 * j for j in range(cols)], axis=1)


def _piece(b: SimulatedBatch, i: int) -> tuple[np.ndarray, np.ndarray]:
    pm, dm = b.point_mask[i], b.dim_mask[i]
    return b.X[i][pm][:, dm].numpy(), b.y[i][pm].numpy()


def test_replaced_datasets_are_normalised_aligned_rows_of_a_table() -> None:
    batch = _batch()
    tables = RealTables.from_arrays([_monotone_table(), _monotone_table(45, 5, 1)], ["a", "b"])
    mixed, replaced = mix_real(batch, tables, 0.5, torch.Generator().manual_seed(3))
    assert replaced == 4
    changed = [i for i in range(8) if not torch.equal(mixed.y[i], batch.y[i])]
    assert len(changed) == 4
    for i in range(8):  # what the simulator drew for every dataset but its data
        assert torch.equal(mixed.symbols[i], batch.symbols[i])
        assert torch.equal(mixed.dim_mask[i], batch.dim_mask[i])
    for i in changed:
        X, y = _piece(mixed, i)
        n_drawn = int(batch.point_mask[i].sum())
        assert len(y) == n_drawn  # both tables have more rows
        assert len(np.unique(X[:, 0])) == len(y)  # rows drawn without replacement
        np.testing.assert_allclose(X.min(0), 0.0, atol=1e-12)
        np.testing.assert_allclose(X.max(0), 1.0, atol=1e-12)
        assert abs(y.mean()) < 1e-12
        assert abs(y.std() - 1.0) < 1e-12
        for j in range(X.shape[1]):
            assert spearmanr(X[:, j], y).statistic == pytest.approx(1.0)
        assert bool(mixed.valid[i])
    for i in set(range(8)) - set(changed):
        assert torch.equal(mixed.X[i], batch.X[i])
        assert torch.equal(mixed.point_mask[i], batch.point_mask[i])


def test_share_zero_one_and_the_generator() -> None:
    batch = _batch()
    tables = RealTables.from_arrays([_monotone_table()], ["a"])
    same, replaced = mix_real(batch, tables, 0.0, torch.Generator().manual_seed(0))
    assert same is batch
    assert replaced == 0
    _, replaced = mix_real(batch, tables, 1.0, torch.Generator().manual_seed(0))
    assert replaced == 8
    a, _ = mix_real(batch, tables, 0.5, torch.Generator().manual_seed(7))
    b, _ = mix_real(batch, tables, 0.5, torch.Generator().manual_seed(7))
    c, _ = mix_real(batch, tables, 0.5, torch.Generator().manual_seed(8))
    assert torch.equal(a.X, b.X)
    assert torch.equal(a.y, b.y)
    assert not torch.equal(a.y, c.y)
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\]"):
        mix_real(batch, tables, 1.5, torch.Generator())


def test_datasets_no_table_can_fill_stay_simulated() -> None:
    batch = _batch(d_max=3)
    two_columns = RealTables.from_arrays([_monotone_table(cols=2)], ["narrow"])
    mixed, replaced = mix_real(batch, two_columns, 1.0, torch.Generator().manual_seed(0))
    d = batch.dim_mask.sum(1)
    assert replaced == int((d == 1).sum())  # a table of 2 columns fills one input only
    for i in torch.nonzero(d > 1)[:, 0].tolist():
        assert torch.equal(mixed.y[i], batch.y[i])
    constant = np.ones((40, 3))
    constant[:, 0] = np.arange(40)  # every draw holds a constant column
    mixed, replaced = mix_real(
        batch, RealTables.from_arrays([constant], ["flat"]), 1.0, torch.Generator()
    )
    assert replaced == 0
    assert torch.equal(mixed.y, batch.y)


def test_pool_round_trip_and_refusals(tmp_path: Path) -> None:
    tables = RealTables.from_arrays([_monotone_table(), _monotone_table(30, 2)], ["p/a", "q/b"])
    tables.save(tmp_path / "pool.npz")
    back = RealTables.load(tmp_path / "pool.npz")
    assert back.names == ("p/a", "q/b")
    for t, u in zip(tables.tables, back.tables, strict=True):
        np.testing.assert_array_equal(t, u)
    with pytest.raises(DataError, match="no pool of real tables"):
        RealTables.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DataError, match="not a pool of real tables"):
        RealTables.load(tmp_path / "other.npz")
    bad = _monotone_table()
    bad[3, 1] = np.nan
    with pytest.raises(DataError, match="'nan' has missing or non-finite entries"):
        RealTables.from_arrays([bad], ["nan"])
    with pytest.raises(DataError, match="'one' has shape"):
        RealTables.from_arrays([np.zeros((40, 1))], ["one"])
    with pytest.raises(DataError, match="at least one table"):
        RealTables.from_arrays([], [])


def test_config_refuses_a_share_without_tables_or_in_phase_2() -> None:
    with pytest.raises(ValueError, match="needs real_tables"):
        dataclasses.replace(TINY_TRAIN, real_share=0.5)
    with pytest.raises(ValueError, match="needs phase 1"):
        dataclasses.replace(TINY_TRAIN, real_share=0.5, real_tables="p.npz", phase=2)
    with pytest.raises(ValueError, match=r"real_share must be in \[0, 1\]"):
        dataclasses.replace(TINY_TRAIN, real_share=-0.1)


def test_training_mixes_real_tables_and_says_how_many(tmp_path: Path) -> None:
    pool = tmp_path / "pool.npz"
    RealTables.from_arrays([_monotone_table(cols=3)], ["t"]).save(pool)
    over = {"real_tables": str(pool), "real_share": 0.5, "n_min": 10, "max_dims": 2}
    result = train(
        tmp_path / "run",
        NET,
        TINY_TRAIN,
        train_overrides=over,
        max_steps=3,
        progress=False,
        log_every=1,
    )
    assert result.step == 3
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["n_real"] for r in steps] == [2, 2, 2]  # half of 4, every input count fits
    with pytest.raises(TrainingError, match="no pool of real tables"):
        train(
            tmp_path / "bad",
            NET,
            TINY_TRAIN,
            train_overrides={**over, "real_tables": str(tmp_path / "missing.npz")},
            max_steps=1,
            progress=False,
        )
    assert not (tmp_path / "bad").exists()  # refused before work: no half-created run


def test_a_resumed_run_mixes_the_same_real_datasets(tmp_path: Path) -> None:
    """The mixing is a function of the run's seed and step: a run stopped at its first
    checkpoint and resumed ends with the weights of one that ran straight through."""
    from amorgp.amortizer.networks.checkpoint import load_checkpoint

    pool = tmp_path / "pool.npz"
    RealTables.from_arrays([_monotone_table(cols=3)], ["t"]).save(pool)
    over = {"real_tables": str(pool), "real_share": 0.5, "n_min": 10, "max_dims": 2}
    straight = train(
        tmp_path / "a", NET, TINY_TRAIN, train_overrides=over, max_steps=6, progress=False
    )
    train(tmp_path / "b", NET, TINY_TRAIN, train_overrides=over, max_steps=3, progress=False)
    resumed = train(tmp_path / "b", resume=True, max_steps=6, progress=False)
    wa = load_checkpoint(straight.last_checkpoint).model.state_dict()  # type: ignore[arg-type]
    wb = load_checkpoint(resumed.last_checkpoint).model.state_dict()  # type: ignore[arg-type]
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=0, msg=name)
