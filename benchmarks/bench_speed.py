"""The core inference path at n = 500, d = 6: before and after, against scikit-learn.

Side by side in one run, each in its own process on one thread:

* **one kernel**: ``Amortizer.from_pretrained().infer(X, y, "SE")`` (calibrated, the
  library default) then ``.predict(X_test)`` at 200 test points, against
  scikit-learn's single-start ``GaussianProcessRegressor`` (``C * RBF(ARD) + White``,
  ``normalize_y``; :func:`amorgp_experiments.paper.sklearn_gp.sklearn_gpr`) fit + predict
  on the same data;
* **24 kernels**: ``infer_many`` of the 24 paper evaluation kernels
  (``paper_evaluation_set(0)``, each the same sum in every dimension), calibrated, and its
  ratio to one kernel;
* **peak memory** of ``infer(X, y, "SE")`` at 20,000 points (``ru_maxrss`` of a fresh
  process, less its resident size before the call);
* the **profile** (pyinstrument) of ten one-kernel calls and of two 24-kernel calls;
* the **floor** of this CPU: the network's floating-point operations at its encoder
  points (``torch.utils.flop_counter``) divided by the measured float32 matmul rate,
  plus one 500 x 500 float64 Cholesky.

"Before" is the same script's worker run on the sources of ``--base`` (default
``dbccc8a``, extracted with ``git archive`` into a temporary folder), "after" on this
checkout.  Times are process CPU times (``time.process_time``, one thread: robust to
other work on the machine), the minimum over ``--repeats`` calls after a warm-up, and
over two processes per side run alternately.

Writes ``docs/benchmarks/speed.md`` (and ``.json``).

Usage: ``python benchmarks/bench_speed.py [--quick] [--repeats N] [--base REV]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "speed.md"
N, D, N_TEST = 500, 6, 200


def _data(n: int, d: int, seed: int = 0) -> tuple[Any, Any, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(n)
    return X, y, rng.uniform(-2, 2, (N_TEST, d))


def _cpu_min(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def _profile(fn: Any, calls: int, lines: int = 28) -> str:
    try:
        from pyinstrument import Profiler
    except ImportError:
        return "(pyinstrument is not installed: no profile)"

    prof = Profiler(interval=0.001)
    prof.start()
    for _ in range(calls):
        fn()
    prof.stop()
    text = prof.output_text(unicode=False, color=False, show_all=False)
    body = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("_", "/"))]
    return "\n".join(ln[:120] for ln in body[1 : lines + 1])


def worker(task: str, quick: bool, repeats: int) -> dict[str, Any]:
    """One measurement in this process (its sources are whatever ``PYTHONPATH`` gives)."""
    import torch

    torch.set_num_threads(1)
    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import paper_evaluation_set

    n = 200 if quick else N
    X, y, Xt = _data(n, D)
    amz = Amortizer.from_pretrained(device="cpu")
    kernels = [str(t) for t in paper_evaluation_set(0)]

    import inspect

    # the amortized answer: the rows time what they name (the default also refines)
    refine0 = {"refine": 0} if "refine" in inspect.signature(amz.infer_many).parameters else {}

    def one() -> None:
        amz.infer(X, y, "SE", **refine0).predict(Xt)

    multi = "starts" in inspect.signature(amz.infer_many).parameters
    one_start = {"starts": 1, **refine0} if multi else {}

    def many() -> None:  # one start per kernel: the same work before and after
        amz.infer_many(X, y, kernels, **one_start)

    def many_default() -> None:  # the amortized answer: multi-start for the periodic kernels
        amz.infer_many(X, y, kernels, **refine0)

    if task == "timing":
        t1 = _cpu_min(one, repeats)
        t24 = _cpu_min(many, max(1, repeats // 3))
        out: dict[str, Any] = {"one": t1, "many": t24}
        if multi:
            out["many_default"] = _cpu_min(many_default, max(1, repeats // 3))
        if os.environ.get("BENCH_SKLEARN") == "1":
            from amorgp_experiments.paper.sklearn_gp import sklearn_gpr

            out["sklearn"] = _cpu_min(lambda: sklearn_gpr(X, y, Xt, "SE"), max(1, repeats // 3))
            out.update(_floor(amz, X, y))
        return out
    if task == "profile":
        one()  # warm-up: the network's trace, first allocations
        many()
        return {"one": _profile(one, 10), "many": _profile(many, 2)}
    if task == "memory":
        import resource

        m = 2000 if quick else 20000
        Xm, ym, _ = _data(m, D, seed=1)
        amz.infer(Xm[:100], ym[:100], "SE")  # warm-up: imports, first allocations
        before = _rss_mb()
        t0 = time.perf_counter()
        amz.infer(Xm, ym, "SE")
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"points": m, "rss_before_mb": before, "peak_mb": peak, "wall_s": wall}
    if task == "refine":
        return _refine_airline(amz, repeats)
    raise SystemExit(f"unknown task {task!r}")


REFINE_KERNELS = ("SE + SE*PER", "LIN + SE*PER", "SE*LIN + PER")


def _refine_airline(amz: Any, repeats: int) -> dict[str, Any]:
    """``refine="auto"`` against scikit-learn's 3-restart fit of the same kernel on the
    bundled airline series (standardised targets; ``DotProduct`` for ``LIN``)."""
    import warnings

    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, DotProduct, ExpSineSquared, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    from amorgp.amortizer.frontends.io import read_csv

    table = read_csv(ROOT / "data" / "airline.csv", None)
    X, y = table.X, table.y
    yn = (y - y.mean()) / y.std()
    sk = {
        "SE + SE*PER": lambda: C() * RBF() + C() * RBF() * ExpSineSquared() + WhiteKernel(),
        "LIN + SE*PER": lambda: C() * DotProduct() + C() * RBF() * ExpSineSquared() + WhiteKernel(),
        "SE*LIN + PER": lambda: C() * RBF() * DotProduct() + C() * ExpSineSquared() + WhiteKernel(),
    }
    out: dict[str, Any] = {}
    reps = max(1, repeats // 3)
    for k in REFINE_KERNELS:
        offset = amz.prepare(X, y, [k])[0].lml_offset(X.shape[0])
        got: dict[str, float] = {}

        def ours(k: str = k, got: dict[str, float] = got) -> None:
            got["lml"] = float(amz.infer(X, y, k, refine="auto").log_marginal_likelihood)

        def theirs(k: str = k, got: dict[str, float] = got) -> None:
            gpr = GaussianProcessRegressor(sk[k](), n_restarts_optimizer=3, random_state=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gpr.fit(X, yn)
            got["sk_lml"] = float(gpr.log_marginal_likelihood_value_)

        out[k] = {"amortized": _cpu_min(ours, reps), "sklearn": _cpu_min(theirs, reps)}
        # both in the original units of the targets (the amortizer's likelihood is of
        # its normalised targets; scikit-learn's of the standardised ones)
        out[k]["lml"] = got["lml"] + offset
        out[k]["sk_lml"] = got["sk_lml"] - X.shape[0] * math.log(float(y.std()))
    return out


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _floor(amz: Any, X: Any, y: Any) -> dict[str, float]:
    """The network's FLOPs at its encoder points over the measured matmul rate, and one
    500 x 500 Cholesky."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from amorgp.amortizer.networks.forward import _OneDataset, encode_structures
    from amorgp.kernel_grammar import DimWiseStructure

    _, Xn, yn, _ = amz.prepare(X, y, ["SE"])
    idx = amz.encoder_subset(Xn.shape[0])
    Xe, ye = (Xn, yn) if idx is None else (Xn[idx], yn[idx])
    d = X.shape[1]
    sym, mask = encode_structures(
        [DimWiseStructure.parse("SE", d)], amz.vocabulary, d, torch.device("cpu")
    )
    eager = _OneDataset(amz.model)  # the eager forward (the traced one hides its ops)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        eager(Xe[None].float(), ye[None].float(), sym, mask)
    flops = float(counter.get_total_flops())
    a = torch.randn(1024, 1024)
    rate = 2 * 1024**3 / _cpu_min(lambda: a @ a, 10)
    n = X.shape[0]
    A = torch.randn(n, n, dtype=torch.float64)
    A = A @ A.T + n * torch.eye(n, dtype=torch.float64)
    chol = _cpu_min(lambda: torch.linalg.cholesky(A), 10)
    from scipy.linalg import lapack

    lwork = int(lapack.dsytrd_lwork(n, lower=1)[0])
    An = A.numpy()
    tridiagonal = _cpu_min(lambda: lapack.dsytrd(An, lower=1, lwork=lwork), 10)
    e = torch.randn(1 << 20, dtype=torch.float64)
    exp_rate = (1 << 20) / _cpu_min(lambda: torch.exp(e), 10)
    from amorgp.kernel_grammar import paper_evaluation_set

    # entries of the 24 matrices that need at least one exp: one per point pair of the
    # upper triangle, dimension and addend with an SE or PER factor (a pure LIN addend
    # needs none; SE and PER factors of one addend share one exponent)
    exps = sum(
        sum(1 for a in str(t).split("+") if "SE" in a or "PER" in a)
        for t in paper_evaluation_set(0)
    ) * (d * n * (n + 1) / 2)
    return {
        "net_flops": flops,
        "encoder_points": float(Xe.shape[0]),
        "matmul_flops_per_s": rate,
        "cholesky_500_s": chol,
        "tridiagonal_500_s": tridiagonal,
        "exp_per_s": exp_rate,
        "exps_24": exps,
    }


