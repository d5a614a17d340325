"""Fig. 3 summaries of partially computed runs: coverage per row, paired comparisons."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from amorgp_experiments.paper import fig3


def _cells(method: str, kernels: list[str], splits: list[int], rmse) -> list[dict]:
    return [
        {
            "dataset": "toy",
            "split": s,
            "kernel": k,
            "method": method,
            "rmse": rmse(k, s),
            "nll": 0.0,
            "time_s": 0.1 if method == "amortized" else 2.0,
        }
        for k, s in itertools.product(kernels, splits)
    ]


KERNELS = ["SE", "LIN", "PER", "SE + PER"]
RMSE_A = {"SE": 0.2, "LIN": 0.9, "PER": 0.5, "SE + PER": 0.3}
RMSE_R = {"SE": 0.1, "LIN": 0.3, "PER": 1.0, "SE + PER": 0.6}


def _partial_run() -> list[dict]:
    # the amortizer on every kernel and split; Type-2 ML on two kernels, split 0 only
    amortized = _cells("amortized", KERNELS, [0, 1, 2], lambda k, s: RMSE_A[k] * (1 + s / 10))
    ref = _cells("gp-ml-lbfgs", ["SE", "PER"], [0], lambda k, s: RMSE_R[k])
    return amortized + ref


def test_summary_rows_report_their_coverage() -> None:
    out = fig3.summarise(_partial_run())["toy"]
    assert (out["amortized"]["kernels"], out["amortized"]["cells"]) == (4, 12)
    assert out["amortized"]["splits"] == [0, 1, 2]
    assert (out["gp-ml-lbfgs"]["kernels"], out["gp-ml-lbfgs"]["cells"]) == (2, 2)
    assert out["gp-ml-lbfgs"]["splits"] == [0]
    assert out["gp-ml-lbfgs"]["time_ratio"] == pytest.approx(20.0)
    lines = fig3.markdown({"kernels": KERNELS, "summary": {"toy": out}})
    row = next(line for line in lines if line.startswith("| gp-ml-lbfgs |"))
    assert row.endswith("| 2/4 kernels, splits 0 (2 cells) |")


def test_paired_ratio_uses_only_the_cells_both_rows_have() -> None:
    out = fig3.summarise(_partial_run())["toy"]
    ratio, n_cells, n_kernels = fig3.paired_ratio(out["amortized"], out["gp-ml-lbfgs"])
    # split 0 of SE and PER: 0.2 / 0.1 and 0.5 / 1.0
    assert (n_cells, n_kernels) == (2, 2)
    assert ratio == pytest.approx(float(np.median([2.0, 0.5])))
    # medians over each row's own kernels would compare different kernel sets
    unpaired = out["amortized"]["rmse"]["median"] / out["gp-ml-lbfgs"]["rmse"]["median"]
    assert unpaired != pytest.approx(ratio)
    text = fig3.findings({"summary": {"toy": out}})
    assert "1.25 against `gp-ml-lbfgs` (2 cells, 2 kernels;" in text


def test_paired_ratio_without_common_cells_is_empty() -> None:
    out = fig3.summarise(
        _cells("amortized", ["SE"], [0], lambda k, s: 0.2)
        + _cells("gp-ml", ["LIN"], [1], lambda k, s: 0.3)
    )["toy"]
    ratio, n_cells, _ = fig3.paired_ratio(out["amortized"], out["gp-ml"])
    assert n_cells == 0
    assert np.isnan(ratio)
    assert fig3.findings({"summary": {"toy": out}}).startswith("No comparison available")


def test_findings_name_the_calibrated_ratio() -> None:
    cal = _cells("amortized+calibrate", ["SE", "PER"], [0], lambda k, s: RMSE_R[k] * 1.1)
    out = fig3.summarise(_partial_run() + cal)["toy"]
    text = fig3.findings({"summary": {"toy": out}})
    assert "with the scale and noise calibrated 1.10" in text
