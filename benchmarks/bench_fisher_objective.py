"""The refinement's objective before and after a change, side by side: by default the
derivatives becoming relative to each addend (docs/benchmarks/fisher-objective.md);
``--baseline 20991e1``: PER's matrices by angle addition from the points, one exponential
per product of SE and PER factors and no finiteness pass before the factorisation
(docs/benchmarks/refine-evaluations.md); ``--baseline 2466349``: the batched objective's
symmetric matrices packed, the upper triangle of each (docs/benchmarks/packed-pairs.md);
``--baseline 83d2df3``: the L-BFGS objective's packed too, its own workloads and fits at
2,500-5,000 points (:data:`LBFGS_CASES`, :func:`lbfgs_fits`; docs/benchmarks/packed-lbfgs.md).

Fisher scoring (``refine="auto"``, the default) evaluates the exact log marginal likelihood
of a batch of rows with its gradient, and at some points its Fisher information
(:class:`amorgp.amortizer.stages.fisher_objective.BatchLogMarginalLikelihood`); L-BFGS above
2,000 points evaluates the same value and gradient one dataset at a time
(:class:`amorgp.amortizer.stages.objective.LogMarginalLikelihood`).

* **after** (the working tree): each addend's derivatives relative to it
  (``unit_and_log_grads``: ``dk / d theta = s k M``), so a gradient is one product
  ``W k`` per addend and one dot product per parameter, with no derivative matrix; the
  Fisher information's large temporaries kept between evaluations; fewer ``n x n``
  temporaries in the L-BFGS objective;
* **before** (``--baseline``, default the last commit before this work): the amortizer's
  and lazy-kernels' sources of that revision first on ``PYTHONPATH``: every derivative a
  matrix of its own, every temporary allocated afresh.

Worker processes alternate before / after (the machine is shared and noisy), one thread,
``tune_malloc()`` on (as the command line), process CPU time.  Workloads: a fleet's batch
(``SE + SE*PER`` on 300 series of 80 points, in the objective's chunks), paper kernels
with 13, 31 and 73 hyperparameters on 500 points in 6 inputs (one row), the L-BFGS
objective on 3,000 points (``SE + SE*PER``, 1 input); then whole default fits: the fleet
(``infer_datasets``) and 3 paper kernels at n = 500 (``infer_many``).  Each worker checks
its values; the table reports medians over the rounds (each worker's own the median of
:data:`REPEATS` evaluations), the minor page faults per
evaluation, and the ratio before / after.

Usage: ``python benchmarks/bench_fisher_objective.py [--rounds 3] [--quick] [--baseline REV]``
(a revision of :data:`PAGES`: the page and its description).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "fisher-objective.md"
F64 = torch.float64


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _fleet_objective() -> tuple[Any, Any]:
    from bench_many_datasets import KERNEL, fleet, last_mask

    from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
    from amorgp.kernel_grammar import DimWiseStructure

    data, m = fleet(300), last_mask()
    X = torch.tensor(np.stack([x[~m] for x, _ in data]))[:, :, None]
    Y = torch.tensor(np.stack([y[~m] for _, y in data]))
    X = (X - X.amin(1, keepdim=True)) / (X.amax(1, keepdim=True) - X.amin(1, keepdim=True))
    Y = (Y - Y.mean(1, keepdim=True)) / Y.std(1, keepdim=True)
    s = DimWiseStructure.parse(KERNEL, 1)
    obj = BatchLogMarginalLikelihood(X, Y, s)
    P = torch.ones(300, 1, s.max_addends, 4, dtype=F64)
    P[..., 1] = 0.3  # lengthscales
    P[..., 3] = 0.15  # period
    return obj, obj.to_log_rows(P, torch.full((300,), 0.1, dtype=F64))


def _paper_objective(kernel: str) -> tuple[Any, Any]:
    from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
    from amorgp.kernel_grammar import DimWiseStructure

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, (1, 500, 6))
    y = np.sin(4 * X).sum(-1) + 0.1 * rng.standard_normal((1, 500))
    s = DimWiseStructure.parse(kernel, 6)
    obj = BatchLogMarginalLikelihood(torch.tensor(X), torch.tensor((y - y.mean()) / y.std()), s)
    P = torch.full((1, 6, s.max_addends, 4), 0.5, dtype=F64)
    return obj, obj.to_log_rows(P, torch.full((1,), 0.1, dtype=F64))


def _lbfgs_objective(kernel: str = "SE + SE*PER", d: int = 1, n: int = 3000) -> tuple[Any, Any]:
    from amorgp.amortizer.stages.objective import LogMarginalLikelihood
    from amorgp.kernel_grammar import DimWiseStructure

    rng = np.random.default_rng(1)
    if d == 1:
        x = np.sort(rng.uniform(0.0, 1.0, n))[:, None]
        y = np.sin(40 * x[:, 0]) + x[:, 0] + 0.1 * rng.standard_normal(n)
    else:
        x = rng.uniform(0.0, 1.0, (n, d))
        y = np.sin(4 * x).sum(-1) + 0.1 * rng.standard_normal(n)
    s = DimWiseStructure.parse(kernel, d)
    obj = LogMarginalLikelihood(torch.tensor(x), torch.tensor((y - y.mean()) / y.std()), s)
    P = torch.full((d, s.max_addends, 4), 0.3, dtype=F64)
    return obj, obj.to_log(P, torch.tensor(0.1, dtype=F64))


LBFGS_CASES = [("SE + SE*PER", 1, 3000), ("SE", 6, 3000), ("SE + PER", 6, 2500), ("SE", 1, 5000)]
"""The L-BFGS objective's workloads of ``--baseline 83d2df3``: ``(kernel, d, n)``."""


