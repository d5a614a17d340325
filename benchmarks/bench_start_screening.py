"""Cheaper starts, measured: would a cheap screen of the multi-start keep its winner?

The multi-start (:mod:`amorgp.amortizer.stages.multistart`) calibrates and scores every start
exactly: per start a kernel matrix, its tridiagonal form and the search of the noise
ratio.  At 80 points that is most of a batched fit's time (``many-datasets.md``).  Two
cheaper screens are compared with it, start by start, on the starts the library's
defaults build (8 per periodic kernel, the network's included, and the two null starts):

* **fixed ratio**: each start's likelihood at its own noise-to-signal ratio (the
  network's noise over a unit scale), the best scale in closed form, from one Cholesky
  factorisation on the same points;
* **half the points**: each start calibrated and scored exactly on a seeded half of the
  points (at least 48).

The ``T`` starts a screen ranks best would then be scored exactly and the best kept; the
table gives, per screen and ``T``, the log marginal likelihood lost against scoring every
start exactly (mean over pairs, and the pairs losing more than 1 and 5 nats), and each
screen's cost per start against the exact score's.

Data: the 32 ``realdata-a`` datasets (first 500 rows, the 24 paper kernels each, scored
on the multi-start's scoring points) and a fleet of synthetic series
(``bench_many_datasets.fleet``: ``SE + SE*PER`` on 80 points).  The starts are read where
the batched path scores them (``amorgp.amortizer.stages.pairs.evaluate_and_calibrate``, wrapped
here).

Writes ``docs/benchmarks/start-screening.md``.

Usage: ``python benchmarks/bench_start_screening.py [--series N] [--quick]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import math
import platform
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
HALF_MIN = 48
TOPS = (1, 2, 3, 4)


def _fixed_ratio(Km: torch.Tensor, Y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Profile log likelihood over the scale at the ratio ``noise`` (one Cholesky each)."""
    n = Y.shape[1]
    A = Km + noise[:, None, None] * torch.eye(n, dtype=Km.dtype)
    L, info = torch.linalg.cholesky_ex(A)
    # two triangular solves: the batched cholesky_solve is several times slower on the CPU
    z = torch.linalg.solve_triangular(L, Y[..., None], upper=False)[..., 0]
    s = (z * z).sum(-1) / n
    logdet = 2.0 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    lml = -0.5 * (n * (s.log() + 1.0 + math.log(2.0 * math.pi)) + logdet)
    return torch.where((info == 0) & torch.isfinite(lml), lml, torch.full_like(lml, -math.inf))


