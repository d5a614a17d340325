"""Benchmark of amorgp.amortizer: forward latency, training throughput, CPU-efficiency ideas.

Writes ``docs/benchmarks/amortizer.md``:

1. Forward latency for one dataset (n = 250 and 500, d = 1..8, structure ``SE + PER``
   in every dimension), per preset, next to the named peer: a Type-2 ML fit of the
   same kernel on the same data (``amorgp.baselines.fit_type2ml_batch``, the paper's
   GP-ML: Adam, lr 0.1, <= 150 steps, float64).
2. Training throughput (datasets/s) of one optimiser step (forward, float64 loss,
   backward, RAdam) per preset, and of the simulator that feeds it.
3. CPU efficiency: the ``small`` preset trained for the same wall-clock budget with
   the encoder reading all points vs a random subset, compared on validation NLL.

Usage: ``python benchmarks/bench_amortizer.py [--quick] [--minutes M] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from amorgp.amortizer import PRESETS, TrainConfig, build_model, count_parameters
from amorgp.kernel_grammar import Vocabulary
from amorgp.simulator import Simulator
from amorgp.training import simulator_config, train, training_loss

ROOT = Path(__file__).resolve().parents[1]


def _stats(fn: Callable[[], object], reps: int, warmup: int = 1) -> tuple[float, float, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), q[0], q[2]


def _fmt(m: float, lo: float, hi: float, unit: float = 1e3) -> str:
    return f"{m * unit:.1f} [{lo * unit:.1f}, {hi * unit:.1f}]"


def _dataset(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.sin(6.0 * X).sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, (y - y.mean()) / y.std()


def latency(presets: list[str], dims: list[int], reps: int, peer_dims: list[int]) -> list[str]:
    vocab = PRESETS["small"].network.vocabulary
    se, per = vocab.id("SE"), vocab.id("PER")
    lines = [
        "## Forward latency, one dataset (ms: median [25 %, 75 %])",
        "",
        "Structure `SE + PER` in every dimension; float32 network, eval mode, `torch.no_grad`.",
        "Peers: one Type-2 ML step (log marginal likelihood and its gradient for the same kernel",
        "on the same data, float64: `kernel_matrix_dimwise` + `gp_log_marginal_likelihood`), and a",
        "whole Type-2 ML fit (paper GP-ML: Adam lr 0.1, at most 150 steps, float64,",
        "`amorgp.baselines.fit_type2ml_batch`; one run, n = 250 only, as it is slow).",
        "",
    ]
    header = (
        "| n | d | "
        + " | ".join(presets)
        + f" | one Type-2 ML step | step / {presets[0]} | Type-2 ML fit | fit / {presets[0]} |"
    )
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    models = {}
    for name in presets:
        torch.manual_seed(0)
        models[name] = build_model(PRESETS[name].network).eval()
    for n in (250, 500):
        for d in dims:
            X, y = _dataset(n, d, seed=n + d)
            inputs = {
                "X": X[None].float(),
                "y": y[None].float(),
                "point_mask": torch.ones(1, n, dtype=torch.bool),
                "dim_mask": torch.ones(1, d, dtype=torch.bool),
                "symbols": torch.tensor([[[se, per]] * d]),
                "symbol_mask": torch.ones(1, d, 2, dtype=torch.bool),
            }
            cells = []
            first = math.nan
            for name in presets:
                with torch.no_grad():
                    m, lo, hi = _stats(functools.partial(models[name], **inputs), reps)
                cells.append(_fmt(m, lo, hi))
                if name == presets[0]:
                    first = m
            sm, slo, shi = _stats(_lml_step(X, y, se, per, vocab), reps)
            step_cell = _fmt(sm, slo, shi)
            peer, ratio = "–", "–"
            if n == 250 and d in peer_dims:
                fit = _type2ml(X, y, d)
                if fit is not None:
                    pm, plo, phi = _stats(fit, max(1, reps // 2), warmup=0)
                    peer, ratio = _fmt(pm, plo, phi), f"{pm / first:.0f}x"
            lines.append(
                f"| {n} | {d} | "
                + " | ".join(cells)
                + f" | {step_cell} | {sm / first:.2f} | {peer} | {ratio} |"
            )
            print(lines[-1], flush=True)
    return lines


def _lml_step(
    X: torch.Tensor, y: torch.Tensor, se: int, per: int, vocab: Vocabulary
) -> Callable[[], object]:
    from amorgp.diff_linalg import gp_log_marginal_likelihood
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    d = X.shape[1]
    symbols = torch.tensor([[[se, per]] * d])
    mask = torch.ones(1, d, 2, dtype=torch.bool)
    raw = torch.zeros(1, d, 2, vocab.max_params, dtype=torch.float64, requires_grad=True)

    def step() -> None:
        params = torch.nn.functional.softplus(raw) + 0.1
        K = kernel_matrix_dimwise(X[None], X[None], symbols, mask, params, vocab)
        lml = gp_log_marginal_likelihood(K, y[None], torch.tensor([0.05], dtype=torch.float64))
        assert isinstance(lml, torch.Tensor)
        lml.sum().backward()

    return step


def _type2ml(X: torch.Tensor, y: torch.Tensor, d: int) -> Callable[[], object] | None:
    try:
        from amorgp.baselines.type2ml import fit_type2ml_batch
        from amorgp.kernel_grammar import DimWiseStructure
        from amorgp.lazy_kernels import PaddedBatch
    except ImportError:
        return None
    batch = PaddedBatch.from_datasets([(X, y)], [DimWiseStructure.parse("SE + PER", d)])
    return lambda: fit_type2ml_batch(batch)


def _rate(count: int, times: list[float]) -> str:
    times = sorted(times)
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return f"{count / statistics.median(times):.1f} [{count / q[2]:.1f}, {count / q[0]:.1f}]"


def throughput(presets: list[str], batch_size: int, steps: int) -> list[str]:
    lines = [
        "## Training throughput (datasets/s, median [25 %, 75 %])",
        "",
        f"One optimiser step on a simulated batch of {batch_size} datasets (n ~ U{{10..100}}, d <= 4,",
        "paper structure prior, positive and negative pairs): forward (float32), per-point NLL",
        "(float64, batched evaluator + Cholesky), backward, RAdam.  `simulator` is the cost of",
        "drawing the same batch (done by DataLoader workers in parallel with training).",
        "Rows are measured interleaved (each repetition runs every row once), so changes of the",
        "machine's load affect all rows alike.",
        "",
        "| preset | parameters | train step (datasets/s) | simulator (datasets/s) |",
        "|---|---|---|---|",
    ]
    base_tc = TrainConfig(batch_size=batch_size, n_max=100, max_dims=4, encoder_points=0)
    rows: list[tuple[str, TrainConfig]] = [(name, base_tc) for name in presets]
    rows += [
        ("small + 4 size buckets (exact)", dataclasses.replace(base_tc, size_buckets=4)),
        ("small + random 48 points", dataclasses.replace(base_tc, encoder_points=48)),
    ]
    setups = []
    for label, tc in rows:
        name = label.split(" ")[0]
        net = PRESETS[name].network
        sim = Simulator(simulator_config(net, tc))
        g = torch.Generator().manual_seed(0)
        batches = [sim.sample(batch_size, g) for _ in range(steps + 1)]  # same data per row
        torch.manual_seed(0)
        model = build_model(net)
        opt = torch.optim.RAdam(model.parameters(), lr=1e-5)
        setups.append((label, sim, model, opt, batches, tc, net.vocabulary))
    # interleaved: repetition r runs every row once, so load changes hit all rows alike
    step_times: list[list[float]] = [[] for _ in setups]
    sim_times: list[list[float]] = [[] for _ in setups]
    for rep in range(steps + 1):
        for i, (_, sim, model, opt, batches, tc, vocab) in enumerate(setups):
            t = time.perf_counter()
            out = training_loss(model, batches[rep], vocab, tc, torch.Generator().manual_seed(0))
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            t1 = time.perf_counter()
            sim.sample(batch_size, torch.Generator().manual_seed(rep))
            t2 = time.perf_counter()
            if rep > 0:  # the first repetition is a warm-up
                step_times[i].append(t1 - t)
                sim_times[i].append(t2 - t1)
    for (label, _, model, *_rest), st, sm in zip(setups, step_times, sim_times):
        lines.append(
            f"| {label} | {count_parameters(model):,d} | {_rate(batch_size, st)} | {_rate(batch_size, sm)} |"
        )
        print(lines[-1], flush=True)
    return lines


def efficiency(minutes: float) -> list[str]:
    lines = [
        "## CPU efficiency: what the encoder reads (small preset, equal wall-clock budget)",
        "",
        f"Each variant trains the `small` preset for {minutes:g} min from the same initialisation",
        "and data stream (one DataLoader worker), then is evaluated on the same fixed validation",
        "set (the run directory's `validation/`, 128 simulated datasets).  The loss always uses every point.",
        "",
        "| variant | steps | datasets | datasets/s | val NLL | val NLL (positives) | NLL at ground truth | noise RMSE (std) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = PRESETS["small"]
    with tempfile.TemporaryDirectory() as tmp:
        val_dir = None
        variants: tuple[tuple[str, dict[str, int]], ...] = (
            ("all points", {"encoder_points": 0}),
            ("random 48 points", {"encoder_points": 48}),
            ("random 24 points", {"encoder_points": 24}),
        )
        for i, (label, change) in enumerate(variants):
            tc = dataclasses.replace(base.train, val_every=10_000, **change)
            out = Path(tmp) / f"run{i}"
            if val_dir is not None:  # identical validation set for every variant
                import shutil

                shutil.copytree(val_dir, out / "validation")
            res = train(out, base.network, tc, max_minutes=minutes, progress=False)
            val_dir = val_dir or out / "validation"
            v = res.validation
            lines.append(
                f"| {label} | {res.step} | {res.datasets_seen} | {res.datasets_seen / (minutes * 60):.1f} | "
                f"{v['nll']:.3f} | {v['nll_positive']:.3f} | {v['nll_true']:.3f} | {v['noise_rmse_std']:.3f} |"
            )
            print(lines[-1], flush=True)
    return lines


_TITLES = {
    "latency": "## Forward latency",
    "throughput": "## Training throughput",
    "efficiency": "## CPU efficiency",
}


def _merge(path: Path, sections: dict[str, list[str]]) -> list[str]:
    """New sections, in report order, with sections not re-run taken from ``path``."""
    old: dict[str, list[str]] = {}
    if path.exists():
        current: list[str] | None = None
        for line in path.read_text().splitlines():
            key = next((k for k, t in _TITLES.items() if line.startswith(t)), None)
            if key is not None:
                current = old.setdefault(key, [])
            elif line.startswith("## "):
                current = None
            if current is not None:
                current.append(line)
    body: list[str] = []
    for key in _TITLES:
        block = sections.get(key) or old.get(key)
        if block:
            while block and not block[-1].strip():
                block = block[:-1]
            body += [*block, ""]
    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--minutes", type=float, default=None, help="budget per efficiency variant")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "amortizer.md")
    parser.add_argument("--skip-efficiency", action="store_true")
    parser.add_argument(
        "--sections",
        default="latency,throughput,efficiency",
        help="comma-separated subset to run; the other sections of an existing report are kept",
    )
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    quick = args.quick
    dims = [1, 4, 8] if quick else list(range(1, 9))
    presets = ["small", "medium"] if quick else ["small", "medium", "paper"]
    minutes = args.minutes if args.minutes is not None else (1.0 if quick else 6.0)
    head = [
        "# amorgp.amortizer benchmarks",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, CPU only.  The CPU cores were shared with other jobs while this ran",
        f"(1-minute load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when the report was",
        "written), so absolute numbers are noisy and pessimistic, by up to an order of magnitude;",
        "rows measured side by side are the meaningful part.  Regenerate with",
        "`python benchmarks/bench_amortizer.py` (`--quick` for a short run).",
        "",
    ]
    wanted = set(args.sections.split(","))
    if args.skip_efficiency:
        wanted.discard("efficiency")
    sections: dict[str, list[str]] = {}
    if "latency" in wanted:
        sections["latency"] = latency(
            presets, dims, reps=3 if quick else 5, peer_dims=[1] if quick else [1, 4]
        )
    if "throughput" in wanted:
        sections["throughput"] = throughput(presets, batch_size=16, steps=3 if quick else 5)
    if "efficiency" in wanted:
        sections["efficiency"] = efficiency(minutes)
    body = _merge(args.out, sections)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(head + body) + "\n")
    tmp.replace(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
