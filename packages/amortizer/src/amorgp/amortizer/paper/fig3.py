"""Fig. 3 / Fig. 5 of the paper: every method over the evaluation kernels, per dataset.

For each dataset and method: the median and the 20/80 percentiles over the kernels
of the test RMSE and NLL (each kernel's score averaged over the splits first), and
the median time per kernel with its ratio to the amortizer's (log-scale figure).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from amorgp.amortizer.paper.context import RunContext
from amorgp.amortizer.paper.real import kernel_templates, real_cells
from amorgp.amortizer.paper.stats import spread

__all__ = ["run", "summarise"]


def _available_methods(ctx: RunContext) -> list[str]:
    methods = list(ctx.config.methods)
    if "sklearn" in methods:
        try:
            import sklearn  # noqa: F401
        except ImportError:
            ctx.note("fig3", "scikit-learn is not installed: its column is skipped")
            methods.remove("sklearn")
    return methods


def run(ctx: RunContext) -> dict[str, Any]:
    """Compute (or read back) the cells of Fig. 3 and summarise them."""
    kernels = kernel_templates(ctx.config.kernel_ids)
    cells = real_cells(ctx, _available_methods(ctx), kernels, "fig3")
    return {"kernels": kernels, "cells": cells, "summary": summarise(cells)}


def _mean(values: list[float | None]) -> float | None:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return statistics.fmean(v) if len(v) == len(values) and v else None


def summarise(cells: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per dataset and method: RMSE/NLL spreads over kernels, median time, time ratio.

    Returns:
        ``{dataset: {method: {"rmse": spread, "nll": spread, "time_s": median seconds per
        kernel, "time_ratio": time_s / amortized time_s}}}``.
    """
    per: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in cells:
        per[(c["dataset"], c["method"], c["kernel"])].append(c)
    grouped: dict[str, dict[str, dict[str, list[float | None]]]] = {}
    for (ds, m, _k), cs in per.items():
        slot = grouped.setdefault(ds, {}).setdefault(m, {"rmse": [], "nll": [], "time": []})
        slot["rmse"].append(_mean([c["rmse"] for c in cs]))
        slot["nll"].append(_mean([c["nll"] for c in cs]))
        slot["time"].extend(c["time_s"] for c in cs)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for ds, methods in grouped.items():
        out[ds] = {}
        for m, s in methods.items():
            times = [t for t in s["time"] if t is not None]
            out[ds][m] = {
                "rmse": spread(s["rmse"]),
                "nll": spread(s["nll"]),
                "time_s": statistics.median(times) if times else math.nan,
            }
        ref = out[ds].get("amortized", {}).get("time_s", math.nan)
        for r in out[ds].values():
            r["time_ratio"] = r["time_s"] / ref if ref and math.isfinite(ref) else math.nan
    return out


# --------------------------------------------------------------------------- report
def _fmt(s: dict[str, Any], digits: int = 3) -> str:
    if not s["n"]:
        return "-"
    return f"{s['median']:.{digits}f} [{s['low']:.{digits}f}, {s['high']:.{digits}f}]"


def markdown(result: dict[str, Any]) -> list[str]:
    """Tables: per dataset, one row per method."""
    lines = [
        "Median [20th, 80th percentile] over the kernels of the test RMSE and NLL "
        "(standardised targets; each kernel averaged over the splits), median time per "
        "kernel (fit + prediction) and its ratio to the amortizer's.",
        "",
        f"Kernels: {', '.join(f'`{k}`' for k in result['kernels'])}.",
        "",
    ]
    for ds, methods in result["summary"].items():
        lines += [
            f"**{ds}**",
            "",
            "| method | RMSE | NLL | time / kernel (s) | time / amortized |",
            "|---|---|---|---|---|",
        ]
        for m, r in methods.items():
            lines.append(
                f"| {m} | {_fmt(r['rmse'])} | {_fmt(r['nll'])} | {r['time_s']:.3g} | "
                f"{r['time_ratio']:.3g} |"
            )
        lines.append("")
    return lines


def figure(result: dict[str, Any], path: Any) -> bool:
    """RMSE, NLL and time (log scale) per method, one row of panels per dataset."""
    from amorgp.amortizer.paper.figures import errorbar_panel, save_figure, subplots

    summary = result["summary"]
    if not summary:
        return False
    fig, axes = subplots(len(summary), 3, width=13.0, height=2.6 * len(summary))
    for row, (ds, methods) in zip(axes, summary.items(), strict=True):
        names = list(methods)
        for ax, key, label in zip(row[:2], ("rmse", "nll"), ("test RMSE", "test NLL"), strict=True):
            errorbar_panel(ax, names, [methods[m][key] for m in names], f"{ds}: {label}")
        times = [methods[m]["time_s"] for m in names]
        row[2].barh(names, times, color="tab:gray")
        row[2].set_xscale("log")
        row[2].set_title(f"{ds}: time per kernel (s)", fontsize=9)
        row[2].tick_params(labelsize=7)
    save_figure(fig, path)
    return True


def findings(result: dict[str, Any]) -> str:
    """One paragraph: amortized vs Type-2 ML and the refined amortizer, per dataset."""
    parts = []
    for ds, methods in result["summary"].items():
        a = methods.get("amortized")
        ref = next((methods[m] for m in ("gp-ml-lbfgs", "gp-ml") if m in methods), None)
        if a is None or ref is None or not a["rmse"]["n"] or not ref["rmse"]["n"]:
            continue
        ratio = a["rmse"]["median"] / ref["rmse"]["median"]
        verdict = "better than" if ratio < 0.97 else "worse than" if ratio > 1.03 else "equal to"
        text = (
            f"{ds}: the amortized median RMSE {a['rmse']['median']:.3f} is {verdict} "
            f"Type-2 ML's {ref['rmse']['median']:.3f} (ratio {ratio:.2f}), Type-2 ML taking "
            f"x{ref['time_ratio']:.0f} the amortizer's time per kernel"
        )
        r20 = methods.get("amortized+refine20")
        if r20 is not None and r20["rmse"]["n"]:
            text += f"; with 20 refinement steps {r20['rmse']['median']:.3f}"
        parts.append(text + ".")
    if not parts:
        return "No comparison available (amortized or Type-2 ML cells missing)."
    return (
        " ".join(parts)
        + " The paper (Fig. 3) reports the amortizer close to Type-2 ML in RMSE at a "
        "fraction of its time (its per-method numbers are not in this repository); the "
        "network here was trained on a CPU budget far below the paper's."
    )