def lbfgs_workloads(quick: bool) -> list[tuple[str, int, Callable[[], Any]]]:
    """``(name, rows, evaluation)`` of the L-BFGS objective (one dataset, value and
    gradient)."""
    out: list[tuple[str, int, Callable[[], Any]]] = []
    for kernel, d, n in LBFGS_CASES[:2] if quick else LBFGS_CASES:
        o, z = _lbfgs_objective(kernel, d, n)
        name = f"L-BFGS objective: n = {n:,}, d = {d}, `{kernel}` (m = {z.numel()})"
        out.append((name, 1, lambda o=o, z=z: o.value_and_grad(z)))
    return out


def workloads(quick: bool) -> list[tuple[str, int, Callable[[], Any]]]:
    """``(name, rows, evaluation)``: each evaluation's value is compared across routes."""
    out: list[tuple[str, int, Callable[[], Any]]] = []
    obj, z = _fleet_objective()
    rows = torch.arange(z.shape[0])
    out.append(
        ("fleet: 300 x (n = 80), SE + SE*PER, no Fisher", 300, lambda: obj.evaluate(z, rows, False))
    )
    out.append(
        (
            "fleet: 300 x (n = 80), SE + SE*PER, with Fisher",
            300,
            lambda: obj.evaluate(z, rows, True),
        )
    )
    kernels = ["SE", "SE + PER"] if quick else ["SE", "SE + PER", "LIN + PER + SE*LIN + SE*PER"]
    for k in kernels:
        o, zk = _paper_objective(k)
        m = zk.shape[1]
        r1 = torch.arange(1)
        out.append(
            (
                f"n = 500, d = 6, `{k}` (m = {m}), no Fisher",
                1,
                lambda o=o, zk=zk, r1=r1: o.evaluate(zk, r1, False),
            )
        )
        out.append(
            (
                f"n = 500, d = 6, `{k}` (m = {m}), with Fisher",
                1,
                lambda o=o, zk=zk, r1=r1: o.evaluate(zk, r1, True),
            )
        )
    if not quick:
        lo, lz = _lbfgs_objective()
        out.append(
            (
                "L-BFGS objective: n = 3,000, SE + SE*PER, value and gradient",
                1,
                lambda: lo.value_and_grad(lz),
            )
        )
    return out


BASELINE = "8f95318"  # the last commit before the relative derivatives