def _spawn(src: Path, task: str, quick: bool, repeats: int, sklearn: bool = False) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in sorted((src / "packages").glob("*/src")))
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", BENCH_SKLEARN="1" if sklearn else "0")
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        task,
        "--repeats",
        str(repeats),
    ]
    if quick:
        cmd.append("--quick")
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{task} worker on {src} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _base_tree(rev: str, where: Path) -> Path:
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "packages"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar, check=True)
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: n = 200, 2,000 points")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--base", default="dbccc8a", help="the revision measured as 'before'")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.quick, args.repeats)))
        return
    repeats = 2 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        base = _base_tree(args.base, Path(tmp))
        res: dict[str, Any] = {"before": {}, "after": {}}
        for task in ("timing", "profile", "memory", "refine"):
            # timings alternate before/after processes twice and keep each minimum: the
            # machine's load drifts between processes
            for _ in range(2 if task == "timing" else 1):
                for side, src in (("before", base), ("after", ROOT)):
                    if task == "refine" and side == "before":
                        continue  # the after side against scikit-learn only
                    sk = task == "timing" and side == "after"
                    print(f"{task} {side}...", file=sys.stderr, flush=True)
                    got = _spawn(src, task, args.quick, repeats, sklearn=sk)
                    old = res[side].get(task)
                    if old is not None:
                        best = {"matmul_flops_per_s": max, "encoder_points": max}
                        got = {k: best.get(k, min)(v, old[k]) for k, v in got.items()}
                    res[side][task] = got
    res["machine"] = _machine()
    res["quick"] = args.quick
    res["base"] = args.base
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    args.out.write_text(_markdown(res))
    print(args.out.read_text())


