"""Benchmark of amorgp.diff_linalg.

Measures on this machine, with medians and interquartile ranges over repeats:

1. every matrix operator (float64), forward and backward, side by side with the
   named peer "torch.linalg autograd" (the same function computed by
   ``torch.linalg``/``torch`` and differentiated by PyTorch's own backward),
   for n in 128..1024 (``--max-n 2048`` adds 2048), reported as time / n^3
   as in Seeger et al.'s figure;
2. the ragged-batch GP log marginal likelihood, forward + backward, for
   B = 128 datasets with n ~ U{10..250} (float64): padding to the maximum,
   size buckets (2, 4, 8), a per-item loop, each with the fused adjoint and with
   autograd through the Cholesky factor, and GPyTorch's
   ``ExactMarginalLogLikelihood`` on each dataset (an ``ExactGP`` with a fixed
   RBF kernel; the only way GPyTorch handles datasets of different sizes).

Writes ``docs/benchmarks/diff-linalg.md`` and ``docs/benchmarks/diff-linalg.png``
(when matplotlib is installed).  ``--quick`` uses n <= 256, fewer repeats and B = 32.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from amorgp.diff_linalg import (
    gelqf,
    gemm2,
    gp_log_marginal_likelihood,
    potrf,
    potri,
    syevd,
    syrk,
    trmm,
    trsm,
)
from amorgp.diff_linalg.testing import random_full_rank, random_lower_triangular, random_spd

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "diff-linalg.md"
FIG = ROOT / "docs" / "benchmarks" / "diff-linalg.png"
DT = torch.float64


def stats(times: list[float]) -> tuple[float, float, float]:
    """Median, first and third quartile."""
    if len(times) == 1:
        return times[0], times[0], times[0]
    q = statistics.quantiles(times, n=4, method="inclusive")
    return statistics.median(times), q[0], q[2]


CLOCK: Callable[[], float] = time.process_time


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = CLOCK()
        fn()
        out.append(CLOCK() - t0)
    return out


def time_fwd_bwd(
    make_inputs: Callable[[], tuple[torch.Tensor, ...]],
    fn: Callable[..., object],
    repeats: int,
) -> tuple[list[float], list[float]]:
    """Forward time (no graph) and backward time (of a random linear functional)."""
    inputs = make_inputs()
    with torch.no_grad():
        fwd = timed(lambda: fn(*inputs), repeats)
    gen = torch.Generator().manual_seed(1)
    bwd = []
    for r in range(repeats + 1):
        xs = [x.detach().requires_grad_(True) for x in inputs]
        out = fn(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        ws = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
        loss = sum((w * o).sum() for w, o in zip(ws, outs))
        t0 = CLOCK()
        loss.backward()  # type: ignore[union-attr]
        if r > 0:  # first run is the warm-up
            bwd.append(CLOCK() - t0)
    return fwd, bwd


def _sym(a: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a + a.mT)


def _sign_fixed_eigh(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lam, U = torch.linalg.eigh(a)
    idx = U.abs().argmax(dim=-2, keepdim=True)
    return U * torch.sign(torch.gather(U, -2, idx)).detach(), lam


def _torch_lq(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, r = torch.linalg.qr(a.mT)
    s = torch.sign(r.diagonal(dim1=-2, dim2=-1)).detach()
    return r.mT * s.unsqueeze(-2), q.mT * s.unsqueeze(-1)


def operator_cases(
    n: int,
) -> dict[
    str, tuple[Callable[[], tuple[torch.Tensor, ...]], Callable[..., object], Callable[..., object]]
]:
    """name -> (inputs, ours, torch.linalg peer)."""
    gen = torch.Generator().manual_seed(n)

    def spd() -> tuple[torch.Tensor, ...]:
        return (random_spd(n, cond=100.0, generator=gen),)

    def tri() -> tuple[torch.Tensor, ...]:
        return (random_lower_triangular(n, cond=100.0, generator=gen),)

    def tri_b() -> tuple[torch.Tensor, ...]:
        return (
            random_lower_triangular(n, cond=100.0, generator=gen),
            torch.randn(n, n, dtype=DT, generator=gen),
        )

    def dense2() -> tuple[torch.Tensor, ...]:
        return (
            torch.randn(n, n, dtype=DT, generator=gen),
            torch.randn(n, n, dtype=DT, generator=gen),
        )

    def dense1() -> tuple[torch.Tensor, ...]:
        return (torch.randn(n, n, dtype=DT, generator=gen),)

    def full() -> tuple[torch.Tensor, ...]:
        return (random_full_rank(n, n, cond=10.0, generator=gen),)

    return {
        "potrf": (spd, lambda a: potrf(_sym(a)), lambda a: torch.linalg.cholesky(_sym(a))),
        "trsm": (
            tri_b,
            lambda t, b: trsm(t, b),
            lambda t, b: torch.linalg.solve_triangular(t.tril(), b, upper=False),
        ),
        "trmm": (tri_b, lambda t, b: trmm(t, b), lambda t, b: t.tril() @ b),
        "gemm2": (dense2, lambda a, b: gemm2(a, b), lambda a, b: a @ b),
        "syrk": (dense1, lambda a: syrk(a), lambda a: a @ a.mT),
        "potri": (tri, lambda t: potri(t), lambda t: torch.cholesky_inverse(t.tril())),
        "gelqf": (full, lambda a: tuple(gelqf(a)), _torch_lq),
        "syevd": (spd, lambda a: tuple(syevd(_sym(a))), lambda a: _sign_fixed_eigh(_sym(a))),
    }


def bench_operators(sizes: list[int], repeats: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for n in sizes:
        for name, (make, ours, peer) in operator_cases(n).items():
            reps = repeats if n <= 512 else max(3, repeats // 2)
            of, ob = time_fwd_bwd(make, ours, reps)
            pf, pb = time_fwd_bwd(make, peer, reps)
            rows.append(
                {
                    "op": name,
                    "n": n,
                    "ours_fwd": stats(of),
                    "ours_bwd": stats(ob),
                    "peer_fwd": stats(pf),
                    "peer_bwd": stats(pb),
                }
            )
            print(
                f"{name:6s} n={n:5d} fwd {stats(of)[0]:.4f}s (torch {stats(pf)[0]:.4f}s)  bwd {stats(ob)[0]:.4f}s (torch {stats(pb)[0]:.4f}s)",
                flush=True,
            )
    return rows


def ragged_problem(B: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """B datasets with n ~ U{10..250} points in [0, 1], padded to the largest n."""
    gen = torch.Generator().manual_seed(seed)
    n = torch.randint(10, 251, (B,), generator=gen)
    N = int(n.max())
    X = torch.rand(B, N, dtype=DT, generator=gen)
    mask = torch.arange(N)[None, :] < n[:, None]
    y = torch.randn(B, N, dtype=DT, generator=gen) * mask
    ls = 0.05 + 0.5 * torch.rand(B, dtype=DT, generator=gen)
    noise = 0.01 + 0.2 * torch.rand(B, dtype=DT, generator=gen)
    sq = -0.5 * (X[:, :, None] - X[:, None, :]) ** 2  # -(x - x')^2 / 2
    K = torch.exp(sq / ls[:, None, None] ** 2)
    return {"X": X, "y": y, "mask": mask, "n": n, "ls": ls, "noise": noise, "sq": sq, "K": K}


Row = tuple[str, tuple[float, float, float]]


def bench_ragged(B: int, repeats: int) -> tuple[list[Row], list[Row], float]:
    """Table A: likelihood given K (leaf); table B: end to end from the inputs."""
    P = ragged_problem(B)
    y, mask, noise = P["y"], P["mask"], P["noise"]

    def given_k(strategy: str, fused: bool, k: int = 4) -> Callable[[], object]:
        def run() -> object:
            K = P["K"].detach().requires_grad_(True)
            s2 = noise.detach().requires_grad_(True)
            val = gp_log_marginal_likelihood(
                K, y, s2, mask, strategy=strategy, fused=fused, n_buckets=k
            )  # type: ignore[call-overload]
            (-val.sum()).backward()
            return val

        return run

    table_a: list[Row] = []
    configs = [("pad", True, 4), ("pad", False, 4)]
    configs += [("bucket", f, k) for k in (2, 4, 8) for f in (True, False)]
    configs += [("loop", True, 4), ("loop", False, 4)]
    for strategy, fused, k in configs:
        label = strategy + (f" ({k} buckets)" if strategy == "bucket" else "")
        label += ", fused adjoint" if fused else ", autograd through L"
        st = stats(timed(given_k(strategy, fused, k), repeats))
        table_a.append((label, st))
        print(f"[given K] {label:40s} {st[0]:.4f}s", flush=True)
    ref = given_k("pad", False)()
    gp = bench_gpytorch_given_k(P, repeats)
    diff = float("nan")
    if gp is not None:
        table_a.append(gp[0])
        diff = float((gp[1] - ref.detach()).abs().max())  # type: ignore[attr-defined]
        print(f"max |ours - gpytorch| = {diff:.2e}")

    def end_to_end(strategy: str) -> Callable[[], object]:
        def run() -> object:
            log_ls = P["ls"].log().detach().requires_grad_(True)
            K = torch.exp(P["sq"] * torch.exp(-2.0 * log_ls)[:, None, None])
            val = gp_log_marginal_likelihood(K, y, noise, mask, strategy=strategy)  # type: ignore[call-overload]
            (-val.sum()).backward()
            return val

        return run

    table_b: list[Row] = []
    for strategy in ("pad", "bucket", "loop"):
        label = f"{strategy} (padded SE kernel built in torch)"
        st = stats(timed(end_to_end(strategy), repeats))
        table_b.append((label, st))
        print(f"[end to end] {label:40s} {st[0]:.4f}s", flush=True)
    gp_e2e = bench_gpytorch_exact_gp(P, repeats)
    if gp_e2e is not None:
        table_b.append(gp_e2e)
    return table_a, table_b, diff


def _gpytorch():  # type: ignore[no-untyped-def]
    try:
        import gpytorch
    except ImportError:
        print("gpytorch not installed: skipping the GPyTorch peer")
        return None
    return gpytorch


def bench_gpytorch_given_k(P: dict[str, torch.Tensor], repeats: int):  # type: ignore[no-untyped-def]
    """ExactMarginalLogLikelihood per dataset, the model returning the given K_i (a leaf)."""
    gpytorch = _gpytorch()
    if gpytorch is None:
        return None

    class FixedK(gpytorch.models.ExactGP):
        def __init__(self, x, t, lik, K):  # type: ignore[no-untyped-def]
            super().__init__(x, t, lik)
            self.K = K

        def forward(self, x):  # type: ignore[no-untyped-def]
            from linear_operator import to_linear_operator

            mean = torch.zeros(x.shape[0], dtype=DT)
            return gpytorch.distributions.MultivariateNormal(mean, to_linear_operator(self.K))

    items = []
    for i in range(P["K"].shape[0]):
        k = int(P["n"][i])
        Ki = P["K"][i, :k, :k].clone()
        xi, yi = P["X"][i, :k, None].clone(), P["y"][i, :k].clone()
        lik = gpytorch.likelihoods.GaussianLikelihood(
            noise_constraint=gpytorch.constraints.GreaterThan(1e-6)
        ).to(DT)
        lik.noise = P["noise"][i].item()
        model = FixedK(xi, yi, lik, Ki).to(DT)
        model.train()
        items.append((model, gpytorch.mlls.ExactMarginalLogLikelihood(lik, model), xi, yi, k))

    def run() -> torch.Tensor:
        vals = []
        for model, mll, xi, yi, k in items:
            model.K = model.K.detach().requires_grad_(True)
            model.zero_grad()
            v = mll(model(xi), yi) * k  # GPyTorch divides by n
            v.backward()
            vals.append(v.detach())
        return torch.stack(vals)

    with gpytorch.settings.max_cholesky_size(10_000):
        st = stats(timed(run, repeats))
        vals = run()
    print(f"[given K] GPyTorch loop {st[0]:.4f}s", flush=True)
    return ("GPyTorch ExactMarginalLogLikelihood, per-dataset loop", st), vals


def bench_gpytorch_exact_gp(P: dict[str, torch.Tensor], repeats: int) -> Row | None:
    """ExactGP with an RBF kernel per dataset (kernel built by GPyTorch at each dataset's size)."""
    gpytorch = _gpytorch()
    if gpytorch is None:
        return None

    class Model(gpytorch.models.ExactGP):
        def __init__(self, x, t, lik):  # type: ignore[no-untyped-def]
            super().__init__(x, t, lik)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.RBFKernel()

        def forward(self, x):  # type: ignore[no-untyped-def]
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    items = []
    for i in range(P["K"].shape[0]):
        k = int(P["n"][i])
        xi, yi = P["X"][i, :k, None].clone(), P["y"][i, :k].clone()
        lik = gpytorch.likelihoods.GaussianLikelihood(
            noise_constraint=gpytorch.constraints.GreaterThan(1e-6)
        ).to(DT)
        model = Model(xi, yi, lik).to(DT)
        model.covar_module.lengthscale = P["ls"][i].item()
        lik.noise = P["noise"][i].item()
        model.train()
        items.append((model, gpytorch.mlls.ExactMarginalLogLikelihood(lik, model), xi, yi))

    def run() -> None:
        for model, mll, xi, yi in items:
            model.zero_grad()
            mll(model(xi), yi).backward()

    with gpytorch.settings.max_cholesky_size(10_000):
        st = stats(timed(run, repeats))
    print(f"[end to end] GPyTorch ExactGP loop {st[0]:.4f}s", flush=True)
    return ("GPyTorch ExactGP (RBF) + ExactMarginalLogLikelihood, per-dataset loop", st)


def fmt(s: tuple[float, float, float], scale: float = 1.0, unit: str = "ms") -> str:
    m, lo, hi = (v * scale for v in s)
    return f"{m:.3g} [{lo:.3g}, {hi:.3g}] {unit}"


def write_report(
    op_rows: list[dict[str, object]],
    table_a: list[Row],
    table_b: list[Row],
    diff: float,
    args: argparse.Namespace,
    elapsed: float,
) -> None:
    lines = [
        "# diff-linalg benchmarks",
        "",
        "Generated by `benchmarks/bench_diff_linalg.py`"
        + (" --quick" if args.quick else "")
        + f" in {elapsed:.0f} s on {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, float64, CPU.",
        f"Times are medians with the interquartile range in brackets, measured as {args.clock}",
        f"time with {torch.get_num_threads()} torch thread(s). The machine was shared with other jobs",
        f"(1-minute load average {os.getloadavg()[0]:.1f} at the end of the run on {os.cpu_count()} cores);",
        "process CPU time of a single-threaded run is robust to that sharing, wall time is not.",
        "Compare the ratios of rows measured in the same run.",
        "",
        "## Operators: explicit adjoints vs torch.linalg autograd",
        "",
        "Peer: the same function computed with `torch.linalg`/`torch` and differentiated by",
        "PyTorch's built-in backward (`gelqf`: QR of A^T with the same sign fix; `syevd`:",
        "`eigh` with the same sign rule). Forward is timed without a graph; backward is the",
        "`loss.backward()` of a random linear functional of all outputs. `t/n^3` in ns.",
        "Ratio = peer / ours (> 1: ours faster).",
        "",
        "| op | n | fwd ours | fwd torch | fwd t/n^3 ours (ns) | bwd ours | bwd torch | bwd t/n^3 ours (ns) | bwd ratio |",
        "|---|---:|---|---|---:|---|---|---:|---:|",
    ]
    for r in op_rows:
        n = int(r["n"])  # type: ignore[call-overload]
        of, ob, pf, pb = (r[k] for k in ("ours_fwd", "ours_bwd", "peer_fwd", "peer_bwd"))
        lines.append(
            f"| {r['op']} | {n} | {fmt(of, 1e3)} | {fmt(pf, 1e3)} | {of[0] / n**3 * 1e9:.3g} | "  # type: ignore[index]
            f"{fmt(ob, 1e3)} | {fmt(pb, 1e3)} | {ob[0] / n**3 * 1e9:.3g} | {pb[0] / ob[0]:.2f} |"  # type: ignore[index]
        )
    lines += [
        "",
        "`sumlogdiag` and `copyltu` are O(n) / O(n^2) and not timed.",
        "",
        f"## Ragged-batch GP log marginal likelihood (B = {args.batch}, n ~ U{{10..250}}, forward + backward)",
        "",
        "### A. Likelihood given the kernel matrices",
        "",
        "The padded `(B, N, N)` kernel matrices are leaves; each run evaluates the log marginal",
        "likelihood of every dataset and back-propagates to `K` and the noise. The GPyTorch peer",
        "runs `ExactMarginalLogLikelihood` for each dataset on an `ExactGP` whose prior covariance",
        "is the same (cropped) `K_i` (a leaf), Cholesky path; its values agree with ours to",
        f"{diff:.1e} (max absolute difference).",
        "",
        "| strategy | time | GPyTorch / this | per-item loop (fused) / this |",
        "|---|---|---:|---:|",
    ]
    gp = next((st for lab, st in table_a if lab.startswith("GPyTorch")), None)
    loop = next(st for lab, st in table_a if lab == "loop, fused adjoint")
    for lab, st in table_a:
        vs_gp = f"{gp[0] / st[0]:.2f}" if gp is not None else "n/a"
        lines.append(f"| {lab} | {fmt(st, 1e3)} | {vs_gp} | {loop[0] / st[0]:.2f} |")
    best = min((r for r in table_a if not r[0].startswith("GPyTorch")), key=lambda r: r[1][0])
    lines += [
        "",
        f'Fastest configuration in this run: **{best[0]}** (the default, `strategy="auto"`, is',
        "`bucket` with 4 buckets and the fused adjoint).",
        "",
        "### B. End to end from the inputs (SE kernel, gradient to the lengthscales)",
        "",
        "Our rows build the padded SE kernel matrices in torch (cost proportional to `B N^2`,",
        "shared by all strategies) and use the default fused adjoint; the GPyTorch row builds",
        "an RBF kernel per dataset at its own size.",
        "",
        "Repeated runs on the shared machine moved the `bucket` and `loop` rows of this table by",
        "up to about 20% in either direction (the padded kernel construction and its backward,",
        "about 0.2 s here, is a large shared part), so their order here is not significant;",
        "table A isolates the likelihood.",
        "",
        "| pipeline | time | GPyTorch / this |",
        "|---|---|---:|",
    ]
    gp_b = next((st for lab, st in table_b if lab.startswith("GPyTorch")), None)
    for lab, st in table_b:
        vs_gp = f"{gp_b[0] / st[0]:.2f}" if gp_b is not None else "n/a"
        lines.append(f"| {lab} | {fmt(st, 1e3)} | {vs_gp} |")
    lines.append("")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(OUT)
    print(f"wrote {OUT}")
    plot(op_rows)


def plot(op_rows: list[dict[str, object]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure")
        return
    ops = sorted({str(r["op"]) for r in op_rows})
    fig, axes = plt.subplots(2, 4, figsize=(14, 6), sharex=True)
    for ax, op in zip(axes.ravel(), ops):
        rs = [r for r in op_rows if r["op"] == op]
        ns = [int(r["n"]) for r in rs]  # type: ignore[call-overload]
        for key, style, label in (
            ("ours_fwd", "C0-", "fwd ours"),
            ("peer_fwd", "C0--", "fwd torch"),
            ("ours_bwd", "C1-", "bwd ours"),
            ("peer_bwd", "C1--", "bwd torch"),
        ):
            ax.plot(
                ns, [r[key][0] / int(r["n"]) ** 3 * 1e9 for r in rs], style, marker="o", label=label
            )  # type: ignore[index, call-overload]
        ax.set_title(op)
        ax.set_xscale("log", base=2)
        ax.set_ylabel("time / n^3 (ns)")
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    tmp = FIG.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    tmp.replace(FIG)
    print(f"wrote {FIG}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    parser.add_argument(
        "--max-n", type=int, default=1024, help="largest operator size (power of two)"
    )
    parser.add_argument("--batch", type=int, default=128, help="datasets in the ragged batch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="process CPU time (robust on a shared machine; use with --threads 1) or wall time",
    )
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    if args.quick:
        args.max_n = min(args.max_n, 256)
        args.batch = min(args.batch, 32)
        args.repeats = 3
    sizes = [n for n in (128, 256, 512, 1024, 2048) if n <= args.max_n]
    t0 = time.perf_counter()
    table_a, table_b, diff = bench_ragged(args.batch, args.repeats)
    op_rows = bench_operators(sizes, args.repeats)
    write_report(op_rows, table_a, table_b, diff, args, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
