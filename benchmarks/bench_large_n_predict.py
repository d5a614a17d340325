"""Large-n prediction: amorgp's lazy (CG) posterior against scikit-learn's exact GP.

At ``n = 20,000`` training points (one input, ``SE``) the amortizer's automatic solver
plan is the lazy one (KeOps where it works, else torch row blocks): ``alpha = (K + s^2
I)^{-1} y`` by preconditioned CG, and the predictive variance from one batched solve
against the preconditioner's low-rank basis (``Posterior._cg_quad``), never a solve per
test point.  Timed once each, one thread, after KeOps has compiled its formulas:

* amorgp: ``Amortizer.from_pretrained().infer(X, y, "SE")`` (the fit), the first
  ``predict`` at 1,000 test points (it solves ``alpha`` and the variance basis), the same
  again (the solves cached), ``predict`` at 10,000 points, and ``predict_mean`` (the mean
  alone) at 10,000 points; and, for reference, the previous variance path (one CG solve
  whose right-hand sides are the test points' cross-covariance columns) on 16 points;
* scikit-learn: ``GaussianProcessRegressor`` with amorgp's fitted kernel held fixed
  (``ConstantKernel * RBF``, ``alpha`` = the noise variance, ``optimizer=None``; targets
  centred as amorgp's), its ``fit`` (a dense Cholesky) and ``predict(return_std=True)``
  at 1,000 points; and the largest differences of the two predictions there.

Writes ``docs/benchmarks/large-n-predict.md`` (and ``.json``).

Usage: ``python benchmarks/bench_large_n_predict.py [--n N] [--quick]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy/torch: one BLAS thread
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "large-n-predict.md"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def run(n: int, m_small: int, m_large: int, backend: str = "auto") -> dict[str, Any]:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from amorgp.amortizer import Amortizer
    from amorgp.lazy_kernels import keops_usable
    from amorgp.lazy_kernels.keops import warm_up

    g = np.random.default_rng(0)
    X = g.uniform(0, 10, (n, 1))
    y = np.sin(X[:, 0]) + 0.1 * g.standard_normal(n)
    Xs_small = g.uniform(0, 10, (m_small, 1))
    Xs_large = g.uniform(0, 10, (m_large, 1))
    if keops_usable("cpu"):
        warm_up(["SE"], n_dims=1, backward=False)  # compile outside the timings

    amz = Amortizer.from_pretrained(backend=backend)
    t_fit, r = _timed(lambda: amz.infer(X, y, "SE"))
    post = r.posterior
    print(f"fit {t_fit:.2f} s on {post.backend}", flush=True)
    t_first, _ = _timed(lambda: r.predict(Xs_small))
    t_small, (mean, var) = _timed(lambda: r.predict(Xs_small))
    t_large, _ = _timed(lambda: r.predict(Xs_large))
    t_mean_large, _ = _timed(lambda: r.predict_mean(Xs_large))
    print(
        f"predict {t_first:.2f} / {t_small:.2f} / {t_large:.2f} / {t_mean_large:.2f} s", flush=True
    )
    # the previous variance path: one CG solve over the test points' columns
    Xn = r.normalizer.transform_x(Xs_small[:16]).to(post.X)
    Ks = post.operator.on(post.X, Xn).dense()
    t_old16, _ = _timed(lambda: post.solver.quad_factors(Ks))
    print(f"previous path, 16 points {t_old16:.2f} s", flush=True)

    hp = r.hyperparameters_original
    variance = next(v for k, v in hp.items() if k[-1] == "variance")
    lengthscale = next(v for k, v in hp.items() if k[-1] == "lengthscale")
    kernel = ConstantKernel(variance, "fixed") * RBF(lengthscale, "fixed")
    gpr = GaussianProcessRegressor(kernel, alpha=r.noise_original, optimizer=None)
    y_mean = r.normalizer.y_mean
    t_sk_fit, _ = _timed(lambda: gpr.fit(X, y - y_mean))
    t_sk_small, (sk_mean, sk_std) = _timed(lambda: gpr.predict(Xs_small, return_std=True))
    print(f"scikit-learn fit {t_sk_fit:.2f} s, predict {t_sk_small:.2f} s", flush=True)
    std = np.sqrt(np.asarray(var) - r.noise_original)  # latent, as scikit-learn's
    return {
        "n": n,
        "m_small": m_small,
        "m_large": m_large,
        "backend": post.backend,
        "plan": backend,
        "basis_rank": int(post._variance_basis()[0].shape[1]) if post.method == "cg" else 0,
        "lengthscale": float(lengthscale),
        "variance": float(variance),
        "noise": float(r.noise_original),
        "amorgp_fit_s": t_fit,
        "amorgp_first_predict_s": t_first,
        "amorgp_predict_small_s": t_small,
        "amorgp_predict_large_s": t_large,
        "amorgp_mean_large_s": t_mean_large,
        "previous_path_16_s": t_old16,
        "sklearn_fit_s": t_sk_fit,
        "sklearn_predict_small_s": t_sk_small,
        "max_mean_diff": float(np.abs(np.asarray(mean) - (sk_mean + y_mean)).max()),
        "max_std_diff": float(np.abs(std - sk_std).max()),
        "min_std": float(sk_std.min()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="training points")
    ap.add_argument("--backend", default="auto", help="amorgp's solver plan (default: auto)")
    ap.add_argument("--quick", action="store_true", help="n = 3,000 on KeOps, 100 and 1,000 points")
    a = ap.parse_args()
    torch.set_num_threads(1)
    n, small, large = (3_000, 100, 1_000) if a.quick else (a.n, 1_000, 10_000)
    r = run(n, small, large, "keops" if a.quick and a.backend == "auto" else a.backend)
    sk_total = r["sklearn_fit_s"] + r["sklearn_predict_small_s"]
    first_total = r["amorgp_fit_s"] + r["amorgp_first_predict_s"]
    old = r["previous_path_16_s"] * small / 16
    lines = [
        "# Large-n prediction: amorgp's lazy posterior against scikit-learn",
        "",
        f"Generated by `benchmarks/bench_large_n_predict.py{' --quick' if a.quick else ''}` "
        f"on {_cpu()} ({platform.machine()}, {os.cpu_count()} cores, shared with other "
        f"jobs), torch {torch.__version__}, one thread, each timed once. n = {r['n']:,} "
        "training points, one input uniform on [0, 10], `SE`, targets sin(x) + 0.1 noise; "
        "test points uniform on the same range. amorgp's backend: "
        f"`{r['backend']}` ({'the automatic plan' if r['plan'] == 'auto' else 'forced'}); "
        "scikit-learn's `GaussianProcessRegressor` holds amorgp's fitted "
        f"kernel fixed (variance {r['variance']:.4g}, lengthscale {r['lengthscale']:.4g}, "
        f"noise {r['noise']:.3g}; `optimizer=None`). Ratio > 1: scikit-learn is slower.",
        "",
        "| step | amorgp (s) | scikit-learn (s) | ratio |",
        "|---|---:|---:|---:|",
        f"| fit (amorgp: network and calibration; scikit-learn: dense Cholesky) | "
        f"{r['amorgp_fit_s']:.2f} | {r['sklearn_fit_s']:.2f} | "
        f"{r['sklearn_fit_s'] / r['amorgp_fit_s']:.2g} |",
        f"| mean + std at {small:,} points, first call (amorgp solves alpha and the "
        f"variance basis, rank {r['basis_rank']}) | {r['amorgp_first_predict_s']:.2f} | "
        f"{r['sklearn_predict_small_s']:.2f} | "
        f"{r['sklearn_predict_small_s'] / r['amorgp_first_predict_s']:.2g} |",
        f"| mean + std at {small:,} points, solves cached | {r['amorgp_predict_small_s']:.2f} | "
        f"{r['sklearn_predict_small_s']:.2f} | "
        f"{r['sklearn_predict_small_s'] / r['amorgp_predict_small_s']:.2g} |",
        f"| fit + first mean + std at {small:,} points | {first_total:.2f} | {sk_total:.2f} | "
        f"{sk_total / first_total:.2g} |",
        f"| mean + std at {large:,} points, solves cached | "
        f"{r['amorgp_predict_large_s']:.2f} | | |",
        f"| mean alone (`predict_mean`) at {large:,} points | {r['amorgp_mean_large_s']:.2f} | | |",
        "",
        f"The previous variance path (one CG solve whose right-hand sides are the test "
        f"points' cross-covariance columns) took {r['previous_path_16_s']:.2f} s for 16 "
        f"points, about {old:.0f} s for {small:,} ({old / r['amorgp_first_predict_s']:.0f}x "
        "the first call above). Largest differences from scikit-learn at the "
        f"{small:,} points: mean {r['max_mean_diff']:.1e}, standard deviation "
        f"{r['max_std_diff']:.1e} (smallest standard deviation {r['min_std']:.2e}).",
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    OUT.with_suffix(".json").write_text(json.dumps(r, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
