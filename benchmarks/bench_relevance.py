"""Benchmark of input relevance: does the network give irrelevant inputs longer
lengthscales than relevant ones, and how far are its lengthscales from Type-2 ML's?

Data: ``--cases`` per input count ``d = 2..8`` (default 30): ``--points`` (default 200) inputs uniform on
[0, 1]^d; the first ``ceil(d / 2)`` inputs relevant, ``f = sum_j sin(2 pi a_j x_j +
phi_j)`` with ``a_j`` uniform in [0.5, 2], the others irrelevant; noise 0.1; kernel ``SE``
(one lengthscale per input, ARD). Seeded.

Methods, side by side in one run, one thread:

* the network's own lengthscales (``calibrate=False, starts=1, refine=0``), for each
  checkpoint given (``--checkpoint``, repeatable; default: the bundled default);
* the default fit (``refine=None``), the project's Type-2 ML optimum, as the reference.

Reported: the share of cases where every irrelevant input's lengthscale is longer than
every relevant one's; the median and 90th percentile of the irrelevant lengthscales
(normalised units: the input range is 1); the median log ratio of the relevant
lengthscales to the optimum's. For the bundled default, what the short irrelevant
lengthscales cost: the log marginal likelihood of its answer (one start, calibrated,
``refine=0``) with the irrelevant inputs' lengthscales held at 30 input ranges, and of
the default fit, above its answer's (median over the cases with an irrelevant input).
For every checkpoint: its calibrated start (one start, ``refine=0``) against the first
checkpoint's (median gain, share more than 1 nat below), and its default fit (the
library's multi-start and refinement): mean refinement evaluations, share of cases within
1 nat of the first checkpoint's default fit and share more than 1 nat above it.

Writes ``docs/benchmarks/relevance.md``.

Usage: ``python benchmarks/bench_relevance.py [--cases N] [--points N] [--checkpoint DIR ...]
[--out FILE]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import math
import platform
import statistics
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amorgp.amortizer import Amortizer

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "relevance.md"
N = 200


def cases(per_d: int, seed: int = 0, n: int = N) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """``(X, y, r)``: ``r`` the number of relevant (leading) inputs."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(2, 9):
        r = math.ceil(d / 2)
        for _ in range(per_d):
            X = rng.uniform(size=(n, d))
            a = rng.uniform(0.5, 2.0, size=r)
            phi = rng.uniform(0, 2 * np.pi, size=r)
            f = np.sin(2 * np.pi * a * X[:, :r] + phi).sum(1)
            out.append((X, f + 0.1 * rng.normal(size=n), r))
    return out


def lengthscales(result: Any, d: int) -> np.ndarray:
    """The ``(d,)`` lengthscales of an ``SE`` result, normalised units."""
    ls = np.full(d, np.nan)
    for (dim, _, name), value in result.hyperparameters.items():
        if name == "lengthscale":
            ls[dim] = value
    return ls


def answers(amz: Any, data: list[Any]) -> tuple[list[Any], list[Any]]:
    """Each case's calibrated answer from one start (``refine=0``) and its default fit."""
    one = [amz.infer(X, y, "SE", starts=1, refine=0) for X, y, _ in data]
    return one, [amz.infer(X, y, "SE") for X, y, _ in data]


def run(per_d: int, checkpoints: list[str], n: int = N) -> dict[str, Any]:
    data = cases(per_d, n=n)
    long = [i for i, (X, _, r) in enumerate(data) if X.shape[1] > r]  # an irrelevant input
    ref_amz = Amortizer.from_pretrained()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        done = {"default": answers(ref_amz, data)}  # each checkpoint's answers, once
        ref_one, ref_fit = done["default"]
        opt = [lengthscales(f, X.shape[1]) for f, (X, _, _) in zip(ref_fit, data, strict=True)]
        res: dict[str, Any] = {"cases": len(data), "n": n, "methods": {}, "starts": {}}
        methods = {f"network: {c}": c for c in checkpoints}
        for name, ckpt in methods.items():
            amz = ref_amz if ckpt == "default" else Amortizer.from_pretrained(ckpt)
            got = [
                lengthscales(amz.infer(X, y, "SE", calibrate=False, starts=1, refine=0), X.shape[1])
                for X, y, _ in data
            ]
            res["methods"][name] = summary(got, data, opt)
            if ckpt not in done:
                done[ckpt] = answers(amz, data)
            one, fit = done[ckpt]
            res["starts"][name] = {
                "start": [one[i].log_marginal_likelihood for i in long],
                "steps": [fit[i].refine_steps for i in long],
                "final": [fit[i].log_marginal_likelihood for i in long],
            }
        base = next(iter(res["starts"].values()))
        for v in res["starts"].values():
            v["start_gain"] = statistics.median(
                a - b for a, b in zip(v["start"], base["start"], strict=True)
            )
            v["start_worse_1nat"] = sum(
                a < b - 1.0 for a, b in zip(v["start"], base["start"], strict=True)
            ) / len(v["start"])
            v["mean_steps"] = statistics.mean(v["steps"])
            v["final_within_1nat"] = sum(
                a >= b - 1.0 for a, b in zip(v["final"], base["final"], strict=True)
            ) / len(v["final"])
            v["final_above_1nat"] = sum(
                a > b + 1.0 for a, b in zip(v["final"], base["final"], strict=True)
            ) / len(v["final"])
        res["methods"]["Type-2 ML (default fit)"] = summary(opt, data, opt)
        long_gain, fit_gain = [], []
        for i in long:
            X, y, r = data[i]
            a, c = ref_one[i], ref_fit[i]
            span = X.max(0) - X.min(0)
            fixed = {(j, 0, "lengthscale"): 30.0 * float(span[j]) for j in range(r, X.shape[1])}
            b = ref_amz.infer(X, y, "SE", fixed=fixed, starts=1, refine=0)
            long_gain.append(b.log_marginal_likelihood - a.log_marginal_likelihood)
            fit_gain.append(c.log_marginal_likelihood - a.log_marginal_likelihood)
        res["long_gain"] = statistics.median(long_gain)
        res["fit_gain"] = statistics.median(fit_gain)
        res["long_cases"] = len(long_gain)
    return res


