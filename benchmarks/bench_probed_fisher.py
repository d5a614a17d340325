"""Benchmark of the probed Fisher information (above ``PROBE_POINTS`` points): the symmetric
estimator against the previous cross estimator and the exact information.

Above :data:`amorgp.amortizer.stages.fisher_objective.PROBE_POINTS` points Fisher scoring
estimates ``F_pq = tr(A^-1 D_p A^-1 D_q) / 2`` from 64 Rademacher probes.  The library's
estimator is symmetric, ``mean_z (V_p z)^T (V_q z)`` with ``V_p = L^-1 D_p L^-T``: a Gram
matrix, positive semi-definite like ``F``.  The previous one paired ``D_p A^-1 z`` with
``A^-1 D_q z`` (the same expectation, but not a Gram matrix: it could be indefinite).  The
previous estimator is written out below, from the library's code before the change.

1. **The estimate**: at a few points of two kernels on ``n = 1200`` points, each
   estimate's relative (Frobenius) error against the exact information, its smallest
   eigenvalue relative to its largest, the predicted gain it gives relative to the exact
   information's, and the process CPU time of one evaluation with it.
2. **The default fit** (``infer_many``, five kernels) on two synthetic datasets above the
   limit (``n = 1200`` with 2 inputs, ``n = 1500`` with 3 inputs: sums of sines plus a
   fast cosine in the first input, noise 0.1), with each estimator and with the exact
   information: each kernel's log marginal likelihood, refinement status and evaluations,
   and the CPU time of the call.

3. **A lower threshold** (not the library's): the default fit with the Fisher
   information exact up to ``PROBE_POINTS = 1000`` points (the library) and estimated
   from 300 points, on
   the ``realdata-a`` datasets with more than 300 of their first split's training points
   (at most 500) with the 9 kernels of the real-data cells, and on the 24 paper kernels
   with 500 points in 6 inputs (``benchmarks/bench_default_refine.py --extra``'s
   dataset): cells more than 1 nat higher and lower, the refinement's evaluations and
   the CPU time of the calls.

Writes ``docs/benchmarks/probed-fisher.md``.  ``--quick``: one small dataset
(``n = 1100``), two kernels, no exact fit, four ``realdata-a`` datasets and no paper
kernels in part 3.

Usage: ``python benchmarks/bench_probed_fisher.py [--quick] [--out PATH]``.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ["SE", "SE + PER", "SE*PER", "SE + SE*PER", "LIN + PER + SE*LIN"]
LOWER = 300
"""The lower threshold of part 3 (module docstring)."""


def cross_probed(Lc: Tensor, U: Tensor, noise: Tensor) -> Tensor:
    """The previous estimator: ``mean_z (D_p A^-1 z)^T (A^-1 D_q z)``, symmetrised."""
    from amorgp.amortizer.stages import fisher_objective as fo

    B, u, n, _ = U.shape
    gen = torch.Generator().manual_seed(fo.PROBE_SEED)
    Z = torch.randint(0, 2, (n, fo.PROBES), generator=gen).to(U) * 2.0 - 1.0
    Z = Z.expand(B, n, fo.PROBES)
    P = torch.cholesky_solve(Z, Lc)
    QK = Z - noise[:, None, None] * P
    Qg = U @ P[:, None]
    UZ = (U @ Z[:, None]).permute(0, 2, 1, 3).reshape(B, n, u * fo.PROBES)
    Rg = torch.cholesky_solve(UZ, Lc).reshape(B, n, u, fo.PROBES).permute(0, 2, 1, 3)
    Q = torch.cat([Qg, QK[:, None], P[:, None]], 1).flatten(2)
    R = torch.cat([Rg, QK[:, None], P[:, None]], 1).flatten(2)
    Fu = (0.5 / fo.PROBES) * (Q @ R.transpose(1, 2))
    return 0.5 * (Fu + Fu.transpose(1, 2))


def dataset(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    y = np.sin(3 * X).sum(1) + 0.5 * np.cos(7 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    return X, y


@contextmanager
def variant(name: str) -> Iterator[None]:
    """The estimator ``name`` (``symmetric``, ``cross`` or ``exact``) for the block."""
    from amorgp.amortizer.stages import fisher_objective as fo

    saved = fo._probed_fisher, fo.PROBE_POINTS
    if name == "cross":
        fo._probed_fisher = cross_probed
    if name == "exact":
        fo.PROBE_POINTS = 10**9
    try:
        yield
    finally:
        fo._probed_fisher, fo.PROBE_POINTS = saved


def estimates(n: int, quick: bool) -> list[str]:
    from amorgp.amortizer.stages.fisher import predicted_gain
    from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
    from amorgp.kernel_grammar import DimWiseStructure

    lines = [
        "| kernel | point | estimator | relative error | smallest / largest eigenvalue "
        "| predicted gain / exact's | CPU per evaluation (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    X, y = dataset(n, 2, 0)
    Xt = torch.as_tensor((X - X.mean(0)) / X.std(0))[None]
    yt = torch.as_tensor((y - y.mean()) / y.std())[None]
    for kernel in KERNELS[1:2] if quick else [KERNELS[1], KERNELS[4]]:
        s = DimWiseStructure.coerce(kernel, 2)
        obj = BatchLogMarginalLikelihood(Xt, yt, s)
        for point in range(1 if quick else 3):
            gen = torch.Generator().manual_seed(point)
            z = 0.5 * torch.randn(1, obj.floors.numel(), generator=gen, dtype=torch.float64)
            got: dict[str, tuple[Tensor, Tensor, float]] = {}
            for name in ("exact", "symmetric", "cross"):
                with variant(name):
                    t = time.process_time()
                    _, grad, F = obj.evaluate(z)
                    got[name] = (grad, F, time.process_time() - t)
            grad, exact, _ = got["exact"]
            g_exact = float(predicted_gain(exact, grad)[0])
            for name, (g, F, sec) in got.items():
                eig = torch.linalg.eigvalsh(F[0])
                err = float((F - exact).norm() / exact.norm())
                ratio = float(predicted_gain(F, g)[0]) / g_exact if g_exact > 0 else float("nan")
                lines.append(
                    f"| `{kernel}` | {point} | {name} | {err:.2g} | "
                    f"{float(eig[0] / eig[-1]):.2g} | {ratio:.3g} | {sec:.2f} |"
                )
    return lines


def fits(quick: bool) -> list[str]:
    from amorgp.amortizer import Amortizer

    amz = Amortizer.from_pretrained(device="cpu")
    cases = [(1100, 2, 0)] if quick else [(1200, 2, 0), (1500, 3, 1)]
    kernels = KERNELS[:2] if quick else KERNELS
    names = ("symmetric", "cross") if quick else ("symmetric", "cross", "exact")
    lines = [
        "| data | kernel | " + " | ".join(f"{v}: LML, status, evaluations" for v in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for n, d, seed in cases:
        X, y = dataset(n, d, seed)
        amz.infer_many(X[:100], y[:100], kernels[:1], refine=0)  # warm-up
        rows: dict[str, list[Any]] = {}
        seconds: dict[str, float] = {}
        for name in names:
            with variant(name):
                t = time.process_time()
                rs = amz.infer_many(X, y, kernels)
                seconds[name] = time.process_time() - t
            rows[name] = [
                (r.log_marginal_likelihood_original, r.refine_status, r.refine_steps) for r in rs
            ]
            print(n, d, name, round(seconds[name], 1), rows[name], flush=True)
        for i, k in enumerate(kernels):
            cells = [f"{rows[v][i][0]:.2f}, {rows[v][i][1]}, {rows[v][i][2]}" for v in names]
            lines.append(f"| n = {n}, d = {d} | `{k}` | " + " | ".join(cells) + " |")
        cpu = ", ".join(f"{v} {seconds[v]:.0f} s" for v in names)
        lines.append(f"| n = {n}, d = {d} | CPU of the call | {cpu} |" + " |" * (len(names) - 1))
    return lines


def threshold(quick: bool) -> list[str]:
    """Part 3 (module docstring)."""
    from amorgp_experiments.realdata import load_corpus, split

    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.stages import fisher_objective as fo
    from amorgp.kernel_grammar import paper_evaluation_set

    real = [
        "SE", "MAT52", "SE + PER", "SE*PER", "LIN + SE", "SE + SE*PER", "MAT52*PER",
        "SE*LIN", "LIN*PER",
    ]  # fmt: skip
    amz = Amortizer.from_pretrained(device="cpu")
    cases: list[tuple[str, np.ndarray, np.ndarray, list[str]]] = []
    for ds in load_corpus():
        tr, _ = split(len(ds.y), 0, max_train=500)
        if len(tr) > LOWER:
            ks = [k for k in real if not (ds.X.shape[1] > 4 and "PER" in k)]
            cases.append((ds.name, ds.X[tr], ds.y[tr], ks))
    cases = cases[:4] if quick else cases
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (500, 6))
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(500)
    paper = [] if quick else [("24 paper kernels", X, y, [str(t) for t in paper_evaluation_set(0)])]
    lines = [
        "| data | cells | probes from 300: more than 1 nat higher / lower (sum of the "
        "differences, nats) | at optimum, library / probes from 300 | mean evaluations, "
        "library / probes from 300 | CPU, library / probes from 300 (s) | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    groups = {"realdata-a, 300-500 training points": cases, **{p[0]: [p] for p in paper}}
    library = fo.PROBE_POINTS
    for label, group in groups.items():
        got: dict[int, list[tuple[float, int, bool | None]]] = {library: [], LOWER: []}
        sec = dict.fromkeys(got, 0.0)
        for name, Xd, yd, ks in group:
            amz.infer_many(Xd[:50], yd[:50], ks[:1], refine=0)  # warm-up of this width
            for points in got:
                fo.PROBE_POINTS = points
                try:
                    t = time.process_time()
                    rs = amz.infer_many(Xd, yd, ks)
                    sec[points] += time.process_time() - t
                finally:
                    fo.PROBE_POINTS = library
                got[points].extend(
                    (r.log_marginal_likelihood, r.refine_steps, r.at_optimum) for r in rs
                )
            print(name, {p: round(v, 1) for p, v in sec.items()}, flush=True)
        before, after = got[library], got[LOWER]
        diff = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
        up = [d for d in diff if d > 1]
        down = [d for d in diff if d < -1]
        opt = [100 * float(np.mean([bool(c[2]) for c in v])) for v in (before, after)]
        ev = [float(np.mean([c[1] for c in v])) for v in (before, after)]
        lines.append(
            f"| {label} | {len(diff)} | {len(up)} ({sum(up):+.1f}) / {len(down)} "
            f"({sum(down):+.1f}) | {opt[0]:.0f} / {opt[1]:.0f} % | {ev[0]:.1f} / {ev[1]:.1f} "
            f"| {sec[library]:.1f} / {sec[LOWER]:.1f} | {sec[library] / sec[LOWER]:.2f}x |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/probed-fisher.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp.amortizer.stages import fisher_objective as fo

    est = estimates(1100 if args.quick else 1200, args.quick)
    fit = fits(args.quick)
    thr = threshold(args.quick)
    head = [
        "# The probed Fisher information: symmetric, cross and exact",
        "",
        f"Written by `benchmarks/bench_probed_fisher.py`{' (`--quick`)' if args.quick else ''} "
        f"on {platform.machine()}, one thread, torch {torch.__version__}. Above "
        f"{fo.PROBE_POINTS} points Fisher scoring estimates the Fisher information from "
        f"{fo.PROBES} Rademacher probes. **symmetric** (the library's): "
        "`mean_z (V_p z)^T (V_q z)`, `V_p = L^-1 D_p L^-T`, a Gram matrix; **cross** (the "
        "previous estimator): `mean_z (D_p A^-1 z)^T (A^-1 D_q z)`, symmetrised; **exact**: "
        "`tr(A^-1 D_p A^-1 D_q) / 2` from `n x n` products.",
        "",
        "## The estimate",
        "",
        "Two kernels on a synthetic dataset (2 inputs) at three random points (log "
        "parameters ~ N(0, 0.25)) each. Relative error: Frobenius norm of the difference "
        "to the exact information over its norm. An estimate with a negative eigenvalue "
        "is not an information: its quadratic model has no maximum along that direction.",
        "",
    ]
    mid = [
        "",
        "## The default fit above the limit",
        "",
        "`infer_many` with five kernels (the default: multi-start, successive halving, "
        "refinement until the predicted gain is below 0.01 nats, nested restarts), each "
        "estimator in turn on the same data; log marginal likelihood in original units.",
        "",
    ]
    last = [
        "",
        f"## A lower threshold: probes from {LOWER} points (not the library's)",
        "",
        f"The default fit with the Fisher information exact up to {fo.PROBE_POINTS} points "
        f"(the library) and estimated from {LOWER} points, side by side in one process: "
        f"the `realdata-a` datasets with more than {LOWER} training points (their first "
        "split, at most 500) with the 9 kernels of the real-data cells (the periodic ones "
        "on at most 4 inputs), and the 24 paper kernels on 500 points in 6 inputs. Log "
        "marginal likelihood on normalised data; at optimum: the result's `at_optimum`.",
        "",
    ]
    text = "\n".join([*head, *est, *mid, *fit, *last, *thr, ""])
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
