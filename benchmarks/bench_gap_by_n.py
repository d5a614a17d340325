"""Benchmark of the network's gap to the optimum as the data grow.

Data (seeded): two regression functions of the project's benchmarks, at ``n = 50, 200,
500, 2000`` training points, ``--seeds`` each (default 3):

* **six-inputs** (``benchmarks/bench_refine_stop.py``): two strong inputs, two weak, two
  irrelevant, noise 0.1;
* **friedman8**: Friedman #1 with 8 inputs (3 irrelevant), noise 1.

Kernel ``SE`` (one lengthscale per input). Per cell, side by side in one run, one thread:
the network's answer (one start, calibrated, ``refine=0``) and the default fit
(``refine=None``: the multi-start, then Fisher scoring to the optimum; above 2000 points
it would be skipped, here it is not). Reported: the median gap of the network's log
marginal likelihood below the default fit's, in nats and in nats per point, and the
points the encoder read.  With ``--checkpoint PATH`` (repeatable) each further network's
answer is measured on the same data against the same default fit (the bundled default's).

Writes ``docs/benchmarks/gap-by-n.md``.

Usage: ``python benchmarks/bench_gap_by_n.py [--seeds N] [--checkpoint PATH]...``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
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
OUT = ROOT / "docs" / "benchmarks" / "gap-by-n.md"
SIZES = (50, 200, 500, 2000)


def six_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = rng.uniform(0.0, 1.0, (n, 6))
    f = np.sin(6 * X[:, 0]) + np.cos(4 * X[:, 1]) + 0.3 * np.sin(3 * X[:, 2]) + 0.2 * X[:, 3]
    return X, f + 0.1 * rng.standard_normal(n)


def friedman8(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = rng.uniform(0.0, 1.0, (n, 8))
    f = (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
    )
    return X, f + rng.standard_normal(n)


TASKS = {"six-inputs": six_inputs, "friedman8": friedman8}


def run(seeds: int, checkpoints: list[str] | None = None) -> dict[str, Any]:
    amz = Amortizer.from_pretrained()
    nets = {"default": amz} | {
        Path(c).name: Amortizer.from_pretrained(c) for c in checkpoints or []
    }
    rows: dict[str, dict[str, dict[int, dict[str, float]]]] = {k: {} for k in nets}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, task in TASKS.items():
            for label in nets:
                rows[label][name] = {}
            for n in SIZES:
                data = [task(n, np.random.default_rng(seed)) for seed in range(seeds)]
                opts = [
                    amz.infer(X, y, "SE", refine="auto").log_marginal_likelihood for X, y in data
                ]
                for label, net_amz in nets.items():
                    gaps, per_point, read = [], [], []
                    for (X, y), best in zip(data, opts, strict=True):
                        net = net_amz.infer(X, y, "SE", starts=1, refine=0)
                        gap = best - net.log_marginal_likelihood
                        gaps.append(gap)
                        per_point.append(gap / n)
                        read.append(net.encoder_points)
                    rows[label][name][n] = {
                        "gap": statistics.median(gaps),
                        "per_point": statistics.median(per_point),
                        "read": statistics.median(read),
                    }
                    print(label, name, n, rows[label][name][n], flush=True)
    return {"seeds": seeds, "rows": rows}


def report(res: dict[str, Any]) -> str:
    lines = [
        "# The network's gap to the optimum by the number of points",
        "",
        "`benchmarks/bench_gap_by_n.py`; kernel `SE` (ARD), medians over "
        f"{res['seeds']} seeds, one thread, torch {torch.__version__}, {platform.machine()}. "
        "Gap: the default fit's log marginal likelihood (normalised targets; the multi-start "
        "refined to the optimum, `refine=\"auto\"`) minus the network's answer's (one start, "
        "calibrated, `refine=0`). Read: the points the dataset encoder read.",
        "",
        "| network | task | n | points read | gap (nats) | gap per point (nats) |",
        "|---|---|---|---|---|---|",
    ]
    for label, by_task in res["rows"].items():
        for name, by_n in by_task.items():
            for n, v in by_n.items():
                lines.append(
                    f"| {label} | {name} | {n} | {v['read']:.0f} | {v['gap']:.1f} | "
                    f"{v['per_point']:.3f} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--checkpoint", action="append", help="a further network to measure (repeatable)"
    )
    a = ap.parse_args()
    res = run(a.seeds, a.checkpoint)
    a.out.write_text(report(res))
    print(report(res))


if __name__ == "__main__":
    main()