def _machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs (shared with other work), one thread; "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )


def _floor_24(a: dict[str, Any]) -> list[str]:
    """The floor of the 24 paper kernels, against the 4x-one-kernel bar."""
    if "tridiagonal_500_s" not in a:
        return []
    ms = 1e3
    net = a["net_flops"] / a["matmul_flops_per_s"]
    chol, tri = 24 * a["cholesky_500_s"], 24 * a["tridiagonal_500_s"]
    exps = a["exps_24"] / a["exp_per_s"]
    total = net + chol + tri + exps
    return [
        f"- Floor of the 24 paper kernels, calibrated: the network (at least "
        f"{net * ms:.1f} ms), 24 Cholesky factorisations ({chol * ms:.0f} ms), the exact "
        f"calibration's 24 tridiagonalisations (LAPACK `dsytrd`, {tri * ms:.0f} ms) and "
        f"{a['exps_24'] / 1e6:.0f} million exponentials of the kernel matrices (only the "
        f"upper triangles; {a['exp_per_s'] / 1e6:.0f} million per second: {exps * ms:.0f} ms): "
        f"{total * ms:.0f} ms, {total / a['one']:.1f}x the measured one kernel and "
        f"{total / (net + a['cholesky_500_s']):.0f}x its floor.  A bar of 4x one kernel "
        f"({4 * a['one'] * ms:.0f} ms) is below what this CPU can do for exact per-kernel "
        "factorisations; measured, the 24 kernels take "
        f"{a['many'] / total:.1f}x their floor.",
    ]