PAGES: dict[str, dict[str, str]] = {
    BASELINE: {
        "out": "fisher-objective.md",
        "title": "The refinement's objective: derivatives relative to each addend",
        "before": "a matrix per derivative, every temporary allocated afresh",
        "after": (
            "each addend's derivatives relative to it, `dk / d theta = s k M`, so a gradient "
            "forms no derivative matrix; the Fisher information's temporaries kept between "
            "evaluations; fewer temporaries in the L-BFGS objective"
        ),
        "why": (
            "Where the gain comes from: an evaluation without the Fisher information (most of "
            "a refinement's) no longer forms a derivative matrix per hyperparameter, most of "
            "its memory traffic and of its freshly faulted pages where addends are products or "
            "hyperparameters many; an evaluation with it still forms them (the Fisher "
            "information needs `A^-1 dK/d theta` for each: `u n^3` multiply-adds, "
            "compute-bound) and saves the page faults of its temporaries. At n = 80 an "
            "evaluation is mostly the factorisation, the inverse and per-call overhead: there "
            "the gain is the larger chunks of rows of an evaluation without the Fisher "
            "information (8 MiB, `PLAIN_CHUNK_BYTES`; 2 MiB before)."
        ),
    },
    "20991e1": {
        "out": "refine-evaluations.md",
        "title": "The refinement's objective: PER by angle addition, one exponential per product",
        "before": "PER's sine and cosine of every pair's difference, one exponential per SE "
        "or PER factor, a finiteness pass over each matrix before its factorisation",
        "after": (
            "PER's sines and cosines of the points, combined by angle addition "
            "(`TorchElementary.points_exponent_grads`), one exponential of the summed "
            "exponents of a product's SE and PER factors (`exponent_grads`), and the "
            "factorisation's own failure or a non-finite likelihood flagging a bad matrix"
        ),
        "why": (
            "Where the gain comes from: the kernel matrices' transcendental functions. A PER "
            "factor took a sine and a cosine of each of the `n^2` differences, and its "
            "exponential; it now takes `n` of each and combines them by products, so the "
            "kernels with PER gain most (`SE` alone only loses the finiteness pass); an "
            "evaluation with the Fisher information gains less, its `u n^3` products being "
            "the same."
        ),
    },
    "2466349": {
        "out": "packed-pairs.md",
        "title": "The refinement's objective: symmetric matrices packed",
        "before": "every kernel, derivative and weight matrix of an evaluation formed in full, "
        "`n x n`",
        "after": (
            "the pairs' values only, the upper triangle with the diagonal (`n (n + 1) / 2` "
            "numbers), the full matrix formed once for the factorisation and, with the "
            "Fisher information, once per derivative"
        ),
        "why": (
            "Where the gain comes from: the matrices of an evaluation are symmetric, and "
            "forming them element by element (each addend's factors, their products over "
            "the dimensions, the weights `W` times each product) was most of an evaluation "
            "without the Fisher information, bound by memory traffic; on half the numbers "
            "it is about half the work. The factorisation and the inverse are unchanged, and "
            "so is an evaluation with the Fisher information, whose `u n^3` products of full "
            "matrices dominate it (each derivative matrix is now unpacked into them). The "
            "L-BFGS objective (above 2,000 points, one dataset at a time) is the same code "
            "on both sides: its row shows the spread between worker processes on this "
            "shared machine."
        ),
    },
    "83d2df3": {
        "out": "packed-lbfgs.md",
        "workloads": "lbfgs",
        "title": "The L-BFGS objective: symmetric matrices packed",
        "before": "the L-BFGS objective's kernel, product and weight matrices formed in full, "
        "`n x n`, the covariance a new matrix each evaluation",
        "after": (
            "the pairs' values only, the lower triangle with the diagonal (`n (n + 1) / 2` "
            "numbers, row by row), written into the lower triangle of one covariance buffer "
            "kept for the objective's life (the part the factorisation reads)"
        ),
        "why": (
            "Where the gain comes from: as in the batched objective "
            "([packed-pairs.md](packed-pairs.md)), the element-wise work of an evaluation "
            "(each dimension's differences, the addends' factors, their products over the "
            "dimensions and the weights `W` times each) runs on half the numbers, and the "
            "pairwise differences, squares and products kept for the fit take half the "
            "memory: the more inputs, the larger both gains. The factorisation and the "
            "inverse (`n^3 / 3` and `2 n^3 / 3` multiply-adds) are unchanged and dominate "
            "the evaluation of a kernel on one input as `n` grows. `refine=k` and "
            '`refine="auto"` above 2,000 points evaluate this objective, and so does the '
            "default up to 5,000 points (`refine.DEFAULT_POINTS`). Measured before the "
            'kernels of one refinement shared their packed pairs and before `refine="auto"`\'s '
            "L-BFGS rounds became one continued run (CHANGELOG)."
        ),
    },
}
REPEATS = 3  # timed evaluations of each workload per worker (median)


