"""Benchmarks of amorgp.lazy_kernels; writes docs/benchmarks/lazy-kernels.md.

Sections (every ratio measured side by side in this run):

1. kernel matvec ``K(X, X) v``: dense (batched evaluator + matmul) vs KeOps, time and
   peak resident memory (each configuration in a fresh subprocess), SE and a composite
   dimension-wise kernel, d = 4 and 8;
2. KeOps compile time, cold (empty build folder) vs warm (cached binary);
3. exact GP log marginal likelihood + gradient vs n: ours (Cholesky, dense CG, KeOps CG)
   and GPyTorch (Cholesky and BBMM);
4. accuracy of CG solves and the SLQ log-determinant vs Cholesky;
5. the batched heterogeneous evaluator vs a Python loop over GPyTorch kernel modules
   for 128 mixed dimension-wise structures;
6. the batched evaluator on simulator batches (paper preset, B = 128, and B = 16 with
   n <= 50), forward and forward + backward, process CPU time on one thread, against
   the previous algorithm (token gather + ``segment_reduce``, frozen below);
7. prediction at many test points (n = 3000, m = 20 000, ``SE*LIN + PER``, d = 4): one
   cached ``Posterior`` vs a fresh factorisation per 256 MiB chunk (the previous
   amortizer path, frozen below), time, peak memory and factorisation count;
8. the evaluator's CPU speed on the training, ensemble and prediction workloads, before
   (the lazy-kernels source of a git revision) vs after, in alternating worker processes
   (``bench_evaluator_speed.py``);
9. a fit's posterior (parameters without an autograd graph) at n = 1000, d = 8, 24-32
   addends: the evaluator's peak memory with and without a graph (fresh processes), and
   the log marginal likelihood by ``"auto"`` (dense Cholesky, the block-wise memory rule)
   against KeOps CG (what counting 6 matrices per addend chose), time and accuracy;
10. the log marginal likelihood's gradient with a graph for the parameters only (Type-2
   ML, training loss): the whole-matrix graph vs the graph rebuilt block by block, one
   process, alternating rounds.
11. Memory over a loop that adds one point per step (Bayesian optimisation, active
   learning): the evaluator and the amortizer before/after bounding the circulant-index
   cache, GPyTorch and scikit-learn running the same loop.

Usage: ``python benchmarks/bench_lazy_kernels.py [--quick] [--full] [--section NAME]
[--baseline REV]`` (``--full`` adds n = 1e5 KeOps matvecs and larger dense sizes;
``--section evaluator``, ``posterior``, ``evaluator-speed``, ``no-graph``,
``graph-blocks`` or ``growing-loop`` runs section 6, 7, 8, 9, 10 or 11 alone
and rewrites only its part of the report; ``--baseline`` is section 8's *before* revision).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "lazy-kernels.md"
COMPOSITE = "SE*LIN + PER"
GP_STRUCTURE = "(SE + PER*RQ)@0 * (LIN + MAT52*LIN)@1"


def _timeit(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    fn()  # warm-up (and compilation)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    q1 = ts[len(ts) // 4]
    q3 = ts[(3 * len(ts)) // 4]
    return statistics.median(ts), q1, q3


def _fmt(t: tuple[float, float, float]) -> str:
    m, lo, hi = t
    return f"{m * 1e3:.1f} [{lo * 1e3:.1f}, {hi * 1e3:.1f}]"


# ----------------------------------------------------------------------------- workers


def _worker_matvec(backend: str, kernel: str, d: int, n: int, repeats: int) -> dict:
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import DimWiseKernel, KeOpsKernel

    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    s = DimWiseStructure.parse(kernel, d)
    params = 0.5 + torch.rand(d, s.max_addends, 3, generator=g, dtype=torch.float64)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    v = torch.randn(n, 1, generator=g, dtype=torch.float64)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if backend == "dense":
        k = DimWiseKernel(s, params)
        t = _timeit(lambda: k(X) @ v, repeats)
    else:
        kk = KeOpsKernel(s, params)
        t = _timeit(lambda: kk.matmul(X, X, v), repeats)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"t": t, "peak_mib": peak / 1024, "delta_mib": (peak - base) / 1024}


def _worker_compile(folder: str) -> dict:
    import pykeops

    pykeops.set_build_folder(folder)
    from amorgp.lazy_kernels import KeOpsKernel

    params = torch.full((1, 2, 3), 0.5, dtype=torch.float64)
    X = torch.rand(10, 1, dtype=torch.float64)
    t = time.perf_counter()
    KeOpsKernel("SE + PER", params, n_dims=1).matmul(X, X, torch.ones(10, 1, dtype=torch.float64))
    return {"t": time.perf_counter() - t}


def _previous_predict(kernel, noise, X, y, Xc):  # type: ignore[no-untyped-def]
    """Frozen copy of the previous exact-GP prediction (Cholesky backend): ``K`` and its
    Cholesky are rebuilt on every call."""
    from amorgp.diff_linalg import robust_cholesky

    with torch.no_grad():
        K = kernel(X)
        A = K + noise * torch.eye(K.shape[0], dtype=K.dtype)
        L = robust_cholesky(A).L
        Ks = kernel(X, Xc)
        alpha = torch.cholesky_solve(y[:, None], L)
        mean = (Ks.T @ alpha)[:, 0]
        Vs = torch.linalg.solve_triangular(L, Ks, upper=False)
        return mean, (kernel.diag(Xc) - (Vs * Vs).sum(0)).clamp_min(0.0)


def _worker_posterior(mode: str, n: int, m: int) -> dict:
    """Predict at ``m`` points, then the log marginal likelihood, in a fresh process."""
    import math

    from amorgp.diff_linalg import robust_cholesky
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import DimWiseKernel, Posterior

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    s = DimWiseStructure.parse(COMPOSITE, 4)
    params = 0.5 + torch.rand(4, s.max_addends, 3, generator=g, dtype=torch.float64)
    kernel = DimWiseKernel(s, params)
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    Xs = torch.rand(m, 4, generator=g, dtype=torch.float64)
    noise = 0.05
    kernel(X[:3], Xs[:2])  # warm-up: lazy imports inside torch
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if mode == "before":  # the amortizer's previous path: a fresh exact GP per 256 MiB chunk
        rows = max(1, 256 * 2**20 // (8 * n))
        parts = [
            _previous_predict(kernel, noise, X, y, Xs[i : i + rows]) for i in range(0, m, rows)
        ]
        mean, var = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        count = len(parts)
        t1 = time.perf_counter()
        with torch.no_grad():  # and a fresh one for the log marginal likelihood
            A = kernel(X) + noise * torch.eye(n, dtype=torch.float64)
            L = robust_cholesky(A).L
            a = torch.cholesky_solve(y[:, None], L)[:, 0]
            lml = -0.5 * y @ a - torch.log(L.diagonal()).sum() - 0.5 * n * math.log(2 * math.pi)
        count += 1
    else:
        gp = Posterior.from_kernel(kernel, X, y, noise)  # "auto" -> Cholesky at this size
        with torch.no_grad():
            mean, var = gp.predict(Xs)
            t1 = time.perf_counter()
            lml = gp.log_marginal_likelihood()
        count = gp.factorizations
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert var is not None
    return {
        "predict_s": t1 - t0,
        "lml_s": t2 - t1,
        "factorizations": count,
        "peak_mib": peak / 1024,
        "delta_mib": (peak - base) / 1024,
        "lml": float(lml),
        "mean": mean[::97].tolist(),
        "var": var[::97].tolist(),
    }


LOOP_BASELINE = "237dc31"
"""The last revision whose evaluator cached a circulant index per size (section 11)."""

NO_GRAPH_KERNELS = ("PER + SE*LIN + SE*PER", "LIN + PER + SE*LIN + SE*PER")


def _worker_evaluator_memory(kernel: str, n: int, graph: bool) -> dict:
    """Peak resident-memory growth of one ``K(X, X)`` evaluation (d = 8), in ``n x n``
    matrices, in a fresh process."""
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import DimWiseKernel

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    s = DimWiseStructure.coerce(kernel, 8)
    params = 0.5 + torch.rand(8, s.max_addends, 4, generator=g, dtype=torch.float64)
    k = DimWiseKernel(s, params.requires_grad_(graph))
    X = torch.rand(n, 8, generator=g, dtype=torch.float64)
    k(X[:10])  # warm-up: lazy imports inside torch
    W = torch.rand(n, n, generator=g, dtype=torch.float64)  # a dense loss gradient, as the LML's
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.set_grad_enabled(graph):
        K = k(X)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"terms": k.n_terms, "matrices": (peak - base) * 1024 / K.numel() / 8}
    if graph:
        (K * W).sum().backward()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["matrices_backward"] = (peak - base) * 1024 / K.numel() / 8
    return out


def _worker_growing_loop(variant: str, lo: int, hi: int) -> dict:
    """Peak resident-memory growth (MiB) of a loop that adds one point per step, as a
    Bayesian-optimisation or active-learning loop does (d = 2, float64, one thread).

    ``lazy``: ``K(X, X)`` of ``SE`` in both dimensions by the batched evaluator;
    ``gpytorch``: the same matrix from GPyTorch's ``RBFKernel`` (ARD), evaluated dense;
    ``amortizer``: ``Amortizer.infer`` (network, calibration, exact GP) and a prediction
    at 5 points; ``sklearn``: scikit-learn's ``GaussianProcessRegressor`` with the kernel
    fixed (``optimizer=None``) fitted and predicting at 5 points.
    """
    g = torch.Generator().manual_seed(0)
    X = torch.rand(hi, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) * X[:, 1] + 0.05 * torch.randn(hi, generator=g, dtype=torch.float64)
    torch.set_num_threads(1)
    if variant == "lazy":
        from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, encode
        from amorgp.lazy_kernels import kernel_matrix_dimwise

        sym, mask = (
            torch.as_tensor(t) for t in encode([DimWiseStructure.coerce("SE", 2)], PAPER_VOCABULARY)
        )
        params = torch.full(
            (1, 2, sym.shape[2], PAPER_VOCABULARY.max_params), 0.7, dtype=torch.float64
        )

        def step(n: int) -> None:
            with torch.no_grad():
                kernel_matrix_dimwise(X[None, :n], X[None, :n], sym, mask, params, PAPER_VOCABULARY)

    elif variant == "gpytorch":
        import gpytorch

        k = gpytorch.kernels.RBFKernel(ard_num_dims=2).double()

        def step(n: int) -> None:
            with torch.no_grad():
                k(X[:n]).to_dense()

    elif variant == "amortizer":
        from amorgp.amortizer import Amortizer

        amz = Amortizer.from_pretrained()

        def step(n: int) -> None:
            amz.infer(X[:n], y[:n], "SE").predict(X[:5])

    else:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, WhiteKernel

        Xn, yn = X.numpy(), y.numpy()
        kern = RBF([0.3, 0.3]) + WhiteKernel(0.01)

        def step(n: int) -> None:
            GaussianProcessRegressor(kern, optimizer=None).fit(Xn[:n], yn[:n]).predict(Xn[:5])

    step(lo)  # warm-up: lazy imports, the network's trace
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    for n in range(lo, hi + 1):
        step(n)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mib": (peak - base) / 1024, "s": time.perf_counter() - started}


def _no_graph_lml(kernel: str, n: int) -> dict:
    """LML of fixed hyperparameters by ``auto`` and by KeOps CG (after a compile call)."""
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import DimWiseKernel, Posterior

    g = torch.Generator().manual_seed(1)
    s = DimWiseStructure.coerce(kernel, 8)
    params = 0.5 + torch.rand(8, s.max_addends, 4, generator=g, dtype=torch.float64)
    X = torch.rand(n, 8, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    out: dict = {"terms": DimWiseKernel(s, params).n_terms}
    for backend in ("auto", "keops", "keops"):  # the first KeOps call compiles
        gp = Posterior.from_kernel(
            DimWiseKernel(s, params), X, y, 0.05, backend=backend, memory_budget=2**30
        )
        t0 = time.perf_counter()
        lml = float(gp.log_marginal_likelihood())
        out[backend] = {"s": time.perf_counter() - t0, "lml": lml, "backend": gp.backend}
    return out


def _slq_errors(kernel: str, n: int, seeds: int, probes: int = 15) -> dict:
    """SLQ log-determinant error of ``K + 0.05 I`` (dense CG, ``probes`` probes, rank 64)
    with the noise-only and the residual-diagonal preconditioner, over ``seeds`` seeds."""
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import (
        DimWiseKernel,
        PivotedCholeskyPreconditioner,
        pcg,
        pivoted_cholesky,
        slq_logdet,
    )

    g = torch.Generator().manual_seed(1)
    s = DimWiseStructure.coerce(kernel, 8)
    params = 0.5 + torch.rand(8, s.max_addends, 4, generator=g, dtype=torch.float64)
    X = torch.rand(n, 8, generator=g, dtype=torch.float64)
    K = DimWiseKernel(s, params)(X)
    noise = torch.tensor(0.05, dtype=torch.float64)
    A = K + noise * torch.eye(n, dtype=torch.float64)
    exact = float(torch.linalg.slogdet(A)[1])
    L = pivoted_cholesky(torch.diagonal(K), lambda i: K[:, i], rank=64)
    out = {}
    for name, residual in (("noise", None), ("residual", torch.diagonal(K) - (L * L).sum(1))):
        P = PivotedCholeskyPreconditioner(L, noise, residual)
        errors, iters = [], []
        for seed in range(seeds):
            Z = P.sample(probes, torch.Generator().manual_seed(seed))
            _, alphas, betas, it = pcg(lambda V: A @ V, Z, P.solve, tol=1e-8, max_iter=1000)
            est = P.logdet() + slq_logdet(alphas, betas, (Z * P.solve(Z)).sum(0))
            errors.append(abs(float(est) - exact))
            iters.append(it)
        out[name] = {"error": statistics.mean(errors), "iters": statistics.median(iters)}
    return out


def section_no_graph(quick: bool) -> list[str]:
    import amorgp.lazy_kernels as lk
    from amorgp.lazy_kernels.keops import keops_available

    sizes = (1000,) if quick else (1000, 2000, 3000)
    kernels = ("SE", *NO_GRAPH_KERNELS)
    lines = [
        "",
        "## 9. A fit's posterior without an autograd graph (d = 8)",
        "",
        "Peak resident-memory growth of one `K(X, X)` evaluation, in `n x n` matrices (the "
        "output included), each in a fresh process, one thread, float64.",
        "",
        "| kernel (every dimension) | addends | n | with graph | with graph, forward and "
        "backward | without graph |",
        "|---|---|---|---|---|---|",
    ]
    for kernel in kernels:
        for n in sizes:
            r = {
                graph: _run_worker(["evaluator-memory", kernel, str(n), str(int(graph))])
                for graph in (True, False)
            }
            lines.append(
                f"| `{kernel}` | {r[True]['terms']} | {n} | {r[True]['matrices']:.1f} | "
                f"{r[True]['matrices_backward']:.1f} | {r[False]['matrices']:.1f} |"
            )
    lines += [
        "",
        "Without a graph the peak does not grow with the addends, so `choose_backend(..., "
        f"graph=False)` counts at most `EVALUATOR_MATRICES_NO_GRAPH = "
        f"{lk.EVALUATOR_MATRICES_NO_GRAPH}` matrices. "
        "With a graph for the parameters the evaluator records it block by block where the "
        "matrix is large enough (`evaluation.BLOCKWISE_MIN_ELEMENTS` values over all "
        "dimensions: every row here), and the peak, forward and backward, does not grow with "
        "the addends either: from n = 2048 on the CPU `choose_backend` counts at most "
        f"`EVALUATOR_MATRICES_BLOCKWISE = {lk.EVALUATOR_MATRICES_BLOCKWISE}` matrices; below, "
        "on other devices "
        f"and with a graph for the inputs `EVALUATOR_MATRICES_PER_TERM = "
        f"{lk.EVALUATOR_MATRICES_PER_TERM}` per "
        "addend (conservative). At n = 1000 a fixed few tens of MiB of block buffers are "
        "several matrices of that size.",
        "",
    ]
    if not keops_available():
        return [*lines, "(KeOps rows skipped: pykeops is not installed.)"]
    torch.set_num_threads(1)
    n = 1000
    lines += [
        f"Log marginal likelihood of fixed hyperparameters at n = {n} (noise 0.05), one "
        "thread, 1 GiB budget: `auto` (now dense Cholesky for these kernels) against KeOps "
        "CG + SLQ (the backend the per-addend count chose for them; timed after a first "
        "call that compiles the formula).",
        "",
        "| kernel | addends | auto backend | auto s | KeOps CG s | KeOps / auto | "
        "LML auto | LML KeOps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kernel in NO_GRAPH_KERNELS:
        r = _no_graph_lml(kernel, n)
        a, k = r["auto"], r["keops"]
        lines.append(
            f"| `{kernel}` | {r['terms']} | {a['backend']} | {a['s']:.2f} | {k['s']:.1f} | "
            f"{k['s'] / a['s']:.0f}x | {a['lml']:.2f} | {k['lml']:.2f} |"
        )
    seeds = 3 if quick else 8
    lines += [
        "",
        f"The CG rows' log-determinant is a stochastic Lanczos quadrature estimate. Its error "
        f"against the exact `log det(K + 0.05 I)` at n = {n} (dense CG, 15 probes, "
        f"preconditioner rank 64, mean absolute error over {seeds} probe seeds), with the "
        "pivoted-Cholesky preconditioner `L L^T + sigma^2 I` (the previous one) and with "
        "the diagonal `L L^T` leaves out put back (`L L^T + diag(K - L L^T) + sigma^2 I`, "
        "now the default):",
        "",
        "| kernel | noise-only: mean abs error (nats) | CG iterations | with residual diagonal: "
        "mean abs error (nats) | CG iterations |",
        "|---|---|---|---|---|",
    ]
    for kernel in NO_GRAPH_KERNELS:
        e = _slq_errors(kernel, n, seeds)
        lines.append(
            f"| `{kernel}` | {e['noise']['error']:.1f} | {e['noise']['iters']:.0f} | "
            f"{e['residual']['error']:.1f} | {e['residual']['iters']:.0f} |"
        )
    lines += [
        "",
        "With short lengthscales in 8 dimensions the kernel's spectrum decays slowly and "
        "a rank-64 factor leaves most of it out; with `sigma^2` alone the preconditioned "
        "matrix keeps eigenvalues up to `lambda / sigma^2` and the estimate's spread is "
        "large. Model averaging and structure search weight kernels by this number.",
    ]
    return lines


GRAPH_KERNEL = "SE*LIN + PER"


def _graph_workloads(quick: bool) -> dict[str, Callable[[], object]]:
    """Objective + gradient workloads recording a graph for the parameters only."""
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V
    from amorgp.kernel_grammar import DimWiseStructure, encode
    from amorgp.lazy_kernels import kernel_matrix_dimwise
    from amorgp.simulator import Simulator, SimulatorConfig

    g = torch.Generator().manual_seed(0)
    n, d = (300, 8) if quick else (500, 8)
    sp, mp = (torch.as_tensor(a) for a in encode([DimWiseStructure.parse(GRAPH_KERNEL, d)], V))
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    eye = torch.eye(n, dtype=torch.float64)

    def type2ml(starts: int) -> Callable[[], object]:
        sym, mask = sp.expand(starts, -1, -1), mp.expand(starts, -1, -1)
        p0 = 0.5 + torch.rand(starts, *sp.shape[1:], V.max_params, generator=g, dtype=torch.float64)
        Xs = X.expand(starts, n, d)  # the starts share the points, as a fit's batch

        def run() -> None:
            p = p0.clone().requires_grad_()
            K = kernel_matrix_dimwise(Xs, Xs, sym, mask, p, V, validate=False) + 0.1 * eye
            L = torch.linalg.cholesky(K)
            a = torch.cholesky_solve(y.expand(starts, n)[..., None], L)
            lml = -0.5 * (y[:, None] * a).sum((-1, -2)) - L.diagonal(0, -2, -1).log().sum(-1)
            lml.sum().backward()

        return run

    sim = Simulator(SimulatorConfig.paper()).sample(16, torch.Generator().manual_seed(3))
    Xt = sim.X.to(torch.float64)
    pt = sim.params.to(torch.float64)

    def train() -> None:
        p = pt.clone().requires_grad_()
        K = kernel_matrix_dimwise(
            Xt, Xt, sim.true_symbols, sim.true_symbol_mask, p, V, sim.dim_mask, validate=False
        )
        K.sum().backward()

    return {
        f"Type-2 ML, 10 starts (`{GRAPH_KERNEL}` in each of d = {d}, n = {n})": type2ml(10),
        f"Type-2 ML, 1 start (L-BFGS, same kernel, n = {n})": type2ml(1),
        "training loss's kernel matrices (B = 16, n <= 250, d <= 8)": train,
    }


def section_graph_blocks(quick: bool) -> list[str]:
    """Section 10: the graph for the parameters recorded block by block vs whole."""
    from amorgp.lazy_kernels import evaluation

    torch.set_num_threads(1)
    rounds, repeats = (2, 1) if quick else (4, 3)
    work = _graph_workloads(quick)
    default = evaluation.BLOCKWISE_MIN_ELEMENTS
    times: dict[str, dict[str, list[float]]] = {"whole": {}, "blocks": {}}
    try:
        for r in range(rounds):
            for variant in ("whole", "blocks") if r % 2 == 0 else ("blocks", "whole"):
                evaluation.BLOCKWISE_MIN_ELEMENTS = default if variant == "blocks" else 1 << 62
                for name, fn in work.items():
                    fn()  # warm-up of this variant
                    for _ in range(repeats):
                        t = time.process_time()
                        fn()
                        times[variant].setdefault(name, []).append(time.process_time() - t)
    finally:
        evaluation.BLOCKWISE_MIN_ELEMENTS = default
    lines = [
        "",
        "## 10. Objective and gradient with a graph for the parameters (CPU, one thread)",
        "",
        "Kernel matrices, Cholesky log marginal likelihood and its gradient to the kernel "
        "parameters (noise 0.1, float64), process CPU time in ms, median over "
        f"{rounds} alternating rounds x {repeats} runs in one process. *whole* records the "
        "whole-matrix autograd graph; *blocks* (the default from "
        "`BLOCKWISE_MIN_ELEMENTS` values on) evaluates without a graph by cache-sized blocks "
        "of points and rebuilds one block's graph at a time in the backward (activation "
        "checkpointing by block). Values are bit for bit equal; gradients to summation "
        "order (`test_blockwise_graph_matches_whole_graph`).",
        "",
        "| workload | whole ms | blocks ms | whole / blocks |",
        "|---|---|---|---|",
    ]
    for name in work:
        w = 1000 * statistics.median(times["whole"][name])
        b = 1000 * statistics.median(times["blocks"][name])
        lines.append(f"| {name} | {w:.0f} | {b:.0f} | {w / b:.2f}x |")
    lines += [
        "",
        "The whole-matrix graph stores several `n x n` temporaries per symbol and "
        "dimension (differences, squares, exponentials, products: 10 starts x 8 dimensions "
        "x 3 symbols of 126k values each here), which the backward reads back from memory; "
        "block by block they stay in cache. The training batches fall below the threshold "
        "(a few blocks, where rebuilding costs more than it saves) and keep the whole "
        "graph. The paper benchmark's multi-start Type-2 ML cells (10 starts, n = 500) "
        "run about 2.5x faster end to end (`fit_many` with `gp-ml-multistart` on energy's first 500 rows, `SE*LIN + PER`, 20 Adam steps, one thread: 39.8 s with the whole graph, 16.1 s block by block).",
    ]
    print("\n".join(lines), flush=True)
    return lines


def _run_worker(args: list[str], pythonpath: str | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- sections


def section_matvec(quick: bool, full: bool) -> list[str]:
    dense_ns = [500, 2000] if quick else [1000, 3000] + ([10_000] if full else [])
    keops_ns = [500, 2000] if quick else [1000, 3000, 10_000] + ([100_000] if full else [])
    lines = [
        "## 1. Kernel matvec `K(X, X) v`: dense vs KeOps",
        "",
        "Median [IQR] of 3 repeats in ms; peak resident memory of a fresh process in MiB "
        "(includes ~400 MiB of imports). Dense = batched evaluator forming `K`, then `K @ v`.",
        "",
        "| kernel | d | n | dense ms | dense MiB | KeOps ms | KeOps MiB | dense / KeOps time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    configs = [("SE", 4), ("SE", 8), (COMPOSITE, 4), (COMPOSITE, 8)]
    for kernel, d in configs:
        for n in sorted(set(dense_ns) | set(keops_ns)):
            if n >= 10_000 and not (kernel == "SE" and d == 4) and not full:
                continue
            row = [kernel, str(d), str(n)]
            res = {}
            for backend, ns in (("dense", dense_ns), ("keops", keops_ns)):
                if n in ns:
                    res[backend] = _run_worker(["matvec", backend, kernel, str(d), str(n), "3"])
                    row += [_fmt(res[backend]["t"]), f"{res[backend]['peak_mib']:.0f}"]
                else:
                    row += ["—", "—"]
            ratio = f"{res['dense']['t'][0] / res['keops']['t'][0]:.2f}" if len(res) == 2 else "—"
            lines.append("| " + " | ".join([*row, ratio]) + " |")
            print(lines[-1], flush=True)
    return lines


def section_compile() -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        cold = _run_worker(["compile", folder])["t"]
        warm = _run_worker(["compile", folder])["t"]
    lines = [
        "",
        "## 2. KeOps compile time (formula `SE + PER`, float64, 1 right-hand side)",
        "",
        "| cache | first call, s |",
        "|---|---|",
        f"| cold (empty build folder) | {cold:.1f} |",
        f"| warm (binary cached on disk, new process) | {warm:.2f} |",
        "",
        f"Cold / warm: {cold / max(warm, 1e-9):.0f}x. `amorgp.lazy_kernels.warm_up` compiles "
        "the forward and backward formulas of given structures ahead of time under a file lock.",
    ]
    print("\n".join(lines), flush=True)
    return lines


def _gpytorch_kernel(structure, params):  # type: ignore[no-untyped-def]
    """Per dimension, the GPyTorch modules of its addends (``active_dims=[d]``)."""
    from amorgp.kernel_grammar import base_symbol
    from amorgp.lazy_kernels.testing import gpytorch_symbol_kernel

    return [
        [
            gpytorch_symbol_kernel(
                s, dict(zip(base_symbol(s).param_names, params[d, a].tolist())), d
            )
            for a, s in enumerate(addends)
        ]
        for d, addends in enumerate(structure.dims)
    ]


def _gpytorch_dense(modules, x):  # type: ignore[no-untyped-def]
    """Dense ``prod_d sum_l k_dl(x, x)`` from GPyTorch modules (a Python loop over them).

    Each module is densified before combining: GPyTorch's lazy ``ProductKernel`` would
    multiply through (approximate) root decompositions instead.
    """
    out = None
    for mods in modules:
        acc = mods[0](x).to_dense()
        for m in mods[1:]:
            acc = acc + m(x).to_dense()
        out = acc if out is None else out * acc
    return out


def _ours_loss(s, params0, X, y, backend):  # type: ignore[no-untyped-def]
    from amorgp.lazy_kernels import DimWiseKernel, Posterior

    def run() -> None:
        p = params0.clone().requires_grad_()
        noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
        gp = Posterior.from_kernel(DimWiseKernel(s, p), X, y, noise, backend=backend)
        gp.log_marginal_likelihood().backward()

    return run


def _gpytorch_loss(s, params0, X, y, size):  # type: ignore[no-untyped-def]
    import gpytorch

    class Model(gpytorch.models.ExactGP):
        def __init__(self, lik):  # type: ignore[no-untyped-def]
            super().__init__(X, y, lik)
            self.mean = gpytorch.means.ZeroMean()
            self.covar = torch.nn.ModuleList(
                [torch.nn.ModuleList(m) for m in _gpytorch_kernel(s, params0)]
            )

        def forward(self, x):  # type: ignore[no-untyped-def]
            K = _gpytorch_dense(self.covar, x)
            return gpytorch.distributions.MultivariateNormal(self.mean(x), K)

    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    lik.noise = torch.tensor(0.05, dtype=torch.float64)
    model = Model(lik).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    model.train()

    def run() -> None:
        model.zero_grad()
        with gpytorch.settings.max_cholesky_size(size):
            (mll(model(X), y) * X.shape[0]).backward()

    return run


def section_exact_gp(quick: bool) -> list[str]:
    from amorgp.kernel_grammar import DimWiseStructure

    ns = [250, 500] if quick else [250, 500, 1000, 2000]
    s = DimWiseStructure.parse(GP_STRUCTURE)
    g = torch.Generator().manual_seed(0)
    params0 = 0.4 + torch.rand(2, 2, 5, generator=g, dtype=torch.float64)
    lines = [
        "",
        f"## 3. Exact GP log marginal likelihood + gradient, kernel `{s}`",
        "",
        "Median [IQR] of 3 repeats in ms (float64). Ours: `Posterior.from_kernel(..., backend=...)`; CG backends "
        "use 15 probes and a rank-64 pivoted-Cholesky preconditioner. GPyTorch: `ExactGP` + "
        "`ExactMarginalLogLikelihood` with the same kernel built from its modules, Cholesky "
        "(`max_cholesky_size=inf`) and BBMM (`max_cholesky_size=0`).",
        "",
        "| n | ours Cholesky | ours dense CG | ours KeOps CG | GPyTorch Cholesky | GPyTorch BBMM | "
        "GPyTorch Cholesky / ours Cholesky |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in ns:
        X = torch.rand(n, 2, generator=g, dtype=torch.float64)
        y = torch.sin(6 * X[:, 0]) * X[:, 1] + 0.1 * torch.randn(
            n, generator=g, dtype=torch.float64
        )
        row = [str(n)]
        res = {}
        for backend in ("cholesky", "cg", "keops"):
            if backend == "keops" and n > 1000:
                row.append("—")
                continue
            res[backend] = _timeit(_ours_loss(s, params0, X, y, backend), 3)
            row.append(_fmt(res[backend]))
        for name, size in (("chol", float("inf")), ("bbmm", 0.0)):
            res[name] = _timeit(_gpytorch_loss(s, params0, X, y, size), 3)
            row.append(_fmt(res[name]))
        row.append(f"{res['chol'][0] / res['cholesky'][0]:.2f}")
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    return lines


def section_accuracy() -> list[str]:
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import (
        DimWiseKernel,
        PivotedCholeskyPreconditioner,
        pcg,
        pivoted_cholesky,
        slq_logdet,
    )

    n = 1000
    g = torch.Generator().manual_seed(1)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    s = DimWiseStructure.parse("SE + PER", 2)
    params = torch.tensor([[[1.0, 0.2, 0.0], [0.5, 0.7, 0.4]]] * 2, dtype=torch.float64)
    K = DimWiseKernel(s, params)(X)
    noise = torch.tensor(0.01, dtype=torch.float64)
    A = K + noise * torch.eye(n, dtype=torch.float64)
    L = torch.linalg.cholesky(A)
    exact_logdet = 2 * torch.log(torch.diagonal(L)).sum()
    exact_sol = torch.cholesky_solve(y[:, None], L)
    lines = [
        "",
        f"## 4. CG / SLQ accuracy vs Cholesky (n = {n}, kernel `{s}`, noise 0.01)",
        "",
        "Relative errors over 5 probe seeds (median [min, max]); CG tolerance 1e-8.",
        "",
        "| preconditioner rank | probes | CG iterations | solve rel. error | log-det rel. error |",
        "|---|---|---|---|---|",
    ]
    for rank in (0, 16, 64):
        Lr = pivoted_cholesky(torch.diagonal(K), lambda i: K[:, i], rank) if rank else K[:, :0]
        P = PivotedCholeskyPreconditioner(Lr, noise)
        for t in (8, 32):
            errs, sol_errs, its = [], [], []
            for seed in range(5):
                Z = P.sample(t, torch.Generator().manual_seed(seed))
                B = torch.cat([y[:, None], Z], 1)
                sol, al, be, it = pcg(lambda V: A @ V, B, P.solve, 1e-8, 2000)
                w = (Z * P.solve(Z)).sum(0)
                est = P.logdet() + slq_logdet(al[:, 1:], be[:, 1:], w)
                errs.append(abs(float(est - exact_logdet)) / abs(float(exact_logdet)))
                sol_errs.append(float((sol[:, :1] - exact_sol).norm() / exact_sol.norm()))
                its.append(it)
            lines.append(
                f"| {rank} | {t} | {statistics.median(its):.0f} | "
                f"{statistics.median(sol_errs):.1e} | {statistics.median(errs):.1e} "
                f"[{min(errs):.1e}, {max(errs):.1e}] |"
            )
            print(lines[-1], flush=True)
    return lines


def section_batched(quick: bool) -> list[str]:
    from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, decode
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    B, N, D, L = 128, (50 if quick else 100), 4, 3
    g = torch.Generator().manual_seed(2)
    d = torch.clamp(torch.distributions.Geometric(0.25).sample((B,)).long() + 1, max=D)
    nadd = torch.clamp(torch.distributions.Geometric(0.6).sample((B, D)).long() + 1, max=L)
    dim_mask = torch.arange(D)[None] < d[:, None]
    symbol_mask = (torch.arange(L)[None, None] < nadd[..., None]) & dim_mask[..., None]
    symbols = torch.randint(1, len(PAPER_VOCABULARY) + 1, (B, D, L), generator=g) * symbol_mask
    params = 0.4 + torch.rand(
        B, D, L, PAPER_VOCABULARY.max_params, generator=g, dtype=torch.float64
    )
    X = torch.rand(B, N, D, generator=g, dtype=torch.float64)
    structures: list[DimWiseStructure] = decode(
        symbols.numpy(), symbol_mask.numpy(), PAPER_VOCABULARY
    )
    # decode sorts addends canonically; re-encode params in that order per element
    from amorgp.kernel_grammar import encode

    sym2, mask2 = encode(structures, PAPER_VOCABULARY, max_dims=D, max_addends=L)
    symbols_t, mask_t = torch.as_tensor(sym2), torch.as_tensor(mask2)
    dim_mask = mask_t.any(-1)
    modules = [_gpytorch_kernel(s, params[b]) for b, s in enumerate(structures)]

    def ours() -> torch.Tensor:
        return kernel_matrix_dimwise(
            X, X, symbols_t, mask_t, params, PAPER_VOCABULARY, dim_mask, validate=False
        )

    def loop() -> list[torch.Tensor]:
        with torch.no_grad():
            return [_gpytorch_dense(m, X[b]) for b, m in enumerate(modules)]

    # correctness first: both compute the same matrices
    K = ours()
    err = max(float((K[b] - Kb).abs().max()) for b, Kb in enumerate(loop()))
    t_ours = _timeit(lambda: ours(), 3)
    t_loop = _timeit(loop, 3)
    p_req = params.clone().requires_grad_()

    def ours_bwd() -> None:
        kernel_matrix_dimwise(
            X, X, symbols_t, mask_t, p_req, PAPER_VOCABULARY, dim_mask, validate=False
        ).sum().backward()

    t_ours_bwd = _timeit(ours_bwd, 3)
    lines = [
        "",
        f"## 5. Batched heterogeneous evaluator vs a Python loop over GPyTorch modules "
        f"(B = {B} mixed structures, N = {N}, D <= {D}, paper vocabulary)",
        "",
        "| method | ms, median [IQR] |",
        "|---|---|",
        f"| `kernel_matrix_dimwise` forward | {_fmt(t_ours)} |",
        f"| `kernel_matrix_dimwise` forward + backward | {_fmt(t_ours_bwd)} |",
        f"| loop over 128 GPyTorch kernel modules, forward | {_fmt(t_loop)} |",
        "",
        f"Speed-up (forward): {t_loop[0] / t_ours[0]:.1f}x; max |difference| = {err:.1e}.",
    ]
    print("\n".join(lines), flush=True)
    return lines


def _previous_evaluator(X1, X2, symbols, symbol_mask, params, vocab, dim_mask):  # type: ignore[no-untyped-def]
    """The evaluator's previous algorithm, frozen here as the side-by-side peer: gather
    every active token's columns, evaluate per symbol id, scatter the ``(T, N, M)`` token
    values and reduce them with ``segment_reduce`` (sum over addends, product over dims)."""
    from amorgp.lazy_kernels.tables import evaluate_symbol, symbol_tables

    tables = symbol_tables(vocab, symbols.device)
    B, N, D = X1.shape
    L = symbols.shape[2]
    P = tables.max_params
    tok_mask = symbol_mask & dim_mask[..., None]
    flat = tok_mask.reshape(-1).nonzero().squeeze(1)
    pair_flat = flat // L
    addends = tok_mask.sum(-1)[dim_mask]
    n_dims = dim_mask.sum(-1)
    sym = symbols.reshape(-1)[flat]
    par = params.reshape(-1, params.shape[-1])[flat, :P]
    cols1 = X1.transpose(1, 2).reshape(B * D, N)[pair_flat]
    M = X2.shape[1]
    cols2 = X2.transpose(1, 2).reshape(B * D, M)[pair_flat]
    xa, xb = cols1[:, :, None], cols2[:, None, :]
    T = sym.shape[0]
    counts = torch.bincount(sym, minlength=tables.n_symbols + 1).tolist()
    order = torch.argsort(sym, stable=True)
    values = torch.empty((T, N, M), dtype=X1.dtype, device=X1.device)
    start = counts[0]
    for cs, count in zip(tables.compiled[1:], counts[1:]):
        if count == 0:
            continue
        idx = order[start : start + count]
        values[idx] = evaluate_symbol(cs, xa[idx], xb[idx], par[idx])
        start += count
    pair_sum = torch.segment_reduce(values, "sum", lengths=addends, unsafe=True)
    return torch.segment_reduce(pair_sum, "prod", lengths=n_dims, unsafe=True, initial=1.0)


def _cpu_timeit(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """Median and quartiles of process CPU time (the machine is shared: wall time is not)."""
    fn()
    ts = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    ts.sort()
    return statistics.median(ts), ts[len(ts) // 4], ts[(3 * len(ts)) // 4]


def _evaluator_case(label: str, batch, repeats: int) -> list[str]:  # type: ignore[no-untyped-def]
    from amorgp.kernel_grammar import PAPER_VOCABULARY
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    X, sym, smask, dmask = batch.X, batch.true_symbols, batch.true_symbol_mask, batch.dim_mask
    params = batch.params
    p_req = params.clone().requires_grad_()
    shape = f"{X.shape[1]} x {X.shape[2]} x {sym.shape[2]}"

    def cur(p: torch.Tensor) -> torch.Tensor:
        return kernel_matrix_dimwise(X, X, sym, smask, p, PAPER_VOCABULARY, dmask, validate=False)

    def prev(p: torch.Tensor) -> torch.Tensor:
        return _previous_evaluator(X, X, sym, smask, p, PAPER_VOCABULARY, dmask)

    err = float((cur(params) - prev(params)).abs().max())
    lines = []
    for pass_name, grad in (("forward", False), ("forward + backward", True)):
        ts = []
        for f in (prev, cur):
            if grad:
                ts.append(_cpu_timeit(lambda f=f: f(p_req).sum().backward(), repeats))
            else:
                ts.append(_cpu_timeit(lambda f=f: f(params), repeats))
        lines.append(
            f"| {label} | {shape} | {pass_name} | {_fmt(ts[0])} | {_fmt(ts[1])} | "
            f"{ts[0][0] / ts[1][0]:.2f}x | {err:.1e} |"
        )
        print(lines[-1], flush=True)
    return lines


def section_evaluator(quick: bool) -> list[str]:
    from amorgp.simulator import Simulator, SimulatorConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    repeats = 3 if quick else 5
    cases = [("paper preset, B = 128", 128, SimulatorConfig.paper())]
    cases.append(("paper preset, n <= 50, B = 16", 16, SimulatorConfig.paper(n_max=50)))
    if quick:
        cases[0] = ("paper preset, n <= 120, B = 64", 64, SimulatorConfig.paper(n_max=120))
    lines = [
        "",
        "## 6. Batched evaluator on simulator batches: current vs previous algorithm",
        "",
        "Structures, parameters and inputs drawn by `amorgp.simulator` (true structures); "
        "float64; `torch.set_num_threads(1)`; process CPU time in ms, median [IQR] of "
        f"{repeats} runs. *previous* = token gather, per-token `(T, N, M)` scatter and "
        "`segment_reduce` (frozen copy in this script); *current* = each unordered point pair "
        "once (circulant packing), `x - x'`, `(x - x')^2`, `x x'` formed once per (element, "
        "dimension) and shared by its addends, `index_select` row gathers.",
        "",
        "| batch | N x D x L | pass | previous | current | speed-up | max abs diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, B, cfg in cases:
        lines += _evaluator_case(
            label, Simulator(cfg).sample(B, torch.Generator().manual_seed(3)), repeats
        )
    torch.set_num_threads(threads)
    return lines


def section_posterior(quick: bool) -> list[str]:
    n, m = (1000, 5000) if quick else (3000, 20_000)
    res = {mode: _run_worker(["posterior", mode, str(n), str(m)]) for mode in ("before", "after")}
    b, a = res["before"], res["after"]
    diff = max(max(abs(u - v) for u, v in zip(b[key], a[key])) for key in ("mean", "var"))
    lines = [
        "",
        "## 7. Prediction at many test points: one cached Posterior vs a factorisation per chunk",
        "",
        f"n = {n} training points, m = {m} test points, `{COMPOSITE}` with d = 4 (8 addends), "
        "noise 0.05, float64, `torch.set_num_threads(1)`, each variant once in a fresh process "
        "(wall time; peak resident memory of the process, and its growth over the data setup). "
        "*before* = the amortizer's previous path: a fresh exact GP (dense `K`, Cholesky, "
        "cross-covariance block) per 256 MiB chunk of test points (`256 MiB / (8 n)` rows, "
        "frozen copy in this script), then another fresh one for the log marginal likelihood; "
        "*after* = one `Posterior` (`Posterior.from_kernel`) that factors `K + sigma^2 I` once and serves the "
        "predictions (chunks sized by the evaluator's working memory, 256 MiB) and the log "
        "marginal likelihood.",
        "",
        "| variant | predict mean + variance (s) | then LML (s) | factorisations | peak MiB "
        "| growth MiB |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in (("before", b), ("after", a)):
        lines.append(
            f"| {name} | {r['predict_s']:.1f} | {r['lml_s']:.2f} | {r['factorizations']} | "
            f"{r['peak_mib']:.0f} | {r['delta_mib']:.0f} |"
        )
    total_b = b["predict_s"] + b["lml_s"]
    total_a = a["predict_s"] + a["lml_s"]
    lines += [
        "",
        f"Time ratio before / after (predict + LML): {total_b / total_a:.2f}x; peak-memory "
        f"growth ratio: {b['delta_mib'] / max(a['delta_mib'], 1):.1f}x. Max |difference| of "
        f"means and variances (every 97th test point): {diff:.1e}; LML difference "
        f"{abs(b['lml'] - a['lml']):.1e}.",
        "",
        "Where the memory goes: the evaluator works without a recorded graph by cache-sized blocks of points (section 8), so neither variant holds per-addend whole-matrix temporaries any more (with the previous evaluator, *after*'s peak was the dense evaluation of `K(X, X)`, about 4.5 `n x n` matrices per addend: 3018 MiB here, and *before*'s the evaluation of one chunk's cross-covariance block); what remains is the `n x n` matrices of the factorisation and the 256 MiB prediction chunks. The time saved is the repeated `K(X, X)` evaluations and Cholesky factorisations; the triangular solves and the cross-covariance evaluations of 20 000 test points cost the same in both. The machine was shared with other jobs (a training run, test suites) during this run.",
    ]
    print("\n".join(lines), flush=True)
    return lines


def section_growing_loop(quick: bool, baseline: str = LOOP_BASELINE) -> list[str]:
    """Section 11: memory over a loop that adds one point per step, before/after and peers."""
    import bench_evaluator_speed

    from amorgp.lazy_kernels.circulant import CIRCULANT_CACHE_BYTES

    kernel_range, amortizer_range = ((100, 600), (20, 300)) if quick else ((100, 1500), (20, 1000))
    rows = [
        ("`K(X, X)`, `SE` in d = 2", kernel_range, ("lazy", "gpytorch"), "GPyTorch `RBFKernel`"),
        (
            "`Amortizer.infer` + predict, `SE`, d = 2",
            amortizer_range,
            ("amortizer", "sklearn"),
            "scikit-learn GP, kernel fixed",
        ),
    ]
    lines = [
        "",
        "## 11. Memory over a loop that adds one point per step (d = 2, one thread)",
        "",
        "A Bayesian-optimisation or active-learning loop refits on one more point every "
        "step. Peak resident-memory growth over the whole loop, MiB, each variant in a fresh "
        f"process. *before* = this tree with the evaluator module (`evaluation.py`) of "
        f"revision `{baseline}`, which built and cached the circulant unpacking index itself, "
        "for every size it "
        "saw (an `n x n` int64 tensor each), *after* = this tree (the indices of the most "
        "recent sizes, "
        f"int32, within `CIRCULANT_CACHE_BYTES` = {CIRCULANT_CACHE_BYTES // 2**20} MiB); the "
        "peer runs the same loop. One `n x n` float64 matrix at the largest n for scale. "
        "Most of what the amortizer's loop keeps after the change is oneDNN's primitive "
        "cache (one entry per layer shape the network met, up to oneDNN's 1024; "
        "`ONEDNN_PRIMITIVE_CACHE_CAPACITY` caps it): 107 MiB of growth over n = 100..400 "
        "with it, 24 MiB with it disabled (measured separately).",
        "",
        "| loop | n | before MiB | after MiB | peer | peer MiB | before / after | one matrix MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        src = bench_evaluator_speed.baseline_source(baseline, tmp, ("evaluation.py",))
        for name, (lo, hi), (ours, peer), peer_name in rows:
            after = _run_worker(["growing-loop", ours, str(lo), str(hi)])
            before = _run_worker(["growing-loop", ours, str(lo), str(hi)], pythonpath=src)
            other = _run_worker(["growing-loop", peer, str(lo), str(hi)])
            lines.append(
                f"| {name} | {lo}..{hi} | {before['mib']:.0f} | {after['mib']:.0f} | "
                f"{peer_name} | {other['mib']:.0f} | {before['mib'] / max(after['mib'], 1):.0f}x "
                f"| {8 * hi * hi / 2**20:.0f} |"
            )
    print("\n".join(lines), flush=True)
    return lines


def _replace_section(number: str, lines: list[str]) -> None:
    """Replace section ``number`` of the report (or insert it before the notes)."""
    marker = f"\n## {number}. "
    old = OUT.read_text() if OUT.exists() else "# lazy-kernels benchmarks\n"
    head, found, rest = old.partition(marker)
    if found:
        tail = rest[rest.index("\n## ") :] if "\n## " in rest else ""
        if not rest and "\nTotal benchmark time" in head:
            head, _, total = head.partition("\nTotal benchmark time")
            tail = "\nTotal benchmark time" + total
    else:
        head, found, notes = old.partition("\n## Notes")
        tail = found + notes
    tmp = OUT.with_suffix(".md.tmp")
    tmp.write_text(head.rstrip("\n") + "\n" + "\n".join(lines) + "\n" + tail)
    tmp.replace(OUT)
    print(f"wrote {OUT}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, *rest = sys.argv[2:]
        if kind == "evaluator-speed":
            import bench_evaluator_speed

            out = bench_evaluator_speed.worker(bool(int(rest[0])), int(rest[1]))
        elif kind == "matvec":
            out = _worker_matvec(rest[0], rest[1], int(rest[2]), int(rest[3]), int(rest[4]))
        elif kind == "posterior":
            out = _worker_posterior(rest[0], int(rest[1]), int(rest[2]))
        elif kind == "evaluator-memory":
            out = _worker_evaluator_memory(rest[0], int(rest[1]), bool(int(rest[2])))
        elif kind == "growing-loop":
            out = _worker_growing_loop(rest[0], int(rest[1]), int(rest[2]))
        else:
            out = _worker_compile(rest[0])
        print(json.dumps(out))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke run)")
    ap.add_argument("--full", action="store_true", help="add n = 1e5 KeOps matvecs")
    ap.add_argument(
        "--section",
        choices=[
            "evaluator",
            "posterior",
            "evaluator-speed",
            "no-graph",
            "graph-blocks",
            "growing-loop",
        ],
        help="run one section only and replace its part of an existing report",
    )
    ap.add_argument("--baseline", help="git revision of section 8's 'before' evaluator")
    args = ap.parse_args()
    if args.section == "evaluator-speed":
        import bench_evaluator_speed

        _replace_section("8", bench_evaluator_speed.section(__file__, args.quick, args.baseline))
        return
    if args.section == "evaluator":
        _replace_section("6", section_evaluator(args.quick))
        return
    if args.section == "posterior":
        _replace_section("7", section_posterior(args.quick))
        return
    if args.section == "no-graph":
        _replace_section("9", section_no_graph(args.quick))
        return
    if args.section == "graph-blocks":
        _replace_section("10", section_graph_blocks(args.quick))
        return
    if args.section == "growing-loop":
        _replace_section("11", section_growing_loop(args.quick))
        return
    torch.set_num_threads(2)
    started = time.time()
    header = [
        "# lazy-kernels benchmarks",
        "",
        f"Generated by `benchmarks/bench_lazy_kernels.py{' --quick' if args.quick else ''}"
        f"{' --full' if args.full else ''}` on {os.cpu_count()} CPU core(s), torch "
        f"{torch.__version__}, float64, `torch.set_num_threads(2)`. The machine was shared "
        "with other jobs while this ran: absolute times are noisy, ratios measured side by side "
        "are the result.",
        "",
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    body: list[str] = []
    import bench_evaluator_speed

    def write(done: bool) -> None:  # rewrite after every section: partial results survive
        tail = [""] + (
            [f"Total benchmark time: {time.time() - started:.0f} s."]
            if done
            else ["(run in progress: later sections not yet written)"]
        )
        tmp = OUT.with_suffix(".md.tmp")
        tmp.write_text("\n".join(header + body + tail) + "\n")
        tmp.replace(OUT)

    for section in (
        lambda: section_batched(args.quick),
        lambda: section_evaluator(args.quick),
        section_accuracy,
        lambda: section_exact_gp(args.quick),
        section_compile,
        lambda: section_matvec(args.quick, args.full),
        lambda: section_posterior(args.quick),
        lambda: bench_evaluator_speed.section(__file__, args.quick, args.baseline),
        lambda: section_no_graph(args.quick),
        lambda: section_graph_blocks(args.quick),
        lambda: section_growing_loop(args.quick),
    ):
        body += section()
        write(done=False)
    write(done=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
