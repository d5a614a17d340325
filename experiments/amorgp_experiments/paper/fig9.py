"""Fig. 9 of the paper: the n_train sweep on simulated data.

For each ``n`` of ``config.sweep_sizes``: ``config.sweep_pairs`` positive pairs from
the paper prior with ``n`` training points and ``d = 2`` inputs (50 test points each);
amortized vs Type-2 ML vs ground truth, as in Fig. 2b.
"""

from __future__ import annotations

from typing import Any

from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.simulated import markdown_table, simulated_cells, summarise_methods

__all__ = ["run"]

METHODS = ["amortized", "type2ml", "ground truth"]
SEED = 20_230_917


def run(ctx: RunContext) -> dict[str, Any]:
    """Per ``n``: per-pair metrics and their summaries."""
    out: dict[str, Any] = {}
    for n in ctx.config.sweep_sizes:
        settings = {
            "n_min": n,
            "n_max": n,
            "d_max": 2,
            "p_dims": 1e-6,
            "pairs": ctx.config.sweep_pairs,
            "seed": SEED + n,
        }
        per = simulated_cells(ctx, f"n={n}", settings, METHODS, ctx.config.sim_restarts, "fig9")
        out[str(n)] = {"pairs": per, "summary": summarise_methods(per)}
    return {"sizes": list(ctx.config.sweep_sizes), "by_n": out}


def markdown(result: dict[str, Any]) -> list[str]:
    lines = ["Simulated pairs with d = 2 (50 test points each); median [quartiles] over pairs.", ""]
    for n, r in result["by_n"].items():
        lines += [f"**n_train = {n}**", "", *markdown_table(r["summary"]), ""]
    return lines


def figure(result: dict[str, Any], path: Any) -> bool:
    """Median test NLL and RMSE against n with quartile bands."""
    from amorgp_experiments.paper.figures import label_axis, save_figure, subplots

    if not result["by_n"]:
        return False
    fig, axes = subplots(1, 2, width=9.0, height=3.6)
    ns = [int(n) for n in result["by_n"]]
    for ax, key in zip(axes[0], ("nll", "rmse"), strict=True):
        for m in METHODS:
            rows = [result["by_n"][str(n)]["summary"].get(m) for n in ns]
            if any(r is None or not r[key]["n"] for r in rows):
                continue  # a size without pairs yet
            med = [r[key]["median"] for r in rows if r is not None]
            lo = [r[key]["q25"] for r in rows if r is not None]
            hi = [r[key]["q75"] for r in rows if r is not None]
            ax.plot(ns, med, marker="o", label=m)
            ax.fill_between(ns, lo, hi, alpha=0.15)
        label_axis(ax, "n_train", f"test {key.upper()}", logx=True)
    return save_figure(fig, path)


def findings(result: dict[str, Any]) -> str:
    parts = []
    for n, r in result["by_n"].items():
        s = r["summary"]
        if all(m in s for m in METHODS):
            a, t, g = (s[m]["nll"]["median"] for m in METHODS)
            parts.append(f"n = {n}: amortized {a:.3f}, Type-2 ML {t:.3f}, truth {g:.3f}")
    if not parts:
        return "Not every method was computed."
    return (
        "Median test NLL per point: "
        + "; ".join(parts)
        + ". The paper's Fig. 9 numbers are not in this repository."
    )
