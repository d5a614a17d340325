"""Benchmark of the GP hyperparameter baselines on the bundled real datasets.

Writes ``docs/benchmarks/baselines.md``: per dataset and method, the test RMSE
and negative log predictive density (original units, medians over kernels and
splits with the interquartile range) and the fitting time per kernel; the
batched-vs-per-pair time ratio of Type-2 ML measured side by side; and a
Type-2 ML fit of an SE kernel against GPyTorch's ``ExactGP`` with the same
start and Adam settings.

Paper protocol (``--full``): all five datasets, ``n_train = 500`` (airline 100,
yacht 250), test sets capped at 400 points, 20 random splits, the 24-kernel
evaluation set, every method.  The default is a reduced run sized for two
shared CPU cores (see ``--help`` and the report header for what was run).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from amorgp.amortizer.jsonlog import write_text_atomic
from amorgp.baselines import fit, fit_many, train_test_split
from amorgp.baselines.testing import gpytorch_se_reference_fit
from amorgp.kernel_grammar import DimWiseStructure, paper_evaluation_set

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
OUT = ROOT / "docs" / "benchmarks" / "baselines.md"
PAPER_N_TRAIN = {"airline": 100, "yacht": 250}
ALL_DATASETS = ("airline", "yacht", "energy", "concrete", "housing")


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A bundled dataset, read by the library's CSV reader (last column the target)."""
    from amorgp.amortizer.frontends.io import read_csv

    table = read_csv(DATA / f"{name}.csv")
    assert table.y is not None
    return table.X, table.y


