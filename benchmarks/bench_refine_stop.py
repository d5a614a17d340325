"""Benchmark of where the refinement stops: the default fit (Fisher scoring of each
kernel's multi-start winner, stopped on the predicted gain), the amortized answer
(``refine=0``), ``refine="auto"`` and L-BFGS refinement, against scikit-learn's 3-restart
fit, on three tasks where the amortized answer stops short of the optimum.

Tasks (synthetic, seeded):

* **seasonal**: a 240-month series (linear trend, a yearly season with a second
  harmonic, noise), ``SE + SE*PER``, fitted on the first 192 months and scored on the
  last 48 (extrapolation);
* **friedman10**: Friedman #1 with 10 inputs (5 irrelevant), noise 1, ``n = 400``
  training and 400 test points, ``SE`` (one lengthscale per input);
* **six-inputs**: ``n = 2000`` training and 1000 test points of a 6-input function
  (two strong inputs, two weak, two irrelevant) plus noise, ``SE``;
* **six-inputs-3k**: the same function with ``n = 3000`` training points, above Fisher
  scoring's size: the default refines by L-BFGS rounds there (up to
  ``refine.DEFAULT_POINTS``).

Methods, side by side in one run, one thread:

* ``default``: the library's defaults (``refine=None``: network, multi-start,
  calibration, then ``refine="auto"`` up to ``refine.DEFAULT_POINTS`` points: the best
  periodic starts by successive halving, then each kernel by Fisher scoring until the
  predicted gain is below 0.01 nats);
* ``amortized``: ``refine=0`` (network, multi-start, calibration; the default before);
* ``auto``: ``refine="auto"`` asked for (the default's refinement up to
  ``fisher.MAX_POINTS`` points, L-BFGS above);
* ``L-BFGS 20`` and ``L-BFGS auto``: the refinement as it was, L-BFGS at every size
  (``fisher.MAX_POINTS`` set to 0 for the call): at most 20 iterations, and rounds of 10
  until the likelihood stops improving;
* ``default, network start`` and ``default, prior-mean start``: the default from one
  start (``starts=1``, calibrated): the network's, or the ablation's null start (every
  hyperparameter at its prior mean), so the refinement steps the network saves are seen;
* ``scikit-learn``: ``GaussianProcessRegressor(normalize_y=True,
  n_restarts_optimizer=3)`` of the same kernel (ARD RBF + white noise; for the seasonal
  task ``C*RBF + C*RBF*ExpSineSquared + White``), its own L-BFGS-B.

Reported per task (median over seeds): test RMSE, seconds, the log marginal likelihood
of the amorgp fits (normalised data) and its gap to the best of them, the refinement
evaluations, and whether the fit said it was at an optimum.

Writes ``docs/benchmarks/refine-stop.md``.

Usage: ``python benchmarks/bench_refine_stop.py [--seeds N] [--quick]``.
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
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def seasonal(seed: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    t = np.arange(240, dtype=float)
    y = (
        0.02 * t
        + rng.uniform(1.0, 2.0) * np.sin(2 * np.pi * t / 12 + rng.uniform(0, 6.3))
        + 0.5 * np.sin(4 * np.pi * t / 12 + rng.uniform(0, 6.3))
        + 0.3 * rng.standard_normal(240)
    )
    X = t[:, None]
    return X[:192], y[:192], X[192:], y[192:], "SE + SE*PER"


def friedman10(seed: int) -> tuple[Any, ...]:
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(800, n_features=10, noise=1.0, random_state=seed)
    return X[:400], y[:400], X[400:], y[400:], "SE"


def six_inputs(seed: int, n: int = 2000) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (n + 1000, 6))
    f = np.sin(6 * X[:, 0]) + np.cos(4 * X[:, 1]) + 0.3 * np.sin(3 * X[:, 2]) + 0.2 * X[:, 3]
    y = f + 0.1 * rng.standard_normal(n + 1000)
    return X[:n], y[:n], X[n:], y[n:], "SE"


def six_inputs_3k(seed: int) -> tuple[Any, ...]:
    return six_inputs(seed, 3000)


TASKS = {
    "seasonal": seasonal,
    "friedman10": friedman10,
    "six-inputs": six_inputs,
    "six-inputs-3k": six_inputs_3k,
}
LARGE = ("six-inputs", "six-inputs-3k")
"""Tasks run on one seed (and left out by ``--quick``)."""


def sklearn_fit(X: np.ndarray, y: np.ndarray, kernel: str):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, ExpSineSquared, WhiteKernel

    d = X.shape[1]
    span = X.max(0) - X.min(0)
    if kernel == "SE":
        k = ConstantKernel() * RBF(length_scale=0.5 * span, length_scale_bounds=(1e-3, 1e5))
    else:
        k = ConstantKernel() * RBF(length_scale=0.5 * span[0]) + ConstantKernel() * RBF(
            length_scale=span[0]
        ) * ExpSineSquared(length_scale=1.0, periodicity=12.0)
    k = k + WhiteKernel(noise_level=0.1)
    assert d == X.shape[1]
    return GaussianProcessRegressor(
        k, normalize_y=True, n_restarts_optimizer=3, random_state=0
    ).fit(X, y)


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def run_amorgp(amz, X, y, Xt, yt, kernel, refine, lbfgs: bool, **opts: Any) -> dict[str, Any]:
    import amorgp.amortizer.stages.fisher as fisher

    saved = fisher.MAX_POINTS
    if lbfgs:
        fisher.MAX_POINTS = 0
    try:
        t = time.perf_counter()
        r = amz.infer(X, y, kernel, refine=refine, **opts)
        seconds = time.perf_counter() - t
    finally:
        fisher.MAX_POINTS = saved
    mean, _ = r.predict(Xt)
    return {
        "rmse": rmse(mean, yt),
        "seconds": seconds,
        "lml": r.log_marginal_likelihood,
        "steps": r.refine_steps,
        "status": r.refine_status,
        "at_optimum": r.at_optimum if X.shape[0] <= fisher.CHECK_POINTS else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one seed, no six-inputs tasks")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/refine-stop.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.stages.null_starts import NullNetwork

    amz = Amortizer.from_pretrained()
    # the ablation's null start: every hyperparameter at its prior mean, then calibrated
    prior_mean = Amortizer(NullNetwork(amz.vocabulary, "prior-mean"), amz.meta, device="cpu")
    seeds = 1 if args.quick else args.seeds
    tasks = [t for t in TASKS if not (args.quick and t in LARGE)]
    amz.infer(*seasonal(0)[:2], "SE", refine=2)  # warm-up
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in tasks:
        rows[name] = {}
        n_seeds = 1 if name in LARGE else seeds
        for seed in range(n_seeds):
            X, y, Xt, yt, kernel = TASKS[name](seed)
            runs = {
                "default": run_amorgp(amz, X, y, Xt, yt, kernel, None, False),
                "amortized": run_amorgp(amz, X, y, Xt, yt, kernel, 0, False),
                "auto": run_amorgp(amz, X, y, Xt, yt, kernel, "auto", False),
                "L-BFGS 20": run_amorgp(amz, X, y, Xt, yt, kernel, 20, True),
                "L-BFGS auto": run_amorgp(amz, X, y, Xt, yt, kernel, "auto", True),
                "default, network start": run_amorgp(
                    amz, X, y, Xt, yt, kernel, None, False, starts=1
                ),
                "default, prior-mean start": run_amorgp(
                    prior_mean, X, y, Xt, yt, kernel, None, False, starts=1
                ),
            }
            best = max(v["lml"] for v in runs.values())
            for v in runs.values():
                v["gap"] = best - v["lml"]
            t = time.perf_counter()
            sk = sklearn_fit(X, y, kernel)
            sec = time.perf_counter() - t
            runs["scikit-learn"] = {"rmse": rmse(sk.predict(Xt), yt), "seconds": sec}
            for k, v in runs.items():
                rows[name].setdefault(k, []).append(v)
            print(
                name,
                seed,
                {
                    k: (
                        round(v["rmse"], 4),
                        round(v["seconds"], 2),
                        round(v.get("gap", float("nan")), 2),
                        v.get("steps"),
                    )
                    for k, v in runs.items()
                },
                flush=True,
            )
    write(args, rows)


def _med(vals: list[Any]) -> float:
    v = [x for x in vals if x is not None]
    return float(np.median(v)) if v else float("nan")


def write(args, rows) -> None:
    cpu = platform.processor() or platform.machine()
    lines = [
        '# Where the refinement stops: defaults, `refine="auto"` and L-BFGS',
        "",
        "`benchmarks/bench_refine_stop.py`; one thread (BLAS too), torch "
        f"{torch.__version__}, {cpu} ({os.cpu_count()} cores, shared with other jobs), all "
        "methods side by side in one run. Medians over seeds (the six-input tasks: one seed). "
        '`default`: the library\'s defaults (`refine=None`, here `refine="auto"`: the '
        "best periodic starts refined by successive halving, then each kernel by Fisher "
        "scoring until the Fisher information predicts less than 0.01 nats for another "
        "step; above 2000 points, up to 5000, L-BFGS rounds as `auto` runs them); "
        '`amortized`: `refine=0`; `auto`: `refine="auto"` '
        "asked for (the same as the default up to 5000 points); "
        "`L-BFGS 20` / `L-BFGS auto`: the refinement at every size "
        "before Fisher scoring (20 iterations; rounds of 10 until a round gains less than "
        "`max(0.05, 1e-4 |LML|)`). Gap: nats below the best amorgp fit of the same data "
        "(normalised log marginal likelihood). At optimum: the share of fits whose "
        "predicted gain is below 0.01 nats (not evaluated above 1000 points). "
        "`default, network start` / `default, prior-mean start`: the default from one "
        "calibrated start, the network's or every hyperparameter at its prior mean: the "
        "network's share is the steps and seconds it saves. vs scikit-learn: seconds over "
        "scikit-learn's on the same task.",
        "",
        "| task | method | test RMSE | seconds | vs scikit-learn | gap (nats) | refine steps "
        "| at optimum |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, methods in rows.items():
        sk = _med([r["seconds"] for r in methods["scikit-learn"]])
        for m, runs in methods.items():
            gap = _med([r.get("gap") for r in runs])
            steps = _med([r.get("steps") for r in runs])
            ats = [r.get("at_optimum") for r in runs if r.get("at_optimum") is not None]
            at = f"{100 * np.mean(ats):.0f} %" if ats else "-"
            lines.append(
                f"| {name} | {m} | {_med([r['rmse'] for r in runs]):.4f} | "
                f"{_med([r['seconds'] for r in runs]):.2f} | "
                f"{_med([r['seconds'] for r in runs]) / sk:.2f} | "
                f"{'-' if np.isnan(gap) else f'{gap:.2f}'} | "
                f"{'-' if np.isnan(steps) else f'{steps:.0f}'} | {at} |"
            )
    lines.append("")
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
