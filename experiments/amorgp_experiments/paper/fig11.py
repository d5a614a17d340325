"""Fig. 11 of the paper: MAP vs Type-2 ML vs amortized inference on real data.

The cells are those of Fig. 3 (shared, computed once): ``map`` (Type-2 ML plus the
log prior of the parameter specs, Adam), ``gp-ml`` (Type-2 ML, Adam, same budget) and
``amortized``.  Per dataset: the spreads over kernels of RMSE and NLL, and the share
of (kernel, split) pairs on which MAP's test NLL is below Type-2 ML's.
"""

from __future__ import annotations

from typing import Any

from amorgp_experiments.paper import fig3
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.real import kernel_templates, real_cells

__all__ = ["METHODS", "run"]

METHODS = ("amortized", "gp-ml", "map")


def run(ctx: RunContext) -> dict[str, Any]:
    """Compute (or read back) the cells and summarise them."""
    kernels = kernel_templates(ctx.config.kernel_ids)
    cells = real_cells(ctx, METHODS, kernels, "fig11")
    by = {(c["dataset"], c["split"], c["kernel"], c["method"]): c for c in cells}
    wins: dict[str, list[bool]] = {}
    for (ds, split, k, m), c in by.items():
        other = by.get((ds, split, k, "gp-ml"))
        if m == "map" and other and c["nll"] is not None and other["nll"] is not None:
            wins.setdefault(ds, []).append(c["nll"] < other["nll"])
    return {
        "kernels": kernels,
        "cells": cells,
        "summary": fig3.summarise(cells),
        "map_better_nll_share": {ds: sum(w) / len(w) for ds, w in wins.items()},
    }


def markdown(result: dict[str, Any]) -> list[str]:
    lines = fig3.markdown(result)
    shares = result["map_better_nll_share"]
    if shares:
        lines += [
            "Share of (kernel, split) pairs where MAP's test NLL is below Type-2 ML's: "
            + ", ".join(f"{ds} {100 * s:.0f} %" for ds, s in shares.items())
            + ".",
            "",
        ]
    return lines


def figure(result: dict[str, Any], path: Any) -> bool:
    return fig3.figure(result, path)


def findings(result: dict[str, Any]) -> str:
    parts = []
    for ds, methods in result["summary"].items():
        if not all(m in methods for m in METHODS):
            continue
        nll = {m: methods[m]["nll"]["median"] for m in METHODS}
        best = min(nll, key=lambda m: nll[m])
        parts.append(
            f"{ds}: median test NLL amortized {nll['amortized']:.3f}, Type-2 ML "
            f"{nll['gp-ml']:.3f}, MAP {nll['map']:.3f} (best: {best})."
        )
    if not parts:
        return "No comparison available."
    return (
        " ".join(parts) + " The paper's Fig. 11 numbers are not in this repository, so "
        "only the side-by-side comparison of this run is reported."
    )