def metrics(result, X_test: np.ndarray, y_test: np.ndarray) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(RMSE, mean negative log predictive density), original units."""
    if result.status == "failed":
        return math.nan, math.nan
    mean, _ = result.predict(X_test)
    rmse = float(np.sqrt(np.mean((mean.numpy() - y_test) ** 2)))
    nll = float(-result.log_predictive_density(X_test, y_test).mean())
    return rmse, nll


def summary(values: list[float]) -> str:
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return "n/a"
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return f"{med:.3g} [{q1:.3g}, {q3:.3g}]"


def gpytorch_se(X: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[float, float]:
    """GPyTorch ExactGP, ScaleKernel(RBF with ARD), Adam lr 0.1, same start; (seconds, LML)."""
    value, _, elapsed = gpytorch_se_reference_fit(X, y, steps, 0.1, ard=True)
    return elapsed, value


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def _kept_sections(path: Path) -> str:
    """Sections other benchmarks own in the same file (``<!-- name:begin -->`` ...
    ``<!-- name:end -->``, e.g. the DIWP table of ``bench_diwp.py``), kept verbatim."""
    import re

    if not path.exists():
        return ""
    pattern = r"<!-- (\w+):begin -->.*?<!-- \1:end -->"
    kept = [m.group(0) for m in re.finditer(pattern, path.read_text(), re.S)]
    return "".join(f"\n{k}\n" for k in kept)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--full", action="store_true", help="paper protocol (hours on a workstation)")
    p.add_argument(
        "--quick", action="store_true", help="smoke run: airline, 6 kernels, few iterations"
    )
    p.add_argument("--datasets", default="airline,yacht", help="comma-separated dataset names")
    p.add_argument("--splits", type=int, default=1)
    p.add_argument("--n-train-cap", type=int, default=100, help="cap on n_train (paper: 500)")
    p.add_argument("--n-kernels", type=int, default=12, help="first k of the 24 evaluation kernels")
    p.add_argument("--per-pair-kernels", type=int, default=6, help="kernels of the per-pair timing")
    p.add_argument(
        "--advi-kernels", type=int, default=2, help="kernels fitted by ADVI (first dataset only)"
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    svgp_iters, advi_iters, gp_iters = 500, 10_000, 150
    if a.full:
        a.datasets, a.splits, a.n_train_cap = ",".join(ALL_DATASETS), 20, 500
        a.n_kernels, a.per_pair_kernels, a.advi_kernels = 24, 24, 24
    if a.quick:
        a.datasets, a.splits, a.n_kernels, a.per_pair_kernels, a.advi_kernels = (
            "airline",
            1,
            6,
            3,
            1,
        )
        svgp_iters, advi_iters, gp_iters = 100, 500, 50
    datasets = [d.strip() for d in a.datasets.split(",") if d.strip()]
    templates = paper_evaluation_set(0)[: a.n_kernels]
    methods = ["gp-ml", "map", "gp-ml-lbfgs", "svgp"] + (["gp-ml-multistart"] if a.full else [])

    rows: list[str] = []
    timing_rows: list[str] = []
    gpt_rows: list[str] = []
    t_start = time.perf_counter()
    for ds in datasets:
        X_all, y_all = load(ds)
        n_train = min(PAPER_N_TRAIN.get(ds, 500), a.n_train_cap, len(y_all) - 1)
        res: dict[str, dict[str, list[float]]] = {}
        batched_t, loop_t = [], []
        for split in range(a.splits):
            g = torch.Generator().manual_seed(1000 + split)
            tr, te = train_test_split(len(y_all), n_train, 400, g)
            Xtr, ytr, Xte, yte = X_all[tr], y_all[tr], X_all[te], y_all[te]
            kernels = [t.broadcast(Xtr.shape[1]) for t in templates]
            for m in methods:
                opts = {"max_iters": svgp_iters} if m == "svgp" else {"max_iters": gp_iters}
                t0 = time.perf_counter()
                fits = fit_many(
                    Xtr, ytr, kernels, m, generator=torch.Generator().manual_seed(split), **opts
                )  # type: ignore[arg-type]
                elapsed = time.perf_counter() - t0
                r = res.setdefault(m, {"rmse": [], "nll": [], "time": [], "failed": []})
                for f in fits:
                    rmse, nll = metrics(f, Xte, yte)
                    r["rmse"].append(rmse)
                    r["nll"].append(nll)
                    r["failed"].append(float(f.status == "failed"))
                r["time"].append(elapsed / len(kernels))
                print(
                    f"[{time.perf_counter() - t_start:7.1f}s] {ds} split {split} {m}: {elapsed:.1f}s",
                    flush=True,
                )
            # batched vs per-pair, same kernels, same settings, side by side
            sub = kernels[: a.per_pair_kernels]
            t0 = time.perf_counter()
            fit_many(Xtr, ytr, sub, "gp-ml", max_iters=gp_iters)
            batched_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for k in sub:
                fit(Xtr, ytr, k, "gp-ml", max_iters=gp_iters)
            loop_t.append(time.perf_counter() - t0)
            if ds == datasets[0] and split == 0 and a.advi_kernels > 0:
                for fam in ("advi-meanfield",) + (("advi-fullrank",) if a.full else ()):
                    for k in kernels[: a.advi_kernels]:
                        t0 = time.perf_counter()
                        f = fit(
                            Xtr,
                            ytr,
                            k,
                            fam,
                            generator=torch.Generator().manual_seed(0),
                            max_iters=advi_iters,
                        )  # type: ignore[arg-type]
                        elapsed = time.perf_counter() - t0
                        rmse, nll = metrics(f, Xte, yte)
                        r = res.setdefault(fam, {"rmse": [], "nll": [], "time": [], "failed": []})
                        r["rmse"].append(rmse)
                        r["nll"].append(nll)
                        r["time"].append(elapsed)
                        r["failed"].append(float(f.status == "failed"))
                        print(
                            f"[{time.perf_counter() - t_start:7.1f}s] {ds} {fam} {k}: {elapsed:.1f}s",
                            flush=True,
                        )
            if split == 0:
                try:
                    from amorgp.core.data import Normalizer

                    norm = Normalizer.fit(torch.as_tensor(Xtr), torch.as_tensor(ytr))
                    Xn, yn = (
                        norm.transform_x(torch.as_tensor(Xtr)),
                        norm.transform_y(torch.as_tensor(ytr)),
                    )
                    se = DimWiseStructure(tuple(("SE",) for _ in range(Xtr.shape[1])))
                    ours_t, gpt_t, ours_l, gpt_l = [], [], [], []
                    for _ in range(3):
                        t0 = time.perf_counter()
                        o = fit(Xn, yn, se, "gp-ml", normalize=False, max_iters=gp_iters, rtol=0.0)
                        ours_t.append(time.perf_counter() - t0)
                        ours_l.append(o.log_marginal_likelihood)
                        gt, gl = gpytorch_se(Xn, yn, gp_iters)
                        gpt_t.append(gt)
                        gpt_l.append(gl)
                    gpt_rows.append(
                        f"| {ds} | {n_train} | {statistics.median(ours_t):.2f} | {statistics.median(gpt_t):.2f} | "
                        f"{statistics.median(gpt_t) / statistics.median(ours_t):.2f} | {ours_l[0]:.2f} | {gpt_l[0]:.2f} |"
                    )
                except ImportError:
                    gpt_rows.append(f"| {ds} | {n_train} | gpytorch not installed | | | | |")
        for m, r in res.items():
            failed = int(sum(r["failed"]))
            rows.append(
                f"| {ds} | {n_train} | {m} | {summary(r['rmse'])} | {summary(r['nll'])} | "
                f"{summary(r['time'])} | {failed}/{len(r['failed'])} |"
            )
        ratio = [lp / bt for lp, bt in zip(loop_t, batched_t, strict=True)]
        timing_rows.append(
            f"| {ds} | {n_train} | {len(templates[: a.per_pair_kernels])} | {statistics.median(batched_t):.2f} | "
            f"{statistics.median(loop_t):.2f} | {statistics.median(ratio):.2f} |"
        )

    total = time.perf_counter() - t_start
    header = (
        "# Baselines benchmark\n\n"
        "Generated by `benchmarks/bench_baselines.py` "
        f"({'full paper protocol' if a.full else ('--quick smoke run' if a.quick else 'reduced default run')}; "
        f"{total / 60:.1f} min, torch threads = {a.threads}, {os.cpu_count()} CPU cores visible, "
        f"torch {torch.__version__}).\n\n"
        f"Run: datasets {', '.join(datasets)}; {a.splits} split(s); n_train = min(paper value, {a.n_train_cap}); "
        f"test sets capped at 400; the first {len(templates)} of the paper's 24 evaluation kernels "
        f"(`paper_evaluation_set(0)`, same sum in every input dimension). Paper protocol: `--full` "
        "(5 datasets, n_train 500 / airline 100 / yacht 250, 20 splits, 24 kernels, all methods).\n\n"
        "Times are wall-clock on a shared machine; compare ratios measured in the same run, not absolute values.\n"
    )
    table = (
        "\n## Test error per method (original units)\n\n"
        "Median [interquartile range] over kernels and splits. Time is per kernel: for the batched methods "
        "(`gp-ml`, `map`, `svgp`, `gp-ml-multistart`) the batch time divided by the number of kernels; "
        "`gp-ml-lbfgs` and ADVI fit one pair at a time.\n\n"
        "| dataset | n_train | method | RMSE | NLL | time / kernel (s) | failed |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    timing = (
        "\n## Batched vs per-pair Type-2 ML (GP-ML, Adam lr 0.1, <= 150 steps)\n\n"
        "Same kernels and settings; per-pair = one `fit` call per kernel.\n\n"
        "| dataset | n_train | kernels | batched (s) | per-pair (s) | per-pair / batched |\n|---|---|---|---|---|---|\n"
        + "\n".join(timing_rows)
        + "\n"
    )
    gpt = (
        "\n## Ours vs GPyTorch: SE kernel (ARD), Type-2 ML with Adam lr 0.1, same start, fixed step count\n\n"
        "Ours: product over dimensions of SE factors (one variance per dimension, the paper's dimension-wise form; "
        "the same function class as GPyTorch's ScaleKernel(RBF, ARD)). Median of 3 runs.\n\n"
        "| dataset | n_train | ours (s) | GPyTorch (s) | GPyTorch / ours | ours LML | GPyTorch LML |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(gpt_rows) + "\n"
    )
    write_atomic(a.out, header + table + timing + gpt + _kept_sections(a.out))
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
