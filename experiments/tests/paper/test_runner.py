"""A tiny paper run: cells, resume without recomputation, report from the cache, the oracle."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from amorgp_experiments.paper import PaperConfig, run_paper
from amorgp_experiments.paper import real as real_module
from amorgp_experiments.paper.cache import CellCache
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.protocol import load_dataset, make_split, scores

from amorgp.diff_linalg.testing import dense_gp_predictive


@pytest.fixture(scope="module")
def toy_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 5, 45))
    y = np.sin(2 * x) + 0.1 * rng.normal(size=45) + 3.0
    path = tmp_path_factory.mktemp("toy") / "toy.csv"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="x,y", comments="")
    return path


def _config(toy_csv: Path, model: Path) -> PaperConfig:
    return replace(
        PaperConfig.quick_config(),
        experiments=("fig3",),
        datasets=(str(toy_csv),),
        kernel_ids=(3, 10),
        methods=("amortized", "gp-ml", "sklearn"),
        method_options={"gp-ml": {"max_iters": 20}},
        model=str(model),
    )


def _count_predict(monkeypatch: pytest.MonkeyPatch, interrupt_at: int = 0) -> list[str]:
    """Count the calls of the real-data method runner (``interrupt_at``: Ctrl-C at that call)."""
    monkeypatch.undo()
    calls: list[str] = []
    original = real_module._predict

    def counting(ctx: Any, method: str, sp: Any, kernels: Any) -> Any:
        calls.append(method)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return original(ctx, method, sp, kernels)

    monkeypatch.setattr(real_module, "_predict", counting)
    return calls


def test_second_run_recomputes_nothing(
    toy_csv: Path, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_predict(monkeypatch)
    cfg = _config(toy_csv, tiny_checkpoint)
    with torch.random.fork_rng(devices=[]):
        first = run_paper(cfg, tmp_path, progress=False)
    assert sorted(calls) == ["amortized", "gp-ml", "sklearn"]
    assert first["cells_computed"] == 6  # 2 kernels x 3 methods (one input: sklearn fits both)
    cells = first["experiments"]["fig3"]["cells"]
    assert {(c["kernel"], c["method"]) for c in cells} >= {("SE", "sklearn"), ("SE + PER", "gp-ml")}

    calls.clear()
    second = run_paper(cfg, tmp_path, progress=False)
    assert calls == []
    assert second["cells_computed"] == 0
    assert second["experiments"]["fig3"]["cells"] == cells

    report = run_paper(cfg, tmp_path, progress=False, report_only=True)
    assert calls == []
    assert [r["cells"] for r in report["runs"]] == [6, 0]  # report-only runs are not logged
    assert report["experiments"]["fig3"]["summary"] == first["experiments"]["fig3"]["summary"]
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) >= {"config", "environment", "experiments", "notes"}
    assert "torch" in data["environment"]["versions"]
    assert (tmp_path / "fig3.png").stat().st_size > 1000
    assert "![fig3](fig3.png)" in (tmp_path / "README.md").read_text()


def test_amortized_scores_match_a_dense_float64_oracle(
    toy_csv: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The cell of an SE fit equals the exact GP predictive recomputed densely."""
    cfg = _config(toy_csv, tiny_checkpoint)
    ctx = RunContext(cfg, tmp_path, CellCache(tmp_path), progress=False)
    sp = make_split(load_dataset(toy_csv), 0)
    cell = real_module._cell_values(*real_module._predict(ctx, "amortized", sp, ["SE"]), sp)[0]

    amz = ctx.amortizer()
    res = amz.infer(sp.X_train, sp.y_train, "SE", refine=0)  # "amortized": no refinement
    h = res.hyperparameters
    s2, ell = h[(0, 0, "variance")], h[(0, 0, "lengthscale")]
    norm = res.normalizer
    xn = norm.transform_x(sp.X_train).numpy()[:, 0]
    xs = norm.transform_x(sp.X_test).numpy()[:, 0]
    yn = norm.transform_y(sp.y_train).numpy()

    def k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return s2 * np.exp(-((a[:, None] - b[None, :]) ** 2) / (2 * ell**2))

    mean, var = dense_gp_predictive(k(xn, xn), k(xn, xs), np.full(len(xs), s2), yn, res.noise)
    # normalised units are the standardised units of the protocol (training mean, population sd)
    rmse, nll = scores(mean, var, (sp.y_test - sp.mu) / sp.sd)
    assert cell["rmse"] == pytest.approx(rmse, rel=1e-8)
    assert cell["nll"] == pytest.approx(nll, rel=1e-8)


def test_an_interrupted_run_writes_its_report_and_continues(
    toy_csv: Path, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_predict(monkeypatch, interrupt_at=2)
    cfg = _config(toy_csv, tiny_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run_paper(cfg, tmp_path, progress=False)
    assert "interrupted" in (tmp_path / "README.md").read_text()
    assert calls == ["amortized", "gp-ml"]

    calls = _count_predict(monkeypatch)
    rec = run_paper(cfg, tmp_path, progress=False)
    assert calls == ["gp-ml", "sklearn"]  # the amortized cells were kept
    assert rec["cells_computed"] == 4


def test_report_view_widens_a_subset_to_its_protocol(toy_csv: Path) -> None:
    full = PaperConfig.full()
    assert full.report_view() == full
    sub = replace(
        full, experiments=("fig3",), datasets=("yacht", str(toy_csv)), splits=1, methods=("map",)
    )
    view = sub.report_view()
    assert view.experiments == full.experiments
    assert view.datasets == (*full.datasets, str(toy_csv))
    assert view.splits == full.splits
    assert view.methods == full.methods
    assert view.kernel_ids == sub.kernel_ids  # a Fig. 4 ensemble cell is keyed by its kernels
    quick = replace(PaperConfig.quick_config(), splits=4)
    assert quick.report_view().splits == 4
    assert quick.report_view().datasets == PaperConfig.quick_config().datasets


def test_a_run_on_a_subset_keeps_the_rest_of_the_report(
    toy_csv: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    base = _config(toy_csv, tiny_checkpoint)
    run_paper(replace(base, methods=("amortized",)), tmp_path, progress=False)
    (tmp_path / "NOTES.md").write_text("**Status.** Half of the methods are done.\n")
    rec = run_paper(replace(base, methods=("gp-ml",)), tmp_path, progress=False)
    assert rec["cells_computed"] == 2  # only the new method's cells
    methods = {c["method"] for c in rec["experiments"]["fig3"]["cells"]}
    assert methods == {"amortized", "gp-ml"}  # the first run's rows are still reported
    assert set(rec["experiments"]) == set(PaperConfig.full().experiments)
    readme = (tmp_path / "README.md").read_text()
    assert readme.index("**Status.** Half of the methods are done.") < readme.index("## Fig. 3")
