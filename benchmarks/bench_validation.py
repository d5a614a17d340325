"""What does the padded-batch validation cost next to the kernel evaluation it guards?

One validation serves the batch (``PaddedBatch.validate``) and the batched evaluator
(``validate_dimwise``, run by ``kernel_matrix_dimwise(..., validate=True)``).  For random
padded batches of the paper's vocabulary (``B`` pairs, up to ``N`` points, up to 3
dimensions and 3 addends), each case is timed in turn, interleaved, and the median is
reported with its ratio to the peer: the evaluation itself, ``kernel_matrix_dimwise(X, X,
..., validate=False)``.  Writes ``docs/benchmarks/validation.md``.

Usage::

    python benchmarks/bench_validation.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from amorgp.amortizer.testing import random_padded_batch
from amorgp.kernel_grammar import PAPER_VOCABULARY
from amorgp.lazy_kernels import kernel_matrix_dimwise, validate_dimwise

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "validation.md"
SIZES = ((8, 50), (64, 200), (256, 100))


def _median_ms(fn: Callable[[], object], inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="3 repeats, the two smaller sizes")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    sizes = SIZES[:2] if args.quick else SIZES
    vocab = PAPER_VOCABULARY
    rows = []
    for B, N in sizes:
        g = torch.Generator().manual_seed(B * N)
        b = random_padded_batch(g, vocab, batch=B, n_max=N, d_max=3)
        X = torch.nan_to_num(b.X.double(), nan=0.0, posinf=0.0, neginf=0.0)  # finite padding
        params = 0.5 + torch.rand((*b.symbols.shape, vocab.max_params), generator=g)
        params = params.double()
        noise = torch.full((B,), 0.1, dtype=torch.float64)
        batch = b.with_params(params, noise).to(dtype=torch.float64)
        args_ = (X, X, b.symbols, b.symbol_mask, params, vocab, b.dim_mask)
        cases: dict[str, Callable[[], object]] = {
            "peer: kernel_matrix_dimwise(validate=False)": partial(
                kernel_matrix_dimwise, *args_, validate=False
            ),
            "kernel_matrix_dimwise(validate=True)": partial(kernel_matrix_dimwise, *args_),
            "validate_dimwise": partial(validate_dimwise, *args_),
            "PaddedBatch.validate": batch.validate,
        }
        inner = {name: 3 if "kernel_matrix" in name else 50 for name in cases}
        for fn in cases.values():  # warm-up
            _median_ms(fn, 2)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeats):  # interleaved: load changes hit every case alike
            for name, fn in cases.items():
                times[name].append(_median_ms(fn, inner[name]))
        med = {name: statistics.median(v) for name, v in times.items()}
        peer = med["peer: kernel_matrix_dimwise(validate=False)"]
        for name in cases:
            rows.append(f"| {B} x {N} | {name} | {med[name]:.3f} | {med[name] / peer:.3f} |")
    lines = [
        "# Padded-batch validation",
        "",
        f"Median of {repeats} interleaved rounds per case, float64 on the CPU, one torch "
        f"thread; machine: {platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}. Written by `benchmarks/bench_validation.py` "
        "(`nox -s \"benchmark(name='validation')\"`).",
        "",
        "Batches of the paper's vocabulary, `B` pairs x up to `N` points, up to 3 dimensions "
        "and 3 addends. The ratio is to the peer row, the kernel evaluation without checks.",
        "",
        "| B x N | case | median (ms) | / peer |",
        "|---|---|---|---|",
        *rows,
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
