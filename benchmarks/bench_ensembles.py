"""Benchmark of fast ensembling and structure search (Bitzer et al. 2023, Fig. 4).

Writes ``docs/benchmarks/ensembles.md`` and ``docs/benchmarks/ensembles.json``:

1. **BMA on real data** (paper protocol: ``n_train = 500``, airline 100, yacht 250,
   the rest as test capped at 1000, random splits): test RMSE and NLL of the
   amortized 24-kernel BMA against the spread (median, min, max) of its single
   members and against a Type-2 ML ensemble of the same kernels (``amorgp.baselines``
   GP-ML, BMA weights), and the time ratio, side by side in one run.
2. **Batched vs one at a time** over ``n = 50..1000``: the amortized ensemble of 24
   kernels (one ``fit_many`` call, batched member predictive) against one kernel and
   against fitting the 24 kernels one call each.
3. **Structure search**: on simulated data with a planted structure (``d = 1..3``,
   drawn from the paper prior), how often the amortized greedy search finds the
   planted structure or one with an equal or better held-out likelihood; on airline,
   the structure found, its period in years, its test RMSE against the best fixed
   paper kernel, and its time against the same search scored by Type-2 ML.

Usage::

    python benchmarks/bench_ensembles.py [--quick] [--splits 3] [--datasets airline,yacht]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from amorgp_experiments.paper.fig4 import bma_scores, ensemble_timing, member_scores
from amorgp_experiments.paper.protocol import load_dataset, scores

from amorgp.amortizer import Amortizer
from amorgp.amortizer.jsonlog import write_text_atomic
from amorgp.baselines import Baseline, train_test_split
from amorgp.ensembles import KernelEnsemble, describe_structure, structure_search
from amorgp.kernel_grammar import DimWiseStructure, paper_evaluation_set
from amorgp.simulator import Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
OUT = ROOT / "docs" / "benchmarks" / "ensembles.md"
PAPER_N_TRAIN = {"airline": 100, "yacht": 250}
ALL_DATASETS = ("airline", "yacht", "energy", "concrete", "housing")


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    data = load_dataset(DATA / f"{name}.csv")
    return data.X, data.y


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def bma_real(
    amz: Amortizer, datasets: list[str], splits: int, t2_kernels: int
) -> list[dict[str, Any]]:
    rows = []
    for name in datasets:
        X, y = load(name)
        n_train = min(PAPER_N_TRAIN.get(name, 500), len(y) - 10)
        for split in range(splits):
            tr, te = train_test_split(len(y), n_train, 1000, torch.Generator().manual_seed(split))
            Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
            kernels = [t.broadcast(X.shape[1]) for t in paper_evaluation_set(0)]
            amortized = bma_scores(amz, Xtr, ytr, Xte, yte, kernels)
            t2_ks = kernels[:t2_kernels]
            t2 = bma_scores(Baseline("gp-ml"), Xtr, ytr, Xte, yte, t2_ks)
            rows.append(
                {
                    "dataset": name,
                    "split": split,
                    "n_train": len(tr),
                    "n_test": len(te),
                    "amortized_bma": {"rmse": amortized["rmse"], "nll": amortized["nll"]},
                    "members_rmse": amortized["members_rmse"],
                    "members_nll": amortized["members_nll"],
                    "type2ml_bma": {"rmse": t2["rmse"], "nll": t2["nll"]},
                    "type2ml_kernels": len(t2_ks),
                    "time_amortized_s": amortized["time_s"],
                    "time_type2ml_s": t2["time_s"] * len(kernels) / len(t2_ks),
                }
            )
            print(
                f"[bma] {name} split {split}: amortized {amortized['time_s']:.2f}s, "
                f"type-2 ML {t2['time_s']:.1f}s",
                flush=True,
            )
    return rows


def batched_timing(amz: Amortizer, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    X, y = load("concrete")
    kernels = [t.broadcast(X.shape[1]) for t in paper_evaluation_set(0)]
    rows = []
    for n in sizes:
        med = ensemble_timing(amz, X[:n], y[:n], kernels, repeats, X[n : n + 200])
        rows.append({"n": n, **med})
        print(f"[timing] n={n}: {med}", flush=True)
    return rows


def planted_search(amz: Amortizer, cases: int, seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    found = ok = 0
    times = []
    records = []
    for d in (1, 2, 3):
        cfg = SimulatorConfig(n_min=100, n_max=100, n_test=100, d_max=d, p_dims=1e-6, max_addends=2)
        sim = Simulator(cfg)
        per_d = cases // 3 + (1 if d <= cases % 3 else 0)
        batch = sim.sample(per_d, gen)
        for b in range(per_d):
            if not bool(batch.valid[b]):
                continue
            X = batch.X[b, :, :d].numpy()
            y = batch.y[b].numpy()
            Xt, yt = batch.X_test[b, :, :d].numpy(), batch.y_test[b].numpy()
            truth = _true_structure(batch, b, d)
            res, t = timed(structure_search, amz, X, y, depth=2, beam=2, criterion="bic")
            times.append(t)
            fit_true = amz.fit_many(X, y, [truth])[0]
            m1, v1 = res.best.fit.predict(Xt)
            m0, v0 = fit_true.predict(Xt)
            nll_found = scores(np.asarray(m1), np.asarray(v1), yt)[1]
            nll_true = scores(np.asarray(m0), np.asarray(v0), yt)[1]
            exact = res.best.structure == truth
            found += int(exact)
            ok += int(exact or nll_found <= nll_true + 1e-9)
            records.append(
                {
                    "d": d,
                    "planted": str(truth),
                    "found": str(res.best.structure),
                    "nll_found": nll_found,
                    "nll_planted": nll_true,
                }
            )
    n = len(records)
    return {
        "cases": n,
        "exact": found,
        "exact_or_better": ok,
        "median_time_s": statistics.median(times),
        "records": records,
    }


def _true_structure(batch: Any, b: int, d: int) -> DimWiseStructure:
    from amorgp.kernel_grammar import decode

    vocab = SimulatorConfig().vocabulary
    s = decode(
        batch.true_symbols[b : b + 1, :d].numpy(),
        batch.true_symbol_mask[b : b + 1, :d].numpy(),
        vocab,
    )
    return s[0]


def airline_search(amz: Amortizer) -> dict[str, Any]:
    X, y = load("airline")
    tr, te = train_test_split(len(y), 100, 1000, torch.Generator().manual_seed(0))
    Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
    res_a, t_a = timed(structure_search, amz, Xtr, ytr, depth=3, beam=2, criterion="bic")
    res_t, t_t = timed(
        lambda: structure_search(Baseline("gp-ml"), Xtr, ytr, depth=3, beam=2, criterion="bic")
    )
    out: dict[str, Any] = {}
    for key, res, t in (("amortized", res_a, t_a), ("type2ml", res_t, t_t)):
        m, v = res.best.fit.predict(Xte)
        rmse, nll = scores(np.asarray(m), np.asarray(v), yte)
        periods = [
            t_.original.get("period") or t_.original.get("per_period")
            for t_ in describe_structure(res.best.fit, Xtr)
            if "PER" in t_.symbol
        ]
        out[key] = {
            "structure": str(res.best.structure),
            "n_scored": res.n_scored,
            "time_s": t,
            "rmse": rmse,
            "nll": nll,
            "periods_years": periods,
        }
    fixed = KernelEnsemble.fit(amz, Xtr, ytr, [t.broadcast(1) for t in paper_evaluation_set(0)])
    best_fixed = min(member_scores(fixed, Xte, yte))
    out["best_fixed_kernel"] = {"rmse": best_fixed[0], "nll": best_fixed[1]}
    return out


def _spread(values: list[float]) -> str:
    v = [x for x in values if math.isfinite(x)]
    return f"{statistics.median(v):.4g} [{min(v):.4g}, {max(v):.4g}]" if v else "n/a"


def report(res: dict[str, Any], out: Path) -> None:
    lines = [
        "# Ensembles: fast BMA and structure search",
        "",
        f"Generated by `benchmarks/bench_ensembles.py` on {res['machine']}; {res['config']}.",
        "",
        "## 1. BMA of the 24 paper kernels on real data",
        "",
        "Test RMSE and NLL (original units). Members: median [min, max] over the 24 single kernels of the amortized ensemble. "
        "Type-2 ML: the BMA of GP-ML fits (Adam, amorgp.baselines) of the same kernels "
        "(time scaled to 24 kernels when fewer were fitted, see `type2ml_kernels` in the JSON).",
        "",
        "| dataset | split | amortized BMA RMSE | members RMSE | Type-2 ML BMA RMSE | amortized BMA NLL | members NLL | Type-2 ML BMA NLL | time amortized | time Type-2 ML | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["bma"]:
        lines.append(
            f"| {r['dataset']} | {r['split']} | {r['amortized_bma']['rmse']:.4g} | {_spread(r['members_rmse'])} | "
            f"{r['type2ml_bma']['rmse']:.4g} | {r['amortized_bma']['nll']:.4g} | {_spread(r['members_nll'])} | "
            f"{r['type2ml_bma']['nll']:.4g} | {r['time_amortized_s']:.2f} s | {r['time_type2ml_s']:.1f} s | "
            f"x{r['time_type2ml_s'] / r['time_amortized_s']:.0f} |"
        )
    lines += [
        "",
        "## 2. Batched vs one kernel at a time (amortized, concrete, d = 8)",
        "",
        "Ensemble fit (hyperparameters, log marginal likelihoods, weights; medians of repeats), and the "
        "batched fit plus the mixture predictive at 200 test points.",
        "",
        "| n | one kernel | 24 kernels batched | 24 kernels one by one | batched / one | one-by-one / batched | 24 batched + predictive |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["timing"]:
        lines.append(
            f"| {r['n']} | {1e3 * r['one_s']:.0f} ms | {1e3 * r['batched_s']:.0f} ms | {1e3 * r['one_by_one_s']:.0f} ms | "
            f"{r['batched_s'] / r['one_s']:.2f} | {r['one_by_one_s'] / r['batched_s']:.1f} | {1e3 * r['batched_predict_s']:.0f} ms |"
        )
    p = res["planted"]
    lines += [
        "",
        "## 3. Structure search",
        "",
        f"Planted structures (paper prior, d = 1..3, n = 100, greedy beam 2, depth 2, BIC): {p['cases']} cases, "
        f"exact recovery {p['exact']} ({100 * p['exact'] / max(p['cases'], 1):.0f} %), planted or equal-or-better held-out NLL "
        f"{p['exact_or_better']} ({100 * p['exact_or_better'] / max(p['cases'], 1):.0f} %); median search time {p['median_time_s']:.2f} s.",
        "",
        "Airline (n_train 100, beam 2, depth 3, BIC):",
        "",
        "| search scored by | structure | periods (years) | structures scored | time | test RMSE | test NLL |",
        "|---|---|---|---|---|---|---|",
    ]
    a = res["airline"]
    for key, label in (("amortized", "amortized"), ("type2ml", "Type-2 ML (GP-ML)")):
        r = a[key]
        per = ", ".join(f"{x:.3g}" for x in r["periods_years"] if x is not None) or "-"
        lines.append(
            f"| {label} | `{r['structure']}` | {per} | {r['n_scored']} | {r['time_s']:.2f} s | {r['rmse']:.4g} | {r['nll']:.4g} |"
        )
    lines.append(
        f"| best fixed paper kernel (amortized) | | | 24 | | {a['best_fixed_kernel']['rmse']:.4g} | {a['best_fixed_kernel']['nll']:.4g} |"
    )
    lines.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, "\n".join(lines) + "\n")
    write_text_atomic(out.with_suffix(".json"), json.dumps(res, indent=1, default=float))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="smoke run: airline, 1 split, few cases")
    p.add_argument("--datasets", default=",".join(ALL_DATASETS))
    p.add_argument("--splits", type=int, default=3)
    p.add_argument(
        "--type2ml-kernels", type=int, default=24, help="kernels of the Type-2 ML ensemble"
    )
    p.add_argument("--planted", type=int, default=51, help="planted search cases")
    p.add_argument("--sizes", default="50,100,250,500,1000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    if a.quick:
        a.datasets, a.splits, a.type2ml_kernels, a.planted, a.sizes, a.repeats = (
            "airline",
            1,
            6,
            3,
            "50,100",
            1,
        )
    torch.set_num_threads(a.threads)
    warnings.simplefilter("ignore", UserWarning)
    amz = Amortizer.from_pretrained(device="cpu", calibrate=False)  # the network alone
    res: dict[str, Any] = {
        "machine": f"{platform.machine()} CPU, {a.threads} torch thread(s), torch {torch.__version__}",
        "config": f"datasets {a.datasets}, {a.splits} split(s), Type-2 ML on {a.type2ml_kernels} kernels, {a.planted} planted cases",
    }
    res["bma"] = bma_real(amz, [d for d in a.datasets.split(",") if d], a.splits, a.type2ml_kernels)
    res["timing"] = batched_timing(amz, [int(s) for s in a.sizes.split(",")], a.repeats)
    res["planted"] = planted_search(amz, a.planted, seed=0)
    res["airline"] = airline_search(amz)
    report(res, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
