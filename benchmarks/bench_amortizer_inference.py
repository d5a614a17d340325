"""Benchmark of the user-facing amortized inference (``Amortizer.infer_many``) on real data.

For each dataset and a list of kernels, side by side in one run:

* **amortized**: ``Amortizer.from_pretrained(calibrate=False).infer_many(X, y, kernels,
  refine=0)``
  end to end, the network alone (normalisation, one encoder pass, all kernels in one batch, exact float64 log
  marginal likelihoods on all points);
* **+ calibrate**: the same, then each kernel's exact Type-2 ML scale and noise
  (``calibrate=True, refine=0``; the library's default calibrates and then refines);
* **amortized + refine 10**: the network alone followed by 10 L-BFGS iterations of
  Type-2 ML per kernel (``refine=10``);
* **Type-2 ML**, the named peer: ``amorgp.baselines.fit_many(..., "gp-ml")`` (the
  paper's GP-ML: Adam, lr 0.1, <= 150 steps, one batched optimisation of all kernels).

Reported: wall-clock medians with the interquartile range over repeats, the speed
ratio Type-2 ML / amortized, and the mean per-point log marginal likelihood reached
(normalised targets; higher is better).  Writes
``docs/benchmarks/amortizer-inference.md``.

Usage: ``python benchmarks/bench_amortizer_inference.py [--quick] [--repeats R] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from amorgp.amortizer import Amortizer
from amorgp.amortizer.frontends.io import read_csv
from amorgp.baselines import fit_many

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ["SE", "SE + PER", "LIN + PER", "LIN + SE*PER", "SE*LIN + PER", "SE + LIN*PER"]


def _timed(fn: Callable[[], object], reps: int, warmup: bool = True) -> tuple[object, list[float]]:
    if warmup:  # first-call allocations; skipped for the slow fits
        fn()
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, times


def _stat(times: list[float]) -> str:
    med = statistics.median(times)
    if len(times) > 1:
        q = statistics.quantiles(times, n=4)
        return f"{1e3 * med:.0f} ms [{1e3 * q[0]:.0f}, {1e3 * q[2]:.0f}]"
    return f"{1e3 * med:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="airline only, 3 kernels, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/amortizer-inference.md")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    datasets: list[tuple[str, Path, int | None]] = [("airline", ROOT / "data/airline.csv", None)]
    kernels = KERNELS[:3] if args.quick else KERNELS
    if not args.quick:
        datasets.append(("yacht (first 250 rows)", ROOT / "data/yacht.csv", 250))
    reps = 1 if args.quick else args.repeats
    amz = Amortizer.from_pretrained(device="cpu", calibrate=False)  # the network alone
    lml_rows: list[tuple[str, str, float, float, float, float]] = []
    time_rows: list[tuple[str, int, int, str, str, str, str, float]] = []
    for name, path, n_max in datasets:
        table = read_csv(path)
        X, y = table.X[:n_max], table.y[:n_max]  # type: ignore[index]
        amortized, t_am = _timed(partial(amz.infer_many, X, y, kernels, refine=0), reps)
        calibrated, t_cal = _timed(
            partial(amz.infer_many, X, y, kernels, calibrate=True, refine=0), reps
        )
        refined, t_ref = _timed(partial(amz.infer_many, X, y, kernels, refine=10), 1, False)
        ml, t_ml = _timed(partial(fit_many, X, y, kernels, "gp-ml", vocab=amz.vocabulary), 1, False)
        n = X.shape[0]
        for i, k in enumerate(kernels):
            lml_rows.append(
                (
                    name,
                    k,
                    amortized[i].log_marginal_likelihood / n,  # type: ignore[index]
                    calibrated[i].log_marginal_likelihood / n,  # type: ignore[index]
                    refined[i].log_marginal_likelihood / n,  # type: ignore[index]
                    ml[i].log_marginal_likelihood / n,  # type: ignore[index]
                )
            )
        ratio = statistics.median(t_ml) / statistics.median(t_am)
        time_rows.append(
            (name, n, X.shape[1], _stat(t_am), _stat(t_cal), _stat(t_ref), _stat(t_ml), ratio)
        )
    ckpt = amz.meta.get("provenance", "")
    lines = [
        "# Amortized inference on real data (`Amortizer.infer_many`)",
        "",
        f"Machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.1f} at the end of the run; "
        f"kernels: {', '.join(kernels)}; repeats: {reps} (median [quartiles]; Type-2 ML and refine: 1 run).",
        f"Checkpoint: `{amz.network.model}`, trained on n <= {amz.encoder_points}. {ckpt}",
        "",
        "Peer: Type-2 ML of the same kernels on the same data (`amorgp.baselines.fit_many`, "
        "`gp-ml`: Adam lr 0.1, <= 150 steps, all kernels in one batched optimisation).",
        "",
        "## Time for all kernels",
        "",
        "| dataset | n | d | amortized | + calibrate (the default) | amortized + refine 10 | "
        "Type-2 ML | Type-2 ML / amortized |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in time_rows:
        lines.append(
            f"| {t[0]} | {t[1]} | {t[2]} | {t[3]} | {t[4]} | {t[5]} | {t[6]} | x{t[7]:.1f} |"
        )
    lines += [
        "",
        "## Log marginal likelihood per point (normalised targets; higher is better)",
        "",
        "| dataset | kernel | amortized | + calibrate | amortized + refine 10 | Type-2 ML |",
        "|---|---|---|---|---|---|",
    ]
    for r in lml_rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | {r[5]:.3f} |")
    lines.append("")
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(text)


if __name__ == "__main__":
    main()
