"""Fig. 4 of the paper: fast ensembling.

1. **BMA on real data** (the protocol's splits): test RMSE and NLL (standardised) of the
   amortized Bayesian model average of the evaluation kernels
   (:class:`~amorgp.ensembles.KernelEnsemble`, BMA weights), against the spread of its
   single members and against the BMA of Type-2 ML fits (``gp-ml``) of the same kernels,
   with both times (fit + mixture predictive).
2. **Batched vs one by one** over ``n`` (concrete, d = 8): the amortized ensemble of the
   kernels fitted in one batched call against one kernel and against one call per kernel.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
import warnings
from typing import Any

import numpy as np

from amorgp_experiments.paper.cache import CellKey, config_hash
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.protocol import make_split, scores
from amorgp_experiments.paper.real import kernel_templates
from amorgp_experiments.paper.stats import spread

__all__ = ["bma_scores", "ensemble_timing", "member_scores", "run"]

TIMING_DATASET = "concrete"


def member_scores(
    ens: Any, Xt: np.ndarray, yt: np.ndarray, mu: float = 0.0, sd: float = 1.0
) -> list[tuple[float, float]]:
    """(RMSE, NLL) of every member of ``ens`` that did not fail (units of ``(y - mu) / sd``)."""
    out = []
    for f in ens.fits:
        if f is None or not math.isfinite(float(f.log_marginal_likelihood)):
            continue
        m, v = f.predict(Xt)
        out.append(scores(np.asarray(m), np.asarray(v), yt, mu, sd))
    return out


def bma_scores(
    inference: Any,
    Xtr: np.ndarray,
    ytr: np.ndarray,
    Xte: np.ndarray,
    yte: np.ndarray,
    kernels: list[Any],
    mu: float = 0.0,
    sd: float = 1.0,
) -> dict[str, Any]:
    """The BMA ensemble of ``kernels`` fitted by ``inference``: its scores, its members'
    scores and the seconds of fit + mixture predictive."""
    from amorgp.ensembles import KernelEnsemble

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ens = KernelEnsemble.fit(inference, Xtr, ytr, kernels)
        mix = ens.predictive(Xte)
    dt = time.perf_counter() - t0
    rmse, nll = scores(mix.mean().cpu().numpy(), mix.variance().cpu().numpy(), yte, mu, sd)
    members = member_scores(ens, Xte, yte, mu, sd)
    return {
        "rmse": rmse,
        "nll": nll,
        "members_rmse": [s[0] for s in members],
        "members_nll": [s[1] for s in members],
        "time_s": dt,
    }


def ensemble_timing(
    amz: Any, X: np.ndarray, y: np.ndarray, kernels: list[Any], repeats: int, Xq: np.ndarray
) -> dict[str, float]:
    """Median seconds of one kernel, the batched ensemble, one call per kernel, and the
    batched ensemble plus the mixture predictive at ``Xq``, for the data ``X, y``."""
    from amorgp.ensembles import KernelEnsemble

    jobs = {
        "one": lambda: KernelEnsemble.fit(amz, X, y, kernels[:1]),
        "batched": lambda: KernelEnsemble.fit(amz, X, y, kernels),
        "one_by_one": lambda: [KernelEnsemble.fit(amz, X, y, [k]) for k in kernels],
        "batched_predict": lambda: KernelEnsemble.fit(amz, X, y, kernels).predictive(Xq),
    }
    times: dict[str, list[float]] = {k: [] for k in jobs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(repeats):
            for key, job in jobs.items():
                t0 = time.perf_counter()
                job()
                times[key].append(time.perf_counter() - t0)
    return {f"{k}_s": statistics.median(v) for k, v in times.items()}


def _bma_cell(
    ctx: RunContext, data: Any, structs: list[Any], method: str, split: int, _: list[int]
) -> list[dict[str, Any]]:
    from amorgp.baselines import Baseline

    sp = make_split(data, split)
    inference: Any = (
        ctx.amortizer()
        if method.startswith("amortized")
        else Baseline("gp-ml", **ctx.config.options("gp-ml"))
    )
    if method.startswith("amortized+calibrate"):
        inference = inference.method(calibrate=True)
    args = (sp.X_train, sp.y_train, sp.X_test, sp.y_test, structs)
    return [bma_scores(inference, *args, sp.mu, sp.sd)]


def _bma_cells(ctx: RunContext, kernels: list[str]) -> list[dict[str, Any]]:
    from amorgp.kernel_grammar import DimWiseStructure

    ident = ctx.identity(ctx.config.model)
    methods = {
        "amortized BMA": config_hash({"m": "amortized", "model": ident, "k": kernels}),
        "amortized+calibrate BMA": config_hash(
            {"m": "amortized+calibrate", "model": ident, "k": kernels}
        ),
        "Type-2 ML BMA": config_hash(
            {"m": "gp-ml", "o": ctx.config.options("gp-ml"), "k": kernels}
        ),
    }
    rows = []
    names = ctx.dataset_names()
    with ctx.bar(len(names) * ctx.config.splits * len(methods), "fig4: BMA") as bar:
        for path, name in zip(ctx.config.datasets, names, strict=True):
            data = ctx.dataset(path)
            structs = [DimWiseStructure.coerce(k, data.X.shape[1]) for k in kernels]
            for split in range(ctx.config.splits):
                for method, h in methods.items():
                    compute = functools.partial(_bma_cell, ctx, data, structs, method, split)
                    key = CellKey("fig4", name, split, "-", method, h)
                    value = ctx.cache.get_many([key], compute)[0]
                    if value is not None:
                        rows.append({"dataset": name, "split": split, "method": method, **value})
                    bar.update(1)
    return rows


def _timing_cells(ctx: RunContext, kernels: list[str]) -> list[dict[str, Any]]:
    from amorgp.kernel_grammar import DimWiseStructure

    data = ctx.dataset(TIMING_DATASET)
    structs = [DimWiseStructure.coerce(k, data.X.shape[1]) for k in kernels]
    h = config_hash(
        {"model": ctx.identity(ctx.config.model), "k": kernels, "r": ctx.config.ensemble_repeats}
    )
    rows = []
    with ctx.bar(len(ctx.config.ensemble_sizes), "fig4: timing") as bar:
        for n in ctx.config.ensemble_sizes:

            def compute(_: list[int], n: int = n) -> Any:
                X, y, Xq = data.X[:n], data.y[:n], data.X[n : n + 200]
                reps = ctx.config.ensemble_repeats
                return [ensemble_timing(ctx.amortizer(), X, y, structs, reps, Xq)]

            key = CellKey("fig4", TIMING_DATASET, 0, "-", f"timing n={n}", h)
            value = ctx.cache.get_many([key], compute)[0]
            if value is not None:
                rows.append({"n": n, **value})
            bar.update(1)
    return rows


def run(ctx: RunContext) -> dict[str, Any]:
    """BMA cells per dataset and split, and the timing cells per n."""
    kernels = kernel_templates(ctx.config.kernel_ids)
    return {
        "kernels": kernels,
        "bma": _bma_cells(ctx, kernels),
        "timing": _timing_cells(ctx, kernels),
    }


def _fmt(s: dict[str, Any]) -> str:
    return "-" if not s["n"] else f"{s['median']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"


def markdown(result: dict[str, Any]) -> list[str]:
    k = len(result["kernels"])
    lines = [
        f"BMA of {k} kernels; standardised test RMSE and NLL per split. Members: median "
        "[20th, 80th percentile] over the single kernels of the amortized ensemble.",
        "",
        "| dataset | split | method | BMA RMSE | members RMSE | BMA NLL | members NLL | time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["bma"]:
        members = r["method"].startswith("amortized")
        mr = _fmt(spread(r["members_rmse"])) if members else "-"
        mn = _fmt(spread(r["members_nll"])) if members else "-"
        lines.append(
            f"| {r['dataset']} | {r['split']} | {r['method']} | {r['rmse']:.3f} | {mr} | "
            f"{r['nll']:.3f} | {mn} | {r['time_s']:.3g} |"
        )
    lines += [
        "",
        f"Amortized ensemble fit ({k} kernels) on the first n rows of {TIMING_DATASET} "
        "(medians of repeats); the predictive at the next 200 rows.",
        "",
        "| n | one kernel (s) | batched (s) | one by one (s) | one-by-one / batched | "
        "batched + predictive (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["timing"]:
        lines.append(
            f"| {r['n']} | {r['one_s']:.3g} | {r['batched_s']:.3g} | {r['one_by_one_s']:.3g} | "
            f"{r['one_by_one_s'] / r['batched_s']:.1f} | {r['batched_predict_s']:.3g} |"
        )
    return [*lines, ""]


def figure(result: dict[str, Any], path: Any) -> bool:
    """Batched vs one-by-one ensemble time over n (log-log)."""
    from amorgp_experiments.paper.figures import label_axis, save_figure, subplots

    rows = result["timing"]
    if not rows:
        return False
    fig, axes = subplots(1, 1, width=5.5, height=3.8)
    ax = axes[0][0]
    ns = [r["n"] for r in rows]
    for key, label in (("one", "one kernel"), ("batched", "batched"), ("one_by_one", "one by one")):
        ax.plot(ns, [r[f"{key}_s"] for r in rows], marker="o", label=label)
    label_axis(ax, "n", "ensemble fit time (s)", logx=True, logy=True)
    return save_figure(fig, path)


def findings(result: dict[str, Any]) -> str:
    parts = []
    by = {(r["dataset"], r["split"], r["method"]): r for r in result["bma"]}
    for (ds, split, m), a in by.items():
        t = by.get((ds, split, "Type-2 ML BMA"))
        if m != "amortized BMA" or t is None:
            continue
        best = min(a["members_rmse"]) if a["members_rmse"] else math.nan
        c = by.get((ds, split, "amortized+calibrate BMA"))
        cal = f", calibrated {c['rmse']:.3f}" if c is not None else ""
        parts.append(
            f"{ds} split {split}: amortized BMA RMSE {a['rmse']:.3f} (best member {best:.3f}"
            f"{cal}), Type-2 ML BMA {t['rmse']:.3f} in x{t['time_s'] / a['time_s']:.0f} the time"
        )
    if result["timing"]:
        r = result["timing"][-1]
        parts.append(
            f"at n = {r['n']} the batched ensemble is x{r['one_by_one_s'] / r['batched_s']:.1f} "
            "faster than fitting the kernels one by one"
        )
    return ("; ".join(parts) + ".") if parts else "No cells."