def summary(got: list[np.ndarray], data: list[Any], opt: list[np.ndarray]) -> dict[str, float]:
    ordered, irr, ratio = [], [], []
    for ls, (_, _, r), ref in zip(got, data, opt, strict=True):
        ordered.append(bool(ls[r:].min() > ls[:r].max()))
        irr.extend(ls[r:].tolist())
        ratio.extend(np.log(ls[:r] / ref[:r]).tolist())
    return {
        "ordered": sum(ordered) / len(ordered),
        "irrelevant_median": statistics.median(irr),
        "irrelevant_p90": float(np.quantile(irr, 0.9)),
        "relevant_log_ratio": statistics.median(ratio),
    }


def report(res: dict[str, Any]) -> str:
    lines = [
        "# Input relevance: irrelevant inputs' lengthscales",
        "",
        f"`benchmarks/bench_relevance.py`; {res['cases']} simulated cases (`d = 2..8` "
        f"inputs uniform on [0, 1], {res['n']} points, the first `ceil(d/2)` relevant: a sum of "
        "sines of frequency 0.5-2 per range, noise 0.1), kernel `SE` (ARD), one thread, "
        f"torch {torch.__version__}, {platform.machine()}. Ordered: every irrelevant "
        "input's lengthscale longer than every relevant one's. Lengthscales in "
        "normalised units (input range 1). Log ratio: the relevant inputs' lengthscales "
        "against the default fit's (the project's Type-2 ML optimum), median.",
        "",
        "| method | ordered | irrelevant lengthscale: median | 90th percentile | "
        "relevant: median log ratio to the optimum |",
        "|---|---|---|---|---|",
    ]
    for name, s in res["methods"].items():
        lines.append(
            f"| {name} | {100 * s['ordered']:.0f} % | {s['irrelevant_median']:.3g} | "
            f"{s['irrelevant_p90']:.3g} | {s['relevant_log_ratio']:+.2f} |"
        )
    first = next(iter(res["starts"]))
    lines += [
        "",
        f"Each network's start and default fit on the {res['long_cases']} cases with an "
        "irrelevant input: the log marginal likelihood of its answer (one start, "
        f"calibrated, `refine=0`) above `{first}`'s (median, and the share of cases more "
        "than 1 nat below it), and its default fit (`refine=None`, the library's "
        "multi-start): mean refinement evaluations, and the shares of cases within 1 nat "
        f"of `{first}`'s default fit and more than 1 nat above it.",
        "",
        "| method | start above the first's: median (nats) | start more than 1 nat below | "
        "default fit: mean evaluations | default fit within 1 nat | ... more than 1 nat "
        "above |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in res["starts"].items():
        lines.append(
            f"| {name} | {v['start_gain']:+.1f} | {100 * v['start_worse_1nat']:.0f} % | "
            f"{v['mean_steps']:.1f} | {100 * v['final_within_1nat']:.0f} % | "
            f"{100 * v['final_above_1nat']:.0f} % |"
        )
    lines += [
        "",
        f"What the bundled default's short irrelevant lengthscales cost ({res['long_cases']} "
        "cases with an irrelevant input; its answer with one start, calibrated, `refine=0`): "
        "holding the irrelevant inputs' lengthscales at 30 input ranges raises the log "
        f"marginal likelihood by a median {res['long_gain']:.1f} nats; the default fit "
        f"(`refine=None`) by {res['fit_gain']:.1f}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--checkpoint", action="append", default=None)
    ap.add_argument("--points", type=int, default=N, help="points per case")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    res = run(a.cases, a.checkpoint or ["default"], a.points)
    a.out.write_text(report(res))
    print(report(res))


if __name__ == "__main__":
    main()
