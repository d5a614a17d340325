"""``python -m amorgp_experiments.ship_check --quick``: the cell-by-cell comparison of two networks.

The oracle is the library's own API on the paper protocol's split, outside the benchmark:
each network's test RMSE on airline's split 0 for the two quick kernels, computed with
``Amortizer.infer_many`` and the protocol's scoring, gives the ratios the check reports.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest


def _direct_rmse(model: str, calibrate: bool) -> list[float]:
    from amorgp_experiments.paper.protocol import load_dataset, make_split, scores
    from amorgp_experiments.paper.real import kernel_templates

    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import DimWiseStructure

    sp = make_split(load_dataset("airline"), 0)
    amz = Amortizer.from_pretrained(model, calibrate=calibrate)
    structs = [DimWiseStructure.coerce(k, sp.X_train.shape[1]) for k in kernel_templates([0, 1])]
    # the paper's method: the network's prediction alone (no refinement, one start)
    fits = amz.infer_many(sp.X_train, sp.y_train, structs, refine=0, starts=1)
    out = []
    for f in fits:
        m, v = f.predict(sp.X_test)
        out.append(scores(np.asarray(m), np.asarray(v), sp.y_test, sp.mu, sp.sd)[0])
    return out


@pytest.mark.parametrize("candidate", ["default", "small-d4-v1"])
def test_ship_check_matches_the_api(
    tmp_path: Path, candidate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amorgp_experiments import ship_check as sc

    # a relative work folder outside the repository root (the benchmark runs from the
    # root): the check reads what the benchmark wrote there
    monkeypatch.chdir(tmp_path)
    sc.main(["--quick", candidate, "--work", "work", "--json", str(tmp_path / "c.json")])
    assert (tmp_path / "work" / "base" / "results.json").is_file()
    table = json.loads((tmp_path / "c.json").read_text())["table"]
    for method, calibrate in (("amortized", False), ("amortized+calibrate", True)):
        row = table[method]["airline"]
        assert row["cells"] == 2
        base = _direct_rmse("default", calibrate)
        cand = _direct_rmse(candidate, calibrate)
        want = statistics.median(c / b for c, b in zip(cand, base, strict=True))
        np.testing.assert_allclose(row["rmse_ratio"], want, rtol=1e-6)
        if candidate == "default":
            assert row["better"] == 0.0
            assert row["nll_diff"] == 0.0
        else:  # the first model against the campaign's: different predictions
            assert row["rmse_ratio"] != 1.0
        # the kernel groups: LIN*PER has a period, SE*LIN none (the quick kernels)
        ratios = [c / b for c, b in zip(cand, base, strict=True)]
        groups = json.loads((tmp_path / "c.json").read_text())["overall"][method]["groups"]
        assert groups["with PER"]["cells"] == groups["without PER"]["cells"] == 1
        np.testing.assert_allclose(groups["with PER"]["rmse_ratio"], ratios[0], rtol=1e-6)
        np.testing.assert_allclose(groups["without PER"]["rmse_ratio"], ratios[1], rtol=1e-6)


@pytest.mark.slow
def test_ship_check_with_a_candidate_network_matches_the_api(tmp_path: Path) -> None:
    """``--with-candidate``: the candidate as the primary network beside another; the
    ratios are those of ``Amortizer.from_pretrained(primary, candidates=[...])``.  The
    paired network shares small-d4-v1's vocabulary (the bundled ``default``, with MAT52,
    cannot be its candidate); the ratios are still against ``default``."""
    from amorgp_experiments import ship_check as sc
    from amorgp_experiments.paper.protocol import load_dataset, make_split, scores
    from amorgp_experiments.paper.real import kernel_templates

    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import DimWiseStructure

    paired = "small-d8-c1142k"
    work = tmp_path / "work"
    out = tmp_path / "c.json"
    sc.main(["--quick", "small-d4-v1", "--with-candidate", paired, "--work", str(work),
             "--json", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    sp = make_split(load_dataset("airline"), 0)
    structs = [DimWiseStructure.coerce(k, sp.X_train.shape[1]) for k in kernel_templates([0, 1])]
    for method, calibrate in (("amortized", False), ("amortized+calibrate", True)):
        pair = Amortizer.from_pretrained("small-d4-v1", calibrate=calibrate, candidates=[paired])
        cand = []
        for f in pair.infer_many(sp.X_train, sp.y_train, structs, refine=0, starts=1):
            m, v = f.predict(sp.X_test)
            cand.append(scores(np.asarray(m), np.asarray(v), sp.y_test, sp.mu, sp.sd)[0])
        base = _direct_rmse("default", calibrate)
        ratios = [c / b for c, b in zip(cand, base, strict=True)]
        row = result["table"][method]["airline"]
        np.testing.assert_allclose(row["rmse_ratio"], statistics.median(ratios), rtol=1e-6)
        total = result["overall"][method]
        assert total["cells"] == 2
        assert total["better"] == sum(r < 1 - sc.TIE for r in ratios) / 2
        assert total["worse"] == sum(r > 1 + sc.TIE for r in ratios) / 2
        # each cell's fit is one of the two networks' own fits (the likelihood picks one)
        alone = _direct_rmse("small-d4-v1", calibrate)
        other = _direct_rmse(paired, calibrate)
        for c, a, b in zip(cand, alone, other, strict=True):
            assert min(abs(c - a), abs(c - b)) <= 1e-6 * c
