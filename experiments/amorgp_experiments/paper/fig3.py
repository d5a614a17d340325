"""Fig. 3 / Fig. 5 of the paper: every method over the evaluation kernels, per dataset.

For each dataset and method: the median and the 20/80 percentiles over the kernels
of the test RMSE and NLL (each kernel's score averaged over the splits first), and
the median time per kernel with its ratio to the amortizer's (log-scale figure).

A method's row may cover fewer kernels or splits than another's while a long run is
under way (cells are cached as they finish): the tables give each row's coverage, and
the findings compare two methods kernel by kernel, on the kernels and splits both have.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.real import kernel_templates, real_cells
from amorgp_experiments.paper.stats import spread

__all__ = ["paired_ratio", "run", "summarise"]


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
        kernel, "time_ratio": time_s / amortized time_s, "kernels": kernels with a cell,
        "cells": cells, "splits": sorted splits, "by_cell": {"kernel|split": RMSE}}}}``.
    """
    per: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in cells:
        per[(c["dataset"], c["method"], c["kernel"])].append(c)
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for (ds, m, k), cs in per.items():
        slot = grouped.setdefault(ds, {}).setdefault(
            m, {"rmse": [], "nll": [], "time": [], "splits": set(), "by_cell": {}}
        )
        slot["rmse"].append(_mean([c["rmse"] for c in cs]))
        slot["nll"].append(_mean([c["nll"] for c in cs]))
        slot["time"].extend(c["time_s"] for c in cs)
        slot["splits"].update(c["split"] for c in cs)
        slot["by_cell"].update({f"{k}|{c['split']}": c["rmse"] for c in cs})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for ds, methods in grouped.items():
        out[ds] = {}
        for m, s in methods.items():
            times = [t for t in s["time"] if t is not None]
            out[ds][m] = {
                "rmse": spread(s["rmse"]),
                "nll": spread(s["nll"]),
                "time_s": statistics.median(times) if times else math.nan,
                "kernels": len(s["rmse"]),
                "cells": len(s["by_cell"]),
                "splits": sorted(s["splits"]),
                "by_cell": s["by_cell"],
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
        "kernel (fit + prediction) and its ratio to the amortizer's; coverage: the "
        "kernels and splits the row has (a row of fewer kernels is a median over those "
        "only, so compare rows of equal coverage, or the paired findings below).",
        "",
        f"Kernels: {', '.join(f'`{k}`' for k in result['kernels'])}.",
        "",
    ]
    n_kernels = len(result["kernels"])
    for ds, methods in result["summary"].items():
        lines += [
            f"**{ds}**",
            "",
            "| method | RMSE | NLL | time / kernel (s) | time / amortized | coverage |",
            "|---|---|---|---|---|---|",
        ]
        for m, r in methods.items():
            lines.append(
                f"| {m} | {_fmt(r['rmse'])} | {_fmt(r['nll'])} | {r['time_s']:.3g} | "
                f"{r['time_ratio']:.3g} | {_coverage(r, n_kernels)} |"
            )
        lines.append("")
    return lines


def _coverage(r: dict[str, Any], n_kernels: int) -> str:
    """``"k/K kernels, splits a, b (c cells)"`` of a summary row."""
    splits = ", ".join(str(s) for s in r["splits"])
    return f"{r['kernels']}/{n_kernels} kernels, splits {splits} ({r['cells']} cells)"


def paired_ratio(a: dict[str, Any], ref: dict[str, Any]) -> tuple[float, int, int]:
    """Median over the (kernel, split) cells both rows have of ``a``'s RMSE / ``ref``'s.

    Returns:
        ``(median ratio, cells compared, kernels compared)``; NaN and 0 when none.
    """
    both = [
        (key, a["by_cell"][key] / ref["by_cell"][key])
        for key in a["by_cell"]
        if a["by_cell"][key] is not None
        and ref["by_cell"].get(key) is not None
        and ref["by_cell"][key] > 0
    ]
    if not both:
        return math.nan, 0, 0
    kernels = {key.rsplit("|", 1)[0] for key, _ in both}
    return statistics.median(r for _, r in both), len(both), len(kernels)


def figure(result: dict[str, Any], path: Any) -> bool:
    """RMSE, NLL and time (log scale) per method, one row of panels per dataset."""
    from amorgp_experiments.paper.figures import errorbar_panel, save_figure, subplots

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
    return save_figure(fig, path)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _against(methods: dict[str, Any], ref_name: str) -> str | None:
    """``"1.09 against `gp-ml-lbfgs` (8 cells, 6 kernels; ...)"`` or ``None`` (no pairs)."""
    ref = methods[ref_name]
    ratio, n_cells, n_k = paired_ratio(methods["amortized"], ref)
    if not n_cells:
        return None
    where = f"{_plural(n_cells, 'cell')}, {_plural(n_k, 'kernel')}"
    text = (
        f"{ratio:.2f} against `{ref_name}` ({where}; it takes x{ref['time_ratio']:.0f} the "
        "amortizer's time per kernel"
    )
    cal = methods.get("amortized+calibrate")
    if cal is not None:
        ratio_c, n_c, _ = paired_ratio(cal, ref)
        if n_c:
            text += f"; with the scale and noise calibrated {ratio_c:.2f}"
    r20 = methods.get("amortized+refine20")
    if r20 is not None:
        ratio20, n20, _ = paired_ratio(r20, ref)
        if n20:
            text += f"; after 20 refinement steps {ratio20:.2f}"
    return text + ")"


def findings(result: dict[str, Any]) -> str:
    """One paragraph: amortized vs Type-2 ML and the refined amortizer, per dataset.

    Each Type-2 ML variant (L-BFGS, Adam) is compared kernel by kernel on the (kernel,
    split) cells both rows have: the median of the per-cell RMSE ratios.
    """
    parts = []
    for ds, methods in result["summary"].items():
        if "amortized" not in methods:
            continue
        against = [
            t for m in ("gp-ml-lbfgs", "gp-ml") if m in methods and (t := _against(methods, m))
        ]
        if against:
            parts.append(
                f"{ds}: amortized / Type-2 ML test RMSE, median over the common cells, "
                + "; ".join(against)
                + "."
            )
    if not parts:
        return "No comparison available (amortized or Type-2 ML cells missing)."
    return (
        " ".join(parts)
        + " The paper (Fig. 3) reports the amortizer close to Type-2 ML in RMSE at a "
        "fraction of its time (its per-method numbers are not in this repository); the "
        "network here was trained on a CPU budget far below the paper's."
    )
