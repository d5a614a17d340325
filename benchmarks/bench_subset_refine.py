"""Benchmark of the default fit above ``refine.DEFAULT_POINTS`` points: refined on a seeded
subset of ``refine.SUBSET_POINTS`` points, against the amortized answer (what the default
returned there before) and against ``refine="auto"`` on all points (L-BFGS rounds: the
reference optimum of all points).

Tasks (synthetic, seeded), each with 1,000 test points:

* **six-inputs**: the 6-input function of ``benchmarks/bench_refine_stop.py`` (two strong
  inputs, two weak, two irrelevant, noise 0.1), ``SE`` (one lengthscale per input);
* **seasonal**: a long monthly-like series on ``[0, 40]`` (trend, a season of period 1
  with a second harmonic, noise 0.3), ``SE + SE*PER``, test points drawn from the same
  range (interpolation).

Methods, side by side in one run, one thread:

* ``default``: the library's defaults (``refine=None``): above ``DEFAULT_POINTS`` the
  successive halving and Fisher scoring of ``refine="auto"`` on the seeded subset, every
  other stage on all points; ``refine_status == "subset"``;
* ``amortized``: ``refine=0`` (network, multi-start, calibration);
* ``auto, all points``: ``refine="auto"`` asked for: L-BFGS rounds on all points until a
  round gains less than ``max(0.05, 1e-4 |LML|)`` (``--no-full`` leaves it out).

Reported: the log marginal likelihood of all training points (normalised data, exact:
a dense Cholesky factor) and its gap to the best of the methods, test RMSE, process CPU
seconds, refinement steps, status.

Writes ``docs/benchmarks/subset-refine.md``.

Usage: ``python benchmarks/bench_subset_refine.py [--n 6000] [--no-full]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def six_inputs(n: int, seed: int = 0) -> tuple[Any, ...]:
    from bench_refine_stop import six_inputs as task  # the same function, n training points

    return task(seed, n)


def seasonal(n: int, seed: int = 0) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, 40.0, n + 1000))
    y = (
        0.05 * t
        + np.sin(0.2 * t)
        + 1.5 * np.sin(2 * np.pi * t + 1.0)
        + 0.5 * np.sin(4 * np.pi * t + 2.0)
        + 0.3 * rng.standard_normal(n + 1000)
    )
    test = np.zeros(n + 1000, dtype=bool)
    test[rng.choice(n + 1000, 1000, replace=False)] = True
    X = t[:, None]
    return X[~test], y[~test], X[test], y[test], "SE + SE*PER"


TASKS = {"six-inputs": six_inputs, "seasonal": seasonal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6000, help="training points per task")
    parser.add_argument("--no-full", action="store_true", help="without refine='auto'")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/subset-refine.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.stages.refine import DEFAULT_POINTS, SUBSET_POINTS

    amz = Amortizer.from_pretrained(device="cpu")
    methods: dict[str, Any] = {"default": None, "amortized": 0}
    if not args.no_full:
        methods["auto, all points"] = "auto"
    rows = []
    for task, make in TASKS.items():
        X, y, Xt, yt, kernel = make(args.n)
        amz.infer(X[:200], y[:200], kernel, refine=0)  # warm-up of this input width
        for name, refine in methods.items():
            t0 = time.process_time()
            r = amz.infer(X, y, kernel, refine=refine)
            fit = time.process_time() - t0
            lml = float(r.log_marginal_likelihood)  # all points, exact (dense factor)
            mean, _ = r.predict(Xt)
            rmse = float(np.sqrt(np.mean((np.asarray(mean) - yt) ** 2)))
            row = dict(
                task=task, kernel=kernel, method=name, lml=lml, rmse=rmse, seconds=fit,
                steps=r.refine_steps, status=r.refine_status,
            )  # fmt: skip
            rows.append(row)
            print(row, flush=True)
    write(args, rows, DEFAULT_POINTS, SUBSET_POINTS)


def write(args: Any, rows: list[dict[str, Any]], default_points: int, subset: int) -> None:
    best = {t: max(r["lml"] for r in rows if r["task"] == t) for t in TASKS}
    lines = [
        "# The default above its whole-data size: refined on a subset",
        "",
        f"`benchmarks/bench_subset_refine.py --n {args.n}`"
        + (" --no-full" if args.no_full else "")
        + f"; one thread (BLAS too), torch {torch.__version__}, {platform.machine()} "
        "(2 cores, shared with other jobs), the methods side by side in one run, one seed. "
        f"Above {default_points:,} points the default (`refine=None`) refines on a seeded "
        f"subset of {subset:,} points (successive halving and Fisher scoring, as "
        '`refine="auto"` there) and says `refine_status == "subset"`; before, it returned '
        'the amortized answer there (`refine=0`, `"skipped"`). `auto, all points`: '
        '`refine="auto"` asked for, L-BFGS rounds on all points, the reference optimum. '
        "LML: the log marginal likelihood of all training points (normalised data, exact). "
        "Gap: nats below the best method on the task. Seconds: process CPU time of the fit.",
        "",
        "| task | kernel | method | LML (all points) | gap (nats) | test RMSE | seconds "
        "| refine steps | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | `{r['kernel']}` | {r['method']} | {r['lml']:.1f} "
            f"| {best[r['task']] - r['lml']:.1f} | {r['rmse']:.4f} | {r['seconds']:.1f} "
            f"| {r['steps']} | {r['status']} |"
        )
    lines.append("")
    args.out.write_text("\n".join(lines))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
