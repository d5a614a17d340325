"""Benchmark of the network's periods: does the forward pass read the period, and how
many exact scorings does the multi-start still need?

Data: ``--series`` (default 300) trend + sine series, 60 points uniform on [0, 4], the
period uniform in 0.3-1.5, ``y = 0.5 x + sin(2 pi x / p) + 0.2 eps`` (seeded), and the
kernels ``SE + PER`` and ``SE + SE*PER``.

Networks, side by side in one run, one thread: the bundled default and a network with
period tokens (``--checkpoint``, default: the default converted by
:func:`amorgp.training.vocabulary.add_period_tokens`, untrained correction).

Reported per network and kernel:

* the network's own period (``calibrate=False, starts=1, refine=0``): the share within
  5 % of the truth and the median relative error;
* the amortized answer with 1, 2, 3, 4 and 8 (the default) starts (``refine=0``): the median
  log marginal likelihood below the best any configuration reached on the series, the
  share within 1 nat of it, and the exact scorings per series (``starts``; one per
  start and kernel);
* the period of the default fit (``refine=None``) within 5 %.

Writes ``docs/benchmarks/period-tokens.md``.

Usage: ``python benchmarks/bench_period_tokens.py [--series N] [--checkpoint DIR]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer import Amortizer

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "period-tokens.md"
KERNELS = ("SE + PER", "SE + SE*PER")
STARTS = (1, 2, 3, 4, 8)


def series(count: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """``count`` (x (60, 1), y (60,), period) trend + sine series."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        x = torch.sort(4.0 * torch.rand(60, generator=g, dtype=torch.float64)).values
        p = 0.3 + 1.2 * float(torch.rand(1, generator=g, dtype=torch.float64))
        y = (
            0.5 * x
            + torch.sin(2 * math.pi * x / p)
            + 0.2 * torch.randn(60, generator=g, dtype=torch.float64)
        )
        out.append((x[:, None], y, p))
    return out


def period_of(result: Any) -> float:
    """The period of the result's first periodic addend, in the units of ``x``."""
    for (_, _, name), value in result.hyperparameters_original.items():
        if name.endswith("period"):
            return float(value)
    raise ValueError("no period")


def period_token_network() -> Path:
    """The default with period tokens (untrained correction), in a temporary folder."""
    from amorgp.amortizer.networks.checkpoint import save_checkpoint
    from amorgp.training.vocabulary import add_period_tokens

    amz = Amortizer.from_pretrained()
    model, cfg = add_period_tokens(amz.model, amz.network)
    out = Path(tempfile.mkdtemp()) / "period-tokens"
    save_checkpoint(out, model, cfg, meta={"note": "the default with period tokens"})
    return out


def run(count: int, checkpoint: str | None) -> dict[str, Any]:
    data = series(count)
    nets = {"default": "default", "period tokens": checkpoint or str(period_token_network())}
    res: dict[str, Any] = {"series": count, "networks": {}}
    best: dict[tuple[str, int], float] = {}
    for name, ckpt in nets.items():
        amz = Amortizer.from_pretrained(ckpt)
        per: dict[str, Any] = {}
        for kernel in KERNELS:
            own, lmls, cpu, dflt = [], {s: [] for s in STARTS}, {s: 0.0 for s in STARTS}, []
            for i, (x, y, p) in enumerate(data):
                r = amz.infer(x, y, kernel, calibrate=False, starts=1, refine=0)
                own.append(abs(period_of(r) / p - 1.0))
                for s in STARTS:
                    t0 = time.process_time()
                    r = amz.infer(x, y, kernel, starts=s, refine=0)
                    cpu[s] += time.process_time() - t0
                    lmls[s].append(float(r.log_marginal_likelihood))
                    key = (kernel, i)
                    best[key] = max(best.get(key, -math.inf), lmls[s][-1])
                r = amz.infer(x, y, kernel)
                dflt.append(abs(period_of(r) / p - 1.0))
                best[(kernel, i)] = max(best[(kernel, i)], float(r.log_marginal_likelihood))
            per[kernel] = {"own": own, "lml": lmls, "cpu": cpu, "default": dflt}
        res["networks"][name] = per
    for per in res["networks"].values():
        for kernel, v in per.items():
            gaps = {
                s: [best[(kernel, i)] - lml for i, lml in enumerate(v["lml"][s])] for s in STARTS
            }
            v["summary"] = {
                "own_within_5pct": sum(e <= 0.05 for e in v["own"]) / count,
                "own_median_err": statistics.median(v["own"]),
                "default_within_5pct": sum(e <= 0.05 for e in v["default"]) / count,
                "starts": {
                    s: {
                        "median_gap": statistics.median(gaps[s]),
                        "within_1nat": sum(g <= 1.0 for g in gaps[s]) / count,
                        "cpu_ms": 1e3 * v["cpu"][s] / count,
                    }
                    for s in STARTS
                },
            }
    return res


def report(res: dict[str, Any]) -> str:
    lines = [
        "# The network's periods (period tokens)",
        "",
        f"`benchmarks/bench_period_tokens.py`; {res['series']} trend + sine series (60 points "
        "uniform on [0, 4], period uniform in 0.3-1.5, noise 0.2), one thread, torch "
        f"{torch.__version__}, {platform.machine()} (2 cores, shared with other jobs), both "
        "networks side by side in one run. Own period: the network's prediction alone "
        "(`calibrate=False, starts=1, refine=0`). Gap: nats below the best log marginal "
        "likelihood any configuration of either network reached on the series (the "
        "default fits included). Scorings: exact log marginal likelihoods per series "
        "(one per start). CPU: process time per `infer` call.",
        "",
        "| network | kernel | own period within 5 % | own median error | default fit's "
        "period within 5 % |",
        "|---|---|---|---|---|",
    ]
    for name, per in res["networks"].items():
        for kernel, v in per.items():
            s = v["summary"]
            lines.append(
                f"| {name} | `{kernel}` | {100 * s['own_within_5pct']:.0f} % | "
                f"{100 * s['own_median_err']:.1f} % | {100 * s['default_within_5pct']:.0f} % |"
            )
    lines += [
        "",
        "The amortized answer (`refine=0`) by the number of starts:",
        "",
        "| network | kernel | starts (scorings) | median gap (nats) | within 1 nat | CPU (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for name, per in res["networks"].items():
        for kernel, v in per.items():
            for st, s in v["summary"]["starts"].items():
                lines.append(
                    f"| {name} | `{kernel}` | {st} | {s['median_gap']:.2f} | "
                    f"{100 * s['within_1nat']:.0f} % | {s['cpu_ms']:.1f} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--series", type=int, default=300)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    res = run(a.series, a.checkpoint)
    if a.json:
        a.json.write_text(json.dumps(res, default=str))
    a.out.write_text(report(res))
    print(report(res))


if __name__ == "__main__":
    main()
