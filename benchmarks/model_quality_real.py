"""Real-data part of the model-quality benchmark: the paper protocol against the targets.

Protocol (Bitzer et al. 2023, Section 4): on every bundled dataset, random splits with
``n_train = 500`` (airline 100, yacht 250) and the rest as test points (capped at
1000); the 24 evaluation kernels of Appendix A, each in every input dimension.
Methods, side by side in one run on the same splits:

* ``amortized`` and ``amortized + refine k`` (k = 5, 20, 50 L-BFGS iterations of
  Type-2 ML from the network's prediction), all 24 kernels in one call;
* ``Type-2 ML``: the best of 5 L-BFGS starts per kernel (``amorgp.baselines``,
  ``gp-ml-lbfgs`` with 5 restarts; the default start and 4 drawn from the priors);
* for SE-ARD (``SE`` in every dimension) also scikit-learn's
  ``GaussianProcessRegressor`` (``C * RBF(ARD) + White``, one L-BFGS-B start), the
  tool users know, timed fit + predict.

Per (dataset, split, kernel): test RMSE and mean test NLL in standardised target units
(the training targets' mean and standard deviation), and the wall-clock time.  The
splits, scores, methods and the per-cell cache are those of ``amorgp benchmark paper``
(:mod:`amorgp_experiments.paper`); cells are cached under ``--cache``, so an interrupted
run continues.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from amorgp_experiments.paper import PaperConfig, RunContext
from amorgp_experiments.paper.cache import CellCache
from amorgp_experiments.paper.protocol import PAPER_TABLE1_SE_ARD
from amorgp_experiments.paper.real import SE_ARD, kernel_templates, real_cells

REFINE_LEVELS = (0, 5, 20, 50)
TYPE2ML = "gp-ml-lbfgs"


def _method(k: int) -> str:
    return "amortized" if k == 0 else f"amortized+refine{k}"


def evaluate(
    checkpoint: str | Path,
    datasets: list[str],
    splits: int,
    restarts: int,
    cache_dir: Path,
    n_kernels: int = 24,
    log: Any = print,
) -> dict[str, Any]:
    """Every number of the real-data protocol (see the module docstring).

    The cells are those of ``amorgp benchmark paper`` (:mod:`amorgp_experiments.paper`),
    cached under ``cache_dir/cells`` so that an interrupted run continues.
    """
    config = PaperConfig(
        experiments=("fig3",),
        datasets=tuple(datasets),
        splits=splits,
        kernel_ids=tuple(range(n_kernels)),
        methods=(*(_method(k) for k in REFINE_LEVELS), TYPE2ML, "sklearn"),
        method_options={TYPE2ML: {"restarts": restarts, "init": "default"}},
        model=str(checkpoint),
    )
    ctx = RunContext(config, cache_dir, CellCache(cache_dir), progress=False)
    kernels = kernel_templates(config.kernel_ids)
    if SE_ARD not in kernels:
        kernels.append(SE_ARD)
    cells = real_cells(ctx, config.methods[:-1], kernels, "model-quality")
    cells += real_cells(ctx, ["sklearn"], [SE_ARD], "model-quality")  # SE-ARD only
    log(f"  paper protocol: {len(cells)} cells ({ctx.cache.computed} computed)")
    return {"cells": cells, "summary": summarise(cells, kernel_templates(config.kernel_ids))}


def summarise(cells: list[dict[str, Any]], kernels: list[str]) -> dict[str, Any]:
    """Median RMSE ratios / NLL differences to Type-2 ML and speed-ups, per refine level."""
    by = {(c["dataset"], c["split"], c["kernel"], c["method"]): c for c in cells}
    out: dict[str, Any] = {}
    for k in REFINE_LEVELS:
        ratios, dnll, t_amz, t_t2 = [], [], 0.0, 0.0
        for (ds, sp, kern, m), a in by.items():
            b = by.get((ds, sp, kern, TYPE2ML))
            if m != _method(k) or kern not in kernels or b is None:
                continue
            t_amz += a["time_s"]
            t_t2 += b["time_s"]
            vals = (a["rmse"], a["nll"], b["rmse"], b["nll"])
            if all(v is not None and math.isfinite(v) for v in vals):
                ratios.append(a["rmse"] / b["rmse"])
                dnll.append(a["nll"] - b["nll"])
        out[f"refine{k}"] = {
            "median_rmse_ratio": statistics.median(ratios) if ratios else math.nan,
            "median_nll_diff": statistics.median(dnll) if dnll else math.nan,
            "speedup_vs_type2ml": t_t2 / t_amz if t_amz else math.nan,
            "pairs": len(ratios),
        }
    se: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (ds, _split, kern, m), c in by.items():
        if kern == SE_ARD and m in ("amortized", "sklearn") and c["rmse"] is not None:
            se[ds][m].append(c["rmse"])
            se[ds][f"t_{m}"].append(c["time_s"])
    out["se_ard"] = {
        name: {
            "amortized_rmse": statistics.mean(d["amortized"]),
            "sklearn_rmse": statistics.mean(d["sklearn"]),
            "paper_amortized_rmse": PAPER_TABLE1_SE_ARD.get(name),
            "speedup_vs_sklearn": statistics.median(d["t_sklearn"])
            / statistics.median(d["t_amortized"]),
        }
        for name, d in se.items()
        if d["amortized"] and d["sklearn"]
    }
    return out


def markdown(result: dict[str, Any]) -> list[str]:
    s = result["summary"]
    targets = {0: ("<= 1.15", "<= 0.1"), 5: ("<= 1.02", ""), 20: ("<= 1.00", ""), 50: ("", "")}
    lines = [
        "## Real data, paper protocol (targets of the model-quality issue)",
        "",
        "Median over (dataset, split, kernel) of the test-RMSE ratio to Type-2 ML (best of 5 L-BFGS starts) and of the "
        "test-NLL difference (nats per point, standardised targets); speed-up = total Type-2 ML time / total amortized time "
        "(24 kernels per call, predictions included).",
        "",
        "| method | median RMSE ratio | target | median NLL difference | target | speed-up vs Type-2 ML | pairs |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in REFINE_LEVELS:
        r = s[f"refine{k}"]
        label = "amortized" if k == 0 else f"amortized + refine {k}"
        lines.append(
            f"| {label} | {r['median_rmse_ratio']:.3f} | {targets[k][0]} | {r['median_nll_diff']:+.3f} | {targets[k][1]} | "
            f"x{r['speedup_vs_type2ml']:.1f} | {r['pairs']} |"
        )
    lines += [
        "",
        "SE-ARD (`SE` in every dimension): mean test RMSE over splits (standardised), the paper's amortized Table 1 value, "
        "and the speed-up of the amortized fit + predict over scikit-learn's `GaussianProcessRegressor` (one start).",
        "",
        "| dataset | amortized | scikit-learn GPR | paper amortized (Table 1) | speed-up vs scikit-learn |",
        "|---|---|---|---|---|",
    ]
    for name, r in s["se_ard"].items():
        paper = "-" if r["paper_amortized_rmse"] is None else f"{r['paper_amortized_rmse']:.4f}"
        lines.append(
            f"| {name} | {r['amortized_rmse']:.4f} | {r['sklearn_rmse']:.4f} | {paper} | x{r['speedup_vs_sklearn']:.0f} |"
        )
    return lines