class Recorder:
    """Wraps ``pairs.evaluate_and_calibrate``: every start's exact score and both screens."""

    def __init__(self) -> None:
        from amorgp.amortizer.stages import pairs

        self.pairs = pairs
        self.exact_call = pairs.evaluate_and_calibrate
        self.rows: dict[tuple[int, bytes, bytes], list[tuple[float, float, float]]] = defaultdict(
            list
        )
        self.time = {"exact": 0.0, "fixed ratio": 0.0, "half the points": 0.0, "starts": 0.0}
        self.tag = 0

    def __enter__(self) -> Recorder:
        self.pairs.evaluate_and_calibrate = self  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self.pairs.evaluate_and_calibrate = self.exact_call

    def __call__(self, X, Y, sym, msk, params, noise, vocab):
        from amorgp.amortizer.networks.forward import encoder_subset

        P, n = Y.shape
        t = time.process_time()
        out = self.exact_call(X, Y, sym, msk, params, noise, vocab)
        self.time["exact"] += time.process_time() - t
        exact = out.log_marginal_likelihood
        t = time.process_time()
        step = max(1, self.pairs.CACHE_BYTES // (8 * n * n))  # in cache, as the exact path
        fixed = torch.cat(
            [
                _fixed_ratio(
                    self.pairs.pair_matrices(X[c], sym[c], msk[c], params[c], vocab),
                    Y[c].double(),
                    noise[c].double(),
                )
                for c in (slice(i, i + step) for i in range(0, P, step))
            ]
        )
        self.time["fixed ratio"] += time.process_time() - t
        sub = encoder_subset(n, max(HALF_MIN, n // 2), 0)
        half = exact
        if sub is not None:
            t = time.process_time()
            half = self.exact_call(X[:, sub], Y[:, sub], sym, msk, params, noise, vocab)
            half = half.log_marginal_likelihood
            self.time["half the points"] += time.process_time() - t
        self.time["starts"] += P
        for i in range(P):  # the starts of one pair share their targets and structure
            key = (self.tag, Y[i].numpy().tobytes(), sym[i].numpy().tobytes())
            self.rows[key].append((float(exact[i]), float(fixed[i]), float(half[i])))
        return out


def losses(rows: dict, screen: int, top: int) -> np.ndarray:
    """Per pair: the best exact score less the best exact score of the screen's top ``top``."""
    out = []
    for starts in rows.values():
        if len(starts) < 2:
            continue
        a = np.array(starts)
        exact = np.where(np.isfinite(a[:, 0]), a[:, 0], -np.inf)
        ranked = np.argsort(-np.nan_to_num(a[:, screen], nan=-np.inf), kind="stable")[:top]
        out.append(exact.max() - exact[ranked].max())
    return np.array(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000, help="synthetic series")
    parser.add_argument("--quick", action="store_true", help="4 real datasets, 100 series")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/start-screening.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from amorgp_experiments.realdata import load_corpus

    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import paper_evaluation_set

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_many_datasets import KERNEL, fleet

    amz = Amortizer.from_pretrained(device="cpu")
    corpus = list(load_corpus())
    if args.quick:
        corpus, args.series = corpus[:4], 100
    results = {}
    with Recorder() as real:
        for ds in corpus:
            X, y = ds.X[:500], ds.y[:500]
            kernels = [t.broadcast(X.shape[1]) for t in paper_evaluation_set(0)]
            real.tag += 1
            amz.infer_datasets([(X, y)], kernels)
    results["real"] = real
    series = [(x[:80, None], y[:80]) for x, y in fleet(args.series)]
    amz.infer_datasets(series[:20], [KERNEL])  # warm-up
    with Recorder() as short:
        amz.infer_datasets(series, [KERNEL])
    results["fleet"] = short
    write(args, corpus, results)


def write(args, corpus, results) -> None:
    real, short = results["real"], results["fleet"]
    per = {
        k: 1e6 * v / max(short.time["starts"], 1) for k, v in short.time.items() if k != "starts"
    }
    starts_per_pair = short.time["starts"] / max(len(short.rows), 1)
    lines = [
        "# Cheaper starts: would a screen keep the multi-start's winner?",
        "",
        f"Written by `benchmarks/bench_start_screening.py` (`nox -s \"benchmark(name='start_screening')\"`)"
        f" on {platform.machine()}, one thread, torch {torch.__version__}.",
        "",
        "The library's multi-start calibrates and scores every start exactly: a kernel matrix, its "
        "tridiagonal form and the search of the noise ratio, per start. A screen would rank the "
        "starts cheaply and score only its best `T` exactly. Loss: the best exact score of all "
        "starts less the best exact score among the screen's `T` (log marginal likelihood, "
        "normalised units; 0 where the screen keeps the winner).",
        "",
        "* **fixed ratio**: each start's likelihood at its own noise-to-signal ratio (the "
        "network's noise over a unit scale), the scale in closed form: one Cholesky "
        "factorisation per start, same points;",
        f"* **half the points**: each start calibrated and scored exactly on a seeded half of "
        f"the points (at least {HALF_MIN}).",
        "",
        f"Pairs: the {len(corpus)} `realdata-a` datasets (first 500 rows) x the 24 paper kernels "
        f"({len(real.rows)} pairs with two starts or more, on the multi-start's scoring points, at "
        f"most 256), and {args.series} synthetic series of 80 points with `SE + SE*PER` "
        "(`bench_many_datasets.py`'s fleet).",
        "",
        "The last column is the time of the starts with the screen against scoring every "
        "start exactly, at 80 points (the costs per start below; "
        f"{starts_per_pair:.1f} starts per pair).",
        "",
        "| data | screen | T | mean loss (nats) | pairs losing > 1 nat | > 5 nats "
        "| time of the starts |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, rec in (("real data", real), ("series of 80 points", short)):
        for screen, label in ((1, "fixed ratio"), (2, "half the points")):
            for top in TOPS:
                loss = losses(rec.rows, screen, top)
                cost = (starts_per_pair * per[label] + top * per["exact"]) / (
                    starts_per_pair * per["exact"]
                )
                lines.append(
                    f"| {name} | {label} | {top} | {loss.mean():.3f} | "
                    f"{int((loss > 1).sum())} of {len(loss)} | {int((loss > 5).sum())} | "
                    f"{cost:.2f} |"
                )
    lines += [
        "",
        "## Cost per start (series of 80 points, CPU time, one thread)",
        "",
        "| score | per start (us) | vs exact |",
        "|---|---:|---:|",
    ]
    for k in ("exact", "fixed ratio", "half the points"):
        lines.append(f"| {k} | {per[k]:.0f} | {per[k] / per['exact']:.2f} |")
    lines += [
        "",
        "A screen saves its cost difference on every start but scores its `T` best again "
        "exactly; each row above is the likelihood that saving costs. The library scores "
        "every start exactly.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
