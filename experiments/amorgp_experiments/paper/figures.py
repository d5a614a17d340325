"""Shared matplotlib helpers of the paper report (Agg backend, PNG files)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["errorbar_panel", "label_axis", "save_figure", "subplots"]


def subplots(rows: int, cols: int, width: float, height: float) -> tuple[Any, list[list[Any]]]:
    """A figure and its axes as a ``rows x cols`` nested list."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    return fig, [list(r) for r in axes]


def errorbar_panel(
    ax: Any, names: Sequence[str], spreads: Sequence[dict[str, Any]], title: str
) -> Any:
    """Medians with [low, high] bars (one row per name); NaN rows are left empty."""
    med = [s["median"] for s in spreads]
    lo = [s["median"] - s["low"] if math.isfinite(s["median"]) else 0.0 for s in spreads]
    hi = [s["high"] - s["median"] if math.isfinite(s["median"]) else 0.0 for s in spreads]
    ax.errorbar(med, range(len(names)), xerr=[lo, hi], fmt="o", capsize=3)
    ax.set_yticks(range(len(names)), list(names))
    ax.invert_yaxis()
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    return ax


def label_axis(ax: Any, xlabel: str, ylabel: str, *, logx: bool = False, logy: bool = False) -> Any:
    """Labels, optional log scales, a light grid and a small legend."""
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return ax


def save_figure(fig: Any, path: Path) -> bool:
    """Save ``fig`` as PNG (written beside and renamed: never a torn file), then close it.

    Returns:
        ``False`` (nothing saved) when no axes has data: a report of cells not computed
        yet shows no empty figure.
    """
    import matplotlib.pyplot as plt

    if not any(ax.has_data() for ax in fig.axes):
        plt.close(fig)
        return False
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return True
