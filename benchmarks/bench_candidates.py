"""Benchmark of candidate networks in a fleet: one batched forward per network and one
batched choice, against a forward per dataset, and the choice's criterion.

Data: ``--series`` (default 300) series of 80 points (a trend, a sine of period uniform in
1-4 on [0, 20], noise 0.2; seeded), the kernel ``SE + SE*PER``.  Networks: the campaign's
``small-d8-c376k`` with ``small-d8-c206k`` as its candidate (the pair
:mod:`amorgp.amortizer.networks.selection` describes), ``refine=0``, one start, one thread.

Reported, side by side in one run:

* ``infer_datasets`` process CPU time per series, every network one batched forward
  (the default) against one forward per dataset and network (``exact_network=True``),
  with and without the calibration, and the rows on which both give the same network;
* the criterion: the networks' predictions of every series, each row's choice by the
  likelihood as predicted and by the likelihood at the calibrated scale and noise
  (:func:`amorgp.amortizer.stages.pairs.best_prediction`), and the calibrated likelihood
  each choice ends with (what ``calibrate=True`` returns).

Writes ``docs/benchmarks/candidates.md``.

Usage: ``python benchmarks/bench_candidates.py [--series N] [--out PATH]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "SE + SE*PER"


def fleet(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        X = np.sort(rng.uniform(0, 20, 80))[:, None]
        period = rng.uniform(1, 4)
        y = 0.1 * X[:, 0] + np.sin(2 * np.pi * X[:, 0] / period) + 0.2 * rng.standard_normal(80)
        out.append((X, y))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "candidates.md")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.networks.forward import encode_structures
    from amorgp.amortizer.stages.pairs import best_prediction, evaluate_and_calibrate
    from amorgp.core.data import Normalizer

    amz = Amortizer.from_pretrained("small-d8-c376k", device="cpu", candidates=["small-d8-c206k"])
    data = fleet(args.series)
    amz.infer_datasets(data[:4], [KERNEL], refine=0, starts=1)  # warm-up

    rows = []
    for calibrate in (False, True):
        times: dict[bool, list[float]] = {False: [], True: []}
        names: dict[bool, list[str]] = {}
        for _ in range(args.rounds):  # interleaved
            for exact in (False, True):
                t = time.process_time()
                fits = amz.infer_datasets(
                    data, [KERNEL], refine=0, starts=1, calibrate=calibrate, exact_network=exact
                )
                times[exact].append(1e3 * (time.process_time() - t) / len(data))
                names[exact] = [f.results[0].network for f in fits]
        same = sum(a == b for a, b in zip(names[False], names[True], strict=True))
        batched, per = statistics.median(times[False]), statistics.median(times[True])
        rows.append(
            f"| {calibrate} | {batched:.2f} | {per:.2f} | {per / batched:.1f}x | "
            f"{same} of {len(data)} |"
        )

    # the criterion, on the networks' own predictions of every series
    structure = amz.structure(KERNEL, 1)
    norms = [Normalizer.fit(x, y) for x, y in data]  # the library's normalisation
    Xn = torch.stack([nm.transform_x(x) for nm, (x, _) in zip(norms, data, strict=True)])
    Yn = torch.stack([nm.transform_y(y) for nm, (_, y) in zip(norms, data, strict=True)])

    sym, msk = encode_structures([structure], amz.vocabulary, 1, torch.device("cpu"))
    preds = amz.network_predictions(Xn, Yn, sym, msk, exact=False)
    choice = {c: best_prediction(Xn, Yn, sym, msk, preds, amz.vocabulary, c) for c in (False, True)}
    lml = {}
    for c, (p, q, _) in choice.items():
        B = p.shape[0]
        cal = evaluate_and_calibrate(
            Xn, Yn, sym.expand(B, -1, -1), msk.expand(B, -1, -1), p[:, :1], q, amz.vocabulary
        )
        lml[c] = cal.log_marginal_likelihood
    differ = choice[False][2] != choice[True][2]
    gain = (lml[True] - lml[False])[differ]
    lower = int((lml[True] < lml[False] - 1e-9).sum())

    lines = [
        "# Candidate networks in a fleet",
        "",
        f"`benchmarks/bench_candidates.py`; {args.series} series of 80 points (`{KERNEL}`, a "
        "trend and a sine of period 1-4 on [0, 20], noise 0.2), `small-d8-c376k` with "
        "`small-d8-c206k` as its candidate, `refine=0`, one start; process CPU time, one "
        f"thread, torch {torch.__version__}, {platform.machine()} (2 cores shared with other "
        f"jobs); medians of {args.rounds} interleaved rounds.",
        "",
        "`infer_datasets`: every network one batched forward and every row's choice in one "
        "batch (the default), against a forward per dataset and network "
        "(`exact_network=True`, the forward of `infer_many`):",
        "",
        "| calibrate | batched: ms per series | per dataset: ms per series | per dataset / "
        "batched | rows choosing the same network |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "The choice's criterion, on the two networks' predictions of every series: by the "
        "likelihood as predicted, or at each prediction's calibrated scale and noise (what "
        "`calibrate=True`, the default, chooses by). The calibrated likelihood of each "
        "choice:",
        "",
        "| series | choices differ | calibrated choice higher: median gain (nats) | largest "
        "gain | calibrated choice lower |",
        "|---|---|---|---|---|",
        f"| {args.series} | {int(differ.sum())} | "
        f"{float(gain.median()) if gain.numel() else 0.0:.2f} | "
        f"{float(gain.max()) if gain.numel() else 0.0:.2f} | {lower} |",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
