"""The experiments beyond Fig. 3 on tiny settings: simulated metrics against a dense
oracle, Table 1 with an AHGP network, Fig. 4 and the simulated sets resuming from cells."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from amorgp_experiments.paper import PaperConfig, run_paper
from amorgp_experiments.paper.simulated import predictive_metrics

from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.testing import seeded_checkpoint
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood, dense_gp_predictive
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, base_symbol
from amorgp.lazy_kernels import PaddedBatch


def _se(a: np.ndarray, b: np.ndarray, s2: float, ell: float) -> np.ndarray:
    return s2 * np.exp(-((a[:, None] - b[None, :]) ** 2) / (2 * ell**2))


def test_simulated_metrics_match_a_dense_float64_oracle() -> None:
    g = torch.Generator().manual_seed(0)
    n, m = 12, 7
    X = torch.rand(n, 1, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    Xs = torch.rand(m, 1, generator=g, dtype=torch.float64)
    ys = torch.sin(6 * Xs[:, 0])
    s = DimWiseStructure((("SE",),))
    batch = PaddedBatch.from_datasets([(X, y)], [s], PAPER_VOCABULARY)
    s2, ell, noise = 1.3, 0.2, 0.05
    params = torch.ones(1, 1, batch.symbols.shape[-1], PAPER_VOCABULARY.max_params)
    spec = [p.name for p in base_symbol("SE").params]
    params[0, 0, 0, spec.index("variance")] = s2
    params[0, 0, 0, spec.index("lengthscale")] = ell
    got = predictive_metrics(
        batch, params, torch.tensor([noise]), Xs[None], ys[None], torch.ones(1, m, dtype=torch.bool)
    )
    x, xs = X[:, 0].numpy(), Xs[:, 0].numpy()
    mean, var = dense_gp_predictive(
        _se(x, x, s2, ell), _se(x, xs, s2, ell), np.full(m, s2), y.numpy(), noise
    )
    t = ys.numpy()
    assert float(got["rmse"][0]) == pytest.approx(
        np.sqrt(np.mean((mean - t) ** 2)), rel=1e-6
    )  # robust Cholesky jitter
    nll = np.mean(0.5 * np.log(2 * np.pi * var) + (t - mean) ** 2 / (2 * var))
    assert float(got["nll"][0]) == pytest.approx(nll, rel=1e-6)  # robust Cholesky jitter
    lml = dense_gp_log_marginal_likelihood(_se(x, x, s2, ell), y.numpy(), noise)
    assert float(got["train_nll"][0]) == pytest.approx(-lml / n, rel=1e-6)  # robust Cholesky jitter


@pytest.fixture(scope="module")
def ahgp_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    network = dataclasses.replace(PRESETS["tiny"].network, model="ahgp-se-ard")
    return seeded_checkpoint(tmp_path_factory.mktemp("ahgp") / "ahgp", network)


@pytest.fixture(scope="module")
def toy_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, (40, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1] + 0.05 * rng.normal(size=40)
    path = tmp_path_factory.mktemp("toy2") / "toy2.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,y", comments="")
    return path


def test_table1_compares_with_an_ahgp_network(
    toy_csv: Path, tiny_checkpoint: Path, ahgp_checkpoint: Path, tmp_path: Path
) -> None:
    cfg = replace(
        PaperConfig.quick_config(),
        experiments=("table1",),
        datasets=(str(toy_csv),),
        splits=3,
        model=str(tiny_checkpoint),
        table1_models=(str(tiny_checkpoint), str(ahgp_checkpoint), "no-such-model"),
        method_options={"gp-ml-lbfgs": {"max_iters": 10}},
    )
    rec = run_paper(cfg, tmp_path, progress=False)
    row = rec["experiments"]["table1"]["datasets"]["toy2"]
    assert set(row["mean_rmse"]) == {
        str(tiny_checkpoint),
        str(ahgp_checkpoint),
        "Type-2 ML (gp-ml-lbfgs)",
    }
    assert all(len(v) == 3 for v in row["rmse"].values())  # one RMSE per split
    (test,) = row["tests"]
    assert (test["a"], test["b"]) == (str(tiny_checkpoint), str(ahgp_checkpoint))
    assert 0.0 <= test["p"] <= 1.0
    assert any("no-such-model" in n for n in rec["notes"]["table1"])


def test_fig2b_fig4_fig9_resume_from_cells(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = replace(
        PaperConfig.quick_config(),
        experiments=("fig2b", "fig9", "fig4"),
        datasets=("airline",),
        kernel_ids=(3, 10),
        model=str(tiny_checkpoint),
        sim_pairs=6,
        sim_n_max=30,
        sim_d_max=2,
        sweep_sizes=(10,),
        sweep_pairs=4,
        ensemble_sizes=(30,),
        method_options={"gp-ml": {"max_iters": 10}},
    )
    first = run_paper(cfg, tmp_path, progress=False)
    exps = first["experiments"]
    fig2b = exps["fig2b"]["summary"]
    assert set(fig2b) == {"amortized", "amortized+calibrate", "type2ml", "ground truth"}
    # calibration maximises each pair's training likelihood over its scale and noise
    pairs = exps["fig2b"]["pairs"]
    for cal, plain in zip(
        pairs["amortized+calibrate"]["train_nll"], pairs["amortized"]["train_nll"], strict=True
    ):
        assert cal <= plain + 1e-9
    assert all(
        r["nll"]["n"] + r["nll"]["n_failed"] == len(exps["fig2b"]["pairs"]["amortized"]["nll"])
        for r in fig2b.values()
    )
    assert set(exps["fig9"]["by_n"]) == {"10"}
    bma = {r["method"]: r for r in exps["fig4"]["bma"]}
    assert set(bma) == {"amortized BMA", "amortized+calibrate BMA", "Type-2 ML BMA"}
    # the calibrated ensemble scores every member too
    assert len(bma["amortized+calibrate BMA"]["members_rmse"]) == 2
    assert math.isfinite(bma["amortized+calibrate BMA"]["rmse"])
    assert len(bma["amortized BMA"]["members_rmse"]) == 2
    assert math.isfinite(bma["amortized BMA"]["rmse"])
    assert exps["fig4"]["timing"][0]["n"] == 30

    second = run_paper(cfg, tmp_path, progress=False)
    assert second["cells_computed"] == 0
    assert second["experiments"]["fig2b"]["pairs"] == exps["fig2b"]["pairs"]
    for name in ("fig2b", "fig9", "fig4"):
        assert (tmp_path / f"{name}.png").exists()


def test_fig10_falls_back_to_the_phase1_folder_or_skips(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amorgp_experiments.paper import fig10
    from amorgp_experiments.paper.cache import CellCache
    from amorgp_experiments.paper.context import RunContext

    cfg = replace(
        PaperConfig.quick_config(),
        model=str(tiny_checkpoint),
        fig10_models=("no-such-phase1", str(tiny_checkpoint)),
    )
    monkeypatch.setattr(fig10, "PHASE1_FALLBACK", tmp_path / "missing")
    ctx = RunContext(cfg, tmp_path, CellCache(tmp_path), progress=False)
    assert fig10.resolve_models(ctx) is None
    assert any("not available" in n for n in ctx.notes["fig10"])

    monkeypatch.setattr(fig10, "PHASE1_FALLBACK", tiny_checkpoint)
    ctx = RunContext(cfg, tmp_path, CellCache(tmp_path), progress=False)
    assert fig10.resolve_models(ctx) == {
        "without fine-tuning": str(tiny_checkpoint),
        "with fine-tuning": str(tiny_checkpoint),
    }