def _markdown(r: dict[str, Any]) -> str:
    b, a = r["before"]["timing"], r["after"]["timing"]
    n = 200 if r["quick"] else N
    ms = 1e3
    floor_s = a["net_flops"] / a["matmul_flops_per_s"]
    mb, ma = r["before"]["memory"], r["after"]["memory"]
    lines = [
        "# Speed of the core inference path",
        "",
        "Generated by `benchmarks/bench_speed.py`"
        + (" (`--quick`: a smoke run, not the reference numbers)" if r["quick"] else "")
        + f". Machine: {r['machine']}.  Run `python benchmarks/bench_speed.py` (the nox "
        "session `benchmark(name='speed')`; `--quick` for a smoke run).",
        f"Data: n = {n}, d = {D}, `y = sum(sin(X)) + noise`, {N_TEST} test points. Before: "
        f"the sources of `{r['base']}`; after: this checkout; scikit-learn in the same run. "
        "Process CPU time, minimum over repeated calls after a warm-up and over two "
        "processes per side run alternately.",
        "",
        "What the path does (`amorgp.amortizer.stages.batched`): the network's encoder runs once "
        "for all kernels; the kernel matrices of all kernels come from one call of the "
        "dimension-wise evaluator; the calibration works on those matrices (on the CPU one "
        "Householder tridiagonalisation per kernel and an `O(n)` recurrence per noise ratio, "
        "no eigenvectors; elsewhere a batched eigendecomposition); each matrix is then "
        "factored once and its result's likelihood and predictions reuse that factor.",
        "",
        "## Times",
        "",
        "| | before | after | after vs before |",
        "|---|---:|---:|---:|",
        f"| one kernel (`SE`, calibrated): `infer` + `predict` | {b['one'] * ms:.1f} ms "
        f"| {a['one'] * ms:.1f} ms | {b['one'] / a['one']:.2f}x faster |",
        f"| 24 paper kernels, calibrated, one start each: `infer_many` | {b['many'] * ms:.0f} ms "
        f"| {a['many'] * ms:.0f} ms | {b['many'] / a['many']:.2f}x faster |",
        f"| 24 kernels / one kernel | {b['many'] / b['one']:.1f} | {a['many'] / a['one']:.1f} | |",
        f"| 24 paper kernels, calibrated, default multi-start (`amorgp.amortizer.stages.multistart`; "
        f"8 starts for each of the 20 kernels with a periodic term) | | {a['many_default'] * ms:.0f} ms "
        f"| {a['many_default'] / a['many']:.2f}x one start |",
        f"| scikit-learn single start (`C * RBF(ARD) + White`): fit + predict "
        f"| | {a['sklearn'] * ms:.0f} ms | |",
        f"| scikit-learn / one kernel | {a['sklearn'] / b['one']:.1f}x "
        f"| {a['sklearn'] / a['one']:.1f}x | |",
        "",
        "## The floor of this CPU",
        "",
        f"- The network's forward at its {a['encoder_points']:.0f} encoder points: "
        f"{a['net_flops'] / 1e9:.3f} GFLOP; float32 matmul on one thread: "
        f"{a['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, so at least {floor_s * ms:.1f} ms.",
        f"- One {N} x {N} float64 Cholesky: {a['cholesky_500_s'] * ms:.2f} ms.",
        f"- Floor of one kernel: {(floor_s + a['cholesky_500_s']) * ms:.1f} ms; measured "
        f"{a['one'] * ms:.1f} ms ({a['one'] / (floor_s + a['cholesky_500_s']):.1f}x the floor, "
        "the rest: the kernel matrix, the calibration's tridiagonalisation (4/3 n^3 flops), "
        "the prediction and Python).",
        *_floor_24(a),
        "",
        f'## Peak memory of `infer(X, y, "SE")` at {ma["points"]:,} points',
        "",
        "Above 5,792 points one kernel matrix exceeds the batched path's chunk "
        "(`batched.CHUNK_BYTES`, 256 MiB): such fits give each result its own "
        "`lazy_kernels.Posterior` (`KernelResult.posterior`), whose solver (dense Cholesky, "
        "CG, KeOps or block CG) follows the memory budget, and the calibration its 1,000-point "
        "subset.",
        "",
        "| | resident before the call | peak | increase | wall time |",
        "|---|---:|---:|---:|---:|",
    ]
    for side, m in (("before", mb), ("after", ma)):
        lines.append(
            f"| {side} | {m['rss_before_mb']:.0f} MiB | {m['peak_mb']:.0f} MiB "
            f"| {m['peak_mb'] - m['rss_before_mb']:.0f} MiB | {m['wall_s']:.1f} s |"
        )
    for title, key, calls in (
        ("one kernel", "one", "ten calls"),
        ("24 kernels", "many", "two calls"),
    ):
        for side in ("before", "after"):
            lines += [
                "",
                f"## Profile, {title}, {side} ({calls}; wall time under the machine's load)",
                "",
                "```",
                r[side]["profile"][key],
                "```",
            ]
    ref = r["after"].get("refine")
    if ref:
        lines += [
            "",
            '## `refine="auto"` against scikit-learn\'s 3-restart fit (airline, 144 points)',
            "",
            'Process CPU time of `infer(X, y, kernel, refine="auto")` (multi-start, the '
            "best starts refined by L-BFGS) and of scikit-learn's `GaussianProcessRegressor("
            "kernel, n_restarts_optimizer=3)` with the same kernel (`C*RBF`, `C*DotProduct`, "
            "`C*ExpSineSquared`, products and sums as written, `+ WhiteKernel`) on the "
            "standardised targets; log marginal likelihoods in the original units of the "
            "targets (scikit-learn's `DotProduct` is not the same kernel as `LIN`: its "
            "optimum may differ).",
            "",
            "| kernel | amortized, refine=auto | scikit-learn, 3 restarts | ratio | LML, amortized "
            "| LML, scikit-learn |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for k, v in ref.items():
            lines.append(
                f"| `{k}` | {v['amortized']:.2f} s | {v['sklearn']:.2f} s "
                f"| {v['amortized'] / v['sklearn']:.2f}x | {v['lml']:.2f} | {v['sk_lml']:.2f} |"
            )
    lines += [
        "",
        "## Limits",
        "",
        f"- The 24 kernels cost {a['many'] / a['one']:.0f}x one kernel on this CPU, not a "
        "few times: their kernel matrices "
        "(sums of up to four addends in each of six dimensions, `exp` and `sin` of "
        "125,000 point pairs per addend and dimension), 24 tridiagonalisations and 24 "
        "Cholesky factorisations are work that grows with the number of kernels, while the "
        "network, the only cost shared, is about ten milliseconds.  On a GPU the same path "
        "runs batched without host synchronisation (see `docs/benchmarks/gpu.md`).",
        "- The timings are one-thread CPU times on a machine shared with other work; ratios "
        "hold better than absolute times.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
