"""Benchmark: does the amortized answer rank many kernels as their optima do?

Data: one dataset of 500 points in 6 inputs (uniform on [-2, 2], targets the sum of the
inputs' sines plus noise 0.1; the data of ``bench_default_refine.py --extra``) and the 24
paper evaluation kernels (``paper_evaluation_set(0)``, 13 to 79 hyperparameters each).

Side by side, one thread, the bundled network:

* the amortized answer (``infer_many(..., refine=0)``: network, calibration, multi-start),
  with each kernel's predicted gain (``KernelResult.optimality().gain``: the Fisher
  model's one-step gain within a box of one unit of every log parameter);
* the default fit of all 24 kernels in one ``infer_many`` call (nested restarts between
  them);
* the default fit of each kernel in a call of its own.

Reported per kernel: the amortized log marginal likelihood and its rank, the predicted
gain against the gain the default's refinement found, the default fits' values, their
evaluations and process CPU times; and a summary: where the kernels that end highest
rank in the amortized answer, and whether a screen ``amortized + predicted gain within M
nats of the amortized best`` would have kept them.

Writes ``docs/benchmarks/kernel-ranking.md``.

Usage: ``python benchmarks/bench_kernel_ranking.py [--quick]`` (``--quick``: 100 points,
6 kernels).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
MARGINS = (10.0, 50.0)
"""Screens measured: keep a kernel whose amortized value plus predicted gain is within
this many nats of the best amortized value."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 points, 6 kernels")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/kernel-ranking.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import paper_evaluation_set

    amz = Amortizer.from_pretrained(device="cpu")
    n = 100 if args.quick else 500
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 6))
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(n)
    kernels = [str(t) for t in paper_evaluation_set(0)][: 6 if args.quick else None]
    amz.infer_many(X[:50], y[:50], kernels[:2], refine=0)  # warm-up

    t = time.process_time()
    amortized = amz.infer_many(X, y, kernels, refine=0)
    t_amortized = time.process_time() - t
    lml0 = np.array([r.log_marginal_likelihood for r in amortized])
    gain0 = np.array([r.optimality().gain for r in amortized])

    t = time.process_time()
    together = amz.infer_many(X, y, kernels)
    t_together = time.process_time() - t
    one = np.array([r.log_marginal_likelihood for r in together])

    alone, t_alone = [], []
    for k in kernels:
        t = time.process_time()
        alone.append(amz.infer_many(X, y, [k])[0])
        t_alone.append(time.process_time() - t)
    each = np.array([r.log_marginal_likelihood for r in alone])

    rank = np.empty(len(kernels), dtype=int)
    rank[np.argsort(-lml0)] = np.arange(1, len(kernels) + 1)
    gained = one - lml0
    lines = [
        "# Ranking many kernels: the amortized answer against the optima",
        "",
        f"Written by `benchmarks/bench_kernel_ranking.py`{' --quick' if args.quick else ''}. "
        f"Machine: {platform.machine()}, torch {torch.__version__}, one thread (1-minute load "
        f"average at the end: {os.getloadavg()[0]:.1f}), the bundled network. One dataset of "
        f"{n} points in 6 inputs (uniform on [-2, 2], the sum of the "
        "inputs' sines plus noise 0.1) and the "
        f"{len(kernels)} paper evaluation kernels. Log marginal likelihoods in original units; "
        "ranks by the amortized value (`refine=0`); predicted gain: "
        "`KernelResult.optimality().gain` of the amortized answer (the Fisher model's "
        "one-step gain within a box of one unit of every log parameter); gained: the default "
        "fit of all kernels in one call minus the amortized value.",
        "",
        "| kernel | amortized | rank | predicted gain | gained | predicted / gained "
        "| default, one call | evaluations | default, a call each | evaluations | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i in np.argsort(-one):
        share = f"{gain0[i] / gained[i]:.2f}" if gained[i] > 1 else "-"
        lines.append(
            f"| `{kernels[i]}` | {lml0[i]:.1f} | {rank[i]} | {gain0[i]:.1f} | {gained[i]:.1f} "
            f"| {share} | {one[i]:.1f} | {together[i].refine_steps} "
            f"({together[i].refine_status}) | {each[i]:.1f} | {alone[i].refine_steps} "
            f"({alone[i].refine_status}) | {t_alone[i]:.1f} |"
        )
    top = int(np.argmax(one))
    within = [i for i in range(len(kernels)) if one[i] >= one[top] - 5]
    ratio = (gain0 / gained)[gained > 1]  # the kernels that refining moved
    lines += [
        "",
        f"CPU time: the amortized answer {t_amortized:.1f} s; the default, one call "
        f"{t_together:.1f} s; the default, a call each {sum(t_alone):.1f} s "
        f"({t_together / sum(t_alone):.2f}x). In one call "
        f"{int((one - each > 1).sum())} kernels ended more than 1 nat higher than alone "
        f"(up to {max(0.0, float((one - each).max())):.1f} nats), "
        f"{int((one - each < -1).sum())} more than 1 nat lower.",
        "",
        f"The best default fit, `{kernels[top]}` ({one[top]:.1f} nats), is {rank[top]} of "
        f"{len(kernels)} by the amortized value; the {len(within)} kernels within 5 nats of it "
        f"rank {', '.join(str(rank[i]) for i in sorted(within, key=lambda i: rank[i]))}. "
        f"Where refining gained more than 1 nat ({ratio.size} kernels), the predicted gains "
        f"are {ratio.min():.0%} to {ratio.max():.0%} of the gains found "
        f"(median {np.median(ratio):.0%}).",
        "",
        "A screen that refines only the kernels whose amortized value plus predicted gain is "
        "within a margin of the best amortized value:",
        "",
        "| margin (nats) | kernels kept | best default fit kept "
        "| kernels within 5 nats of it kept | CPU time saved (the calls of one kernel) |",
        "|---|---|---|---|---|",
    ]
    for m in MARGINS:
        keep = lml0 + gain0 >= lml0.max() - m
        saved = sum(t for t, k in zip(t_alone, keep, strict=True) if not k) / sum(t_alone)
        lines.append(
            f"| {m:g} | {int(keep.sum())} of {len(kernels)} | {'yes' if keep[top] else 'no'} "
            f"| {sum(bool(keep[i]) for i in within)} of {len(within)} | {saved:.0%} |"
        )
    lines += [
        "",
        "The library's default refines every kernel ([refinement guide](../guide/refine.md)).",
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