def _same(a: Any, b: Any) -> bool:
    ta = a if isinstance(a, tuple) else (a,)
    tb = b if isinstance(b, tuple) else (b,)
    return all(
        x.shape == y.shape
        and (
            x.numel() == 0
            or torch.allclose(x, y, rtol=1e-9, atol=1e-9 * float(x.abs().max().clamp_min(1.0)))
        )
        for x, y in zip(ta, tb, strict=True)
    )


def worker(quick: bool, fits: bool, kind: str = "fisher") -> dict[str, Any]:
    """One process's timings: per workload ``(CPU seconds per row, faults, values)``, then
    with ``fits`` the whole fits' ``(CPU seconds, log marginal likelihoods)``; ``kind``
    ``"lbfgs"``: the L-BFGS objective's workloads and fits (:func:`lbfgs_worker`)."""
    out: dict[str, Any] = {}
    for name, rows, fn in lbfgs_workloads(quick) if kind == "lbfgs" else workloads(quick):
        first = fn()  # warm-up
        times, faults = [], []
        for _ in range(REPEATS):
            f0, t0 = _faults(), time.process_time()
            again = fn()
            times.append((time.process_time() - t0) / rows)
            faults.append(_faults() - f0)
        out[name] = (
            statistics.median(times),
            statistics.median(faults),
            [float(v) for v in (first[0] if isinstance(first, tuple) else first).reshape(-1)[:8]],
        )
        if not _same(first, again):
            raise SystemExit(f"{name}: two evaluations differ")
    if not fits:
        return out
    if kind == "lbfgs":
        return {**out, **lbfgs_fits(quick)}
    from bench_many_datasets import KERNEL, fleet, last_mask

    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import paper_evaluation_set

    amz = Amortizer.from_pretrained(device="cpu")
    data, m = fleet(100 if quick else 300), last_mask()
    train = [(x[~m][:, None], yy[~m]) for x, yy in data]
    amz.infer_datasets(train[:20], [KERNEL], refine=0)  # warm-up
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (500, 6))
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(500)
    names = [str(t) for t in paper_evaluation_set(0)]
    kernels = [names[i] for i in ((3, 10) if quick else (3, 10, 19))]
    cases: list[tuple[str, Callable[[], list[float]]]] = [
        (
            f"`infer_datasets`: {len(train)} series of 80 points, `{KERNEL}`, default",
            lambda: [
                f.results[0].log_marginal_likelihood for f in amz.infer_datasets(train, [KERNEL])
            ],
        ),
        (
            f"`infer_many`: {', '.join(f'`{k}`' for k in kernels)} on 500 points in 6 inputs, default",
            lambda: [r.log_marginal_likelihood for r in amz.infer_many(X, y, kernels)],
        ),
    ]
    for name, fit in cases:
        t0 = time.process_time()
        lml = fit()
        out["fit: " + name] = (time.process_time() - t0, lml)
    return out


def lbfgs_fits(quick: bool) -> dict[str, Any]:
    """Whole fits that refine by L-BFGS (above 2,000 points, ``refine="auto"`` and
    ``refine=20``): ``(CPU seconds, [log marginal likelihood])`` each, then the worker's
    peak resident memory (MiB) over everything it ran."""
    from amorgp.amortizer import Amortizer

    amz = Amortizer.from_pretrained(device="cpu")
    rng = np.random.default_rng(1)
    n = 2500 if quick else 3000
    X = rng.uniform(0.0, 1.0, (n, 6))
    y = np.sin(4 * X).sum(-1) + 0.1 * rng.standard_normal(n)
    out: dict[str, Any] = {}
    for refine in (20,) if quick else (20, "auto"):
        t0 = time.process_time()
        r = amz.infer(X, y, "SE", refine=refine)
        name = f"fit: `infer`: `SE` on {n:,} points in 6 inputs, `refine={refine!r}`"
        out[name] = (time.process_time() - t0, [r.log_marginal_likelihood])
    out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _baseline_tree(rev: str, into: str) -> str:
    """The amortizer's and lazy-kernels' ``src`` trees of ``rev`` under ``into``, as a
    ``PYTHONPATH``."""
    paths = []
    for pkg in ("packages/amortizer/src", "packages/lazy-kernels/src"):
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, pkg], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
        paths.append(str(Path(into, pkg)))
    return os.pathsep.join(paths)


