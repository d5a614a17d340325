"""Benchmark of amorgp.kernel_grammar: the cost of turning kernel text into network input.

Measures, with medians and interquartile ranges over repeats:

* parsing + conversion to ``DimWiseStructure`` (per structure),
* ``encode`` / ``decode`` of a batch of ``B`` random structures (the padded
  ``(B, D, L)`` integer form the simulator and the network consume),
* the named peer, run side by side on the same structures: building the
  equivalent GPyTorch kernel modules (``ScaleKernel``/``RBFKernel``/``LinearKernel``/
  ``PeriodicKernel`` with ``active_dims``, summed and multiplied), i.e. representing
  the batch as objects instead of integers.  Skipped if GPyTorch is missing.

Writes ``docs/benchmarks/kernel-grammar.md``.  ``--quick`` uses fewer repeats and sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from amorgp.kernel_grammar import (
    PAPER_VOCABULARY,
    DimWiseStructure,
    base_symbol,
    decode,
    encode,
    paper_evaluation_set,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "kernel-grammar.md"


def random_structures(
    rng: np.random.Generator, B: int, max_dims: int = 8
) -> list[DimWiseStructure]:
    """Paper prior on structures: d ~ Geometric(0.25) clipped to 8, addends ~ Geometric(0.6)."""
    out = []
    for _ in range(B):
        d = min(int(rng.geometric(0.25)), max_dims)
        dims = []
        for _ in range(d):
            L = min(int(rng.geometric(0.6)), 6)
            dims.append(tuple(rng.choice(PAPER_VOCABULARY.symbols, size=L)))
        out.append(DimWiseStructure(tuple(dims)))
    return out


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median and IQR of wall times in seconds (one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return statistics.median(times), q[2] - q[0]


def gpytorch_kernels(structures: list[DimWiseStructure]) -> list[Any]:
    """The peer: one GPyTorch kernel module per structure."""
    from gpytorch import kernels as gk

    def elementary(name: str, d: int) -> Any:
        cls = {"SE": gk.RBFKernel, "LIN": gk.LinearKernel, "PER": gk.PeriodicKernel}[name]
        return cls(active_dims=(d,))

    out = []
    for s in structures:
        prod = None
        for d, addends in enumerate(s.dims):
            total = None
            for name in addends:
                factors = [elementary(f, d) for f in base_symbol(name).factors]
                k = factors[0] if len(factors) == 1 else gk.ProductKernel(*factors)
                k = gk.ScaleKernel(k)
                total = k if total is None else total + k
            prod = total if prod is None else prod * total
        out.append(prod)
    return out


def fmt(median: float, iqr: float, unit: float, digits: int = 1) -> str:
    return f"{median / unit:.{digits}f} ± {iqr / unit:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and smaller batches")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    repeats = 5 if args.quick else 15
    batches = [128] if args.quick else [128, 1024]
    rng = np.random.default_rng(0)

    try:
        import gpytorch  # noqa: F401

        have_peer = True
    except ImportError:
        have_peer = False

    lines = [
        "# kernel-grammar benchmark",
        "",
        f"Command: `python benchmarks/bench_kernel_grammar.py{' --quick' if args.quick else ''}`; "
        f"median ± IQR over {repeats} repeats; CPU, single process; Python "
        f"{sys.version.split()[0]}, numpy {np.__version__}.",
        "",
        "## Parsing",
        "",
        "| input | structures | per structure (µs) |",
        "|---|---|---|",
    ]
    texts = [str(t) for t in paper_evaluation_set(0)]
    m, q = timed(lambda: [DimWiseStructure.parse(t, 3) for t in texts], repeats)
    lines.append(
        f"| 24 paper evaluation structures, same in D=3 dims | {len(texts)} | "
        f"{fmt(m / len(texts), q / len(texts), 1e-6)} |"
    )
    indexed = [str(s) for s in random_structures(rng, 128)]
    m, q = timed(lambda: [DimWiseStructure.parse(t) for t in indexed], repeats)
    lines.append(
        f"| 128 prior samples, per-dimension text (`(..)@0 * (..)@1 ...`) | {len(indexed)} | "
        f"{fmt(m / len(indexed), q / len(indexed), 1e-6)} |"
    )

    lines += [
        "",
        "## A batch of structures: integer encoding vs GPyTorch kernel modules",
        "",
        "Structures drawn from the paper's prior (d ~ Geometric(0.25) clipped to 8, "
        "addends ~ Geometric(0.6), paper vocabulary).",
        "",
        "| B | encode (ms) | decode (ms) | GPyTorch modules (ms) | GPyTorch / encode |",
        "|---|---|---|---|---|",
    ]
    for B in batches:
        batch = random_structures(rng, B)
        me, qe = timed(lambda batch=batch: encode(batch, PAPER_VOCABULARY), repeats)
        sym, mask = encode(batch, PAPER_VOCABULARY)
        md, qd = timed(lambda sym=sym, mask=mask: decode(sym, mask, PAPER_VOCABULARY), repeats)
        if have_peer:
            mp, qp = timed(lambda batch=batch: gpytorch_kernels(batch), max(3, repeats // 3))
            peer, ratio = fmt(mp, qp, 1e-3), f"{mp / me:.0f}×"
        else:
            peer, ratio = "not installed", "–"
        lines.append(
            f"| {B} | {fmt(me, qe, 1e-3, 2)} | {fmt(md, qd, 1e-3, 2)} | {peer} | {ratio} |"
        )
        print(lines[-1], flush=True)
    lines += [
        "",
        "The integer encoding is what the simulator and the network consume; the GPyTorch "
        "column is the cost of representing the same batch as kernel modules. Timings come "
        "from a shared machine, so spreads are wide; compare medians.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
