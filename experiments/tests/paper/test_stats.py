"""Summaries and Welch's t-test against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from amorgp_experiments.paper.stats import spread, welch_t_test
from scipy import stats


def test_welch_t_test_matches_scipy() -> None:
    a = [0.21, 0.25, 0.19, 0.30, 0.22]
    b = [0.28, 0.35, 0.31, 0.29]
    ours = welch_t_test(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert ours["t"] == pytest.approx(ref.statistic, rel=1e-12)
    assert ours["p"] == pytest.approx(ref.pvalue, rel=1e-10)
    assert ours["df"] == pytest.approx(ref.df, rel=1e-12)


def test_welch_t_test_degenerate_inputs_are_nan() -> None:
    assert math.isnan(welch_t_test([1.0], [1.0, 2.0])["p"])
    assert math.isnan(welch_t_test([1.0, 1.0], [2.0, 2.0])["t"])


def test_spread_ignores_failures_and_uses_percentiles() -> None:
    values = [float(v) for v in range(1, 11)] + [None, math.nan]
    s = spread(values)
    assert s["median"] == pytest.approx(5.5)
    assert s["low"] == pytest.approx(np.percentile(np.arange(1, 11), 20))
    assert s["high"] == pytest.approx(np.percentile(np.arange(1, 11), 80))
    assert (s["n"], s["n_failed"]) == (10, 2)
    assert math.isnan(spread([None])["median"])
