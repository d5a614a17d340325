"""Summaries of cells: medians with percentile spreads, and Welch's two-sample t-test."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["spread", "welch_t_test"]


def spread(values: Sequence[float | None], low: float = 20.0, high: float = 80.0) -> dict[str, Any]:
    """Median and the ``low``/``high`` percentiles of the finite entries.

    Returns:
        ``{"median", "low", "high", "n", "n_failed"}`` (NaN statistics when nothing is finite).
    """
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    failed = len(values) - v.size
    if v.size == 0:
        return {"median": math.nan, "low": math.nan, "high": math.nan, "n": 0, "n_failed": failed}
    lo, med, hi = np.percentile(v, [low, 50.0, high])
    return {
        "median": float(med),
        "low": float(lo),
        "high": float(hi),
        "n": int(v.size),
        "n_failed": failed,
    }


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's two-sample t-test of equal means (unequal variances), two-sided.

    ``t = (mean_a - mean_b) / sqrt(s_a^2 / n_a + s_b^2 / n_b)`` with sample variances
    (``ddof = 1``) and the Welch-Satterthwaite degrees of freedom
    ``nu = (s_a^2/n_a + s_b^2/n_b)^2 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))``;
    ``p = 2 (1 - F_t(|t|; nu))``.

    Returns:
        ``{"t", "df", "p"}``; NaN where fewer than 2 values per sample or both samples
        have zero variance.
    """
    from scipy import stats

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        return {"t": math.nan, "df": math.nan, "p": math.nan}
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se2 = va + vb
    if se2 <= 0:
        return {"t": math.nan, "df": math.nan, "p": math.nan}
    t = (x.mean() - y.mean()) / math.sqrt(se2)
    df = se2**2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    p = 2.0 * float(stats.t.sf(abs(t), df))
    return {"t": float(t), "df": float(df), "p": p}