def _run(src: str | None, quick: bool, fits: bool, kind: str) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, __file__, "--worker", "--kind", kind] + (["--quick"] if quick else [])
    args += ["--fits"] if fits else []
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fit-rounds", type=int, default=2)
    parser.add_argument("--baseline", default=BASELINE, choices=sorted(PAGES))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fits", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="fisher", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    if args.worker:
        from amorgp.core.memory import tune_malloc

        tune_malloc()
        print(json.dumps(worker(args.quick, args.fits, args.kind)))
        return
    page = PAGES[args.baseline]
    kind = page.get("workloads", "fisher")
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        src = _baseline_tree(args.baseline, tmp)
        for r in range(max(args.rounds, args.fit_rounds)):
            for side in ("before", "after"):
                runs[side].append(
                    _run(src if side == "before" else None, args.quick, r < args.fit_rounds, kind)
                )
                print(side, r, flush=True)
    names = [k for k in runs["after"][0] if not k.startswith("fit: ") and k != "peak"]
    objective = [
        "| workload | before: ms per row | after: ms per row | before / after | page faults per evaluation (before, after) |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        b = [w[name] for w in runs["before"]]
        a = [w[name] for w in runs["after"]]
        if not np.allclose(b[0][2], a[0][2], rtol=1e-9, atol=1e-9):
            raise SystemExit(f"{name}: before and after differ: {b[0][2]} {a[0][2]}")
        tb, ta = statistics.median(x[0] for x in b), statistics.median(x[0] for x in a)
        fb, fa = statistics.median(x[1] for x in b), statistics.median(x[1] for x in a)
        objective.append(
            f"| {name} | {1e3 * tb:.3f} | {1e3 * ta:.3f} | {tb / ta:.2f}x | {fb:,.0f}, {fa:,.0f} |"
        )
    fits = [
        "| fit | before: CPU seconds | after: CPU seconds | before / after | largest difference of a row's log marginal likelihood |",
        "|---|---|---|---|---|",
    ]
    for name in [k for k in runs["after"][0] if k.startswith("fit: ")]:
        b = [w[name] for w in runs["before"] if name in w]
        a = [w[name] for w in runs["after"] if name in w]
        tb, ta = statistics.median(x[0] for x in b), statistics.median(x[0] for x in a)
        diff = float(np.max(np.abs(np.array(b[0][1]) - np.array(a[0][1]))))
        fits.append(f"| {name[5:]} | {tb:.1f} | {ta:.1f} | {tb / ta:.2f}x | {diff:.3g} |")
    machine = f"{platform.machine()} (one thread), torch {torch.__version__}"
    peaks = [
        statistics.median(w["peak"] for w in runs[side] if "peak" in w)
        for side in ("before", "after")
        if any("peak" in w for w in runs[side])
    ]
    if peaks:
        fits += [
            "",
            f"Peak resident memory of a worker process (every workload above and the fits): "
            f"{peaks[0]:,.0f} MiB before, {peaks[1]:,.0f} MiB after.",
        ]
    flags = (" --quick" if args.quick else "") + (
        f" --baseline {args.baseline}" if args.baseline != BASELINE else ""
    )
    text = [
        f"# {page['title']}",
        "",
        f"`benchmarks/bench_fisher_objective.py{flags}`; {machine}, "
        "process CPU time, `tune_malloc()` on (as the command line); 2 cores shared with other "
        f"jobs. **before**: the amortizer and lazy-kernels of revision `{args.baseline}` "
        f"({page['before']}); **after**: this tree ({page['after']}). Worker processes "
        "alternate before / after; medians over the rounds; both give the same values "
        "(checked).",
        "",
        f"One evaluation ({args.rounds} rounds"
        + ("):" if kind == "lbfgs" else "; a fleet's 300 rows in the objective's chunks):"),
        "",
        *objective,
        "",
        (
            f"Whole fits ({args.fit_rounds} rounds; "
            if kind == "lbfgs"
            else f"Whole default fits ({args.fit_rounds} rounds; "
        )
        + "a row that ends at the evaluation cap "
        "can stop at a slightly different point, its path depending on rounding):",
        "",
        *fits,
        "",
        page["why"],
        "",
    ]
    out = OUT.parent / page["out"]
    out.write_text("\n".join(text))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
