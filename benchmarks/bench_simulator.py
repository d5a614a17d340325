"""Benchmark of amorgp.simulator: simulated datasets per second for the paper preset.

Measures, with medians and interquartile ranges over repeats, on this machine:

* ``Simulator.sample`` end to end for the paper preset (batch 128 by default),
  in datasets per second and seconds per batch;
* a per-stage breakdown of one batch (sizes and inputs, structures and
  negatives, parameters and noise, kernel matrices, Cholesky, ``y = L z``),
  timed by running the simulator's public stage methods one after another;
* the named peer, run side by side on the *same* datasets (same X, structures,
  parameters, noise): a naive per-dataset Python loop that builds each
  covariance with kernel-grammar's numpy reference formulas and draws
  ``y ~ numpy.random.Generator.multivariate_normal(0, K + sigma^2 I)`` (its
  default SVD method), plus the loop with ``method="cholesky"``.

Writes ``docs/benchmarks/simulator.md``.  ``--quick`` uses fewer repeats and a
smaller batch.  Simulation cost relative to a training step of the small network
preset is to be filled in by the amortizer benchmark (which owns that step); the
seconds per batch reported here are the numerator.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from amorgp.diff_linalg import robust_cholesky
from amorgp.kernel_grammar import Vocabulary
from amorgp.simulator import (
    SimulatedBatch,
    Simulator,
    SimulatorConfig,
    sample_negative_structures,
    sample_noise,
    sample_parameters,
    sample_structures,
)
from amorgp.simulator.testing import dense_covariance, structure_of

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "simulator.md"


def stats(times: list[float]) -> tuple[float, float, float]:
    """Median, first and third quartile."""
    if len(times) == 1:
        return times[0], times[0], times[0]
    q = statistics.quantiles(times, n=4, method="inclusive")
    return statistics.median(times), q[0], q[2]


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def staged(sim: Simulator, batch_size: int, seed: int) -> dict[str, float]:
    """Wall time of each stage of one batch, mirroring ``Simulator.sample``."""
    cfg = sim.config
    g = torch.Generator().manual_seed(seed)
    t: dict[str, float] = {}
    t0 = time.perf_counter()
    n, d = sim.sample_sizes(batch_size, g)
    want = torch.rand((batch_size,), generator=g, dtype=torch.float64) < cfg.positive_ratio
    inputs = sim.sample_inputs(n, d, g)
    t["sizes and inputs"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    truth, mask = sample_structures(d, cfg, g, max_dims=inputs.dim_mask.shape[1])
    sample_negative_structures(truth, d, want, cfg, g)
    t["structures and negatives"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    params, _ = sample_parameters(truth, mask, sim.prior_table, g)
    noise = sample_noise(batch_size, g)
    t["parameters and noise"] = time.perf_counter() - t0
    t["kernel matrices"] = t["Cholesky"] = t["y = L z"] = 0.0
    z = torch.randn(inputs.mask_all.shape, generator=g, dtype=torch.float64)
    N, M = inputs.n_train, inputs.mask_all.shape[1]
    for idx, width in sim.size_groups(n):
        cols = torch.cat([torch.arange(width), torch.arange(N, M)])
        sub = type(inputs)(
            inputs.X_all[idx][:, cols], inputs.mask_all[idx][:, cols], inputs.dim_mask[idx], width
        )
        t0 = time.perf_counter()
        cov = sim.covariance(sub, truth[idx], mask[idx], params[idx], noise[idx])
        t["kernel matrices"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        chol = robust_cholesky(cov, jitter=cfg.jitter, max_tries=cfg.max_tries)
        t["Cholesky"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        zz = torch.where(sub.mask_all, z[idx][:, cols], 0.0)
        (chol.L @ zz[..., None]).squeeze(-1)
        t["y = L z"] += time.perf_counter() - t0
    return t


def naive_loop(
    batch: SimulatedBatch,
    vocab: Vocabulary,
    method: Literal["svd", "eigh", "cholesky"],
    seed: int,
) -> None:
    """The peer: one dataset at a time, numpy reference kernels + multivariate_normal."""
    rng = np.random.default_rng(seed)
    X_all = batch.X.numpy()
    for b in range(len(batch)):
        n, d = int(batch.point_mask[b].sum()), int(batch.dim_mask[b].sum())
        K = dense_covariance(
            X_all[b, :n, :d],
            structure_of(batch.true_symbols, batch.params, b, vocab),
            float(batch.noise[b]),
        )
        rng.multivariate_normal(np.zeros(n), K, method=method)


def _figure(
    path: Path,
    names: list[str],
    stage_runs: list[dict[str, float]],
    B: int,
    ours: list[float],
    naive_svd: list[float],
    naive_chol: list[float],
) -> bool:
    """Stage breakdown and throughput bars; False (no figure) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    meds = [statistics.median([r[k] for r in stage_runs]) for k in names]
    a.barh(names[::-1], meds[::-1])
    a.set_xlabel("seconds per batch (median)")
    a.set_title(f"stages, paper preset, batch {B}")
    labels = ["amorgp.simulator", "numpy loop\n(SVD)", "numpy loop\n(Cholesky)"]
    rates = [B / statistics.median(t) for t in (ours, naive_svd, naive_chol)]
    b.bar(labels, rates)
    b.set_ylabel("datasets per second")
    b.set_title("same datasets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def training_step_share(repeats: int) -> list[str]:
    """Simulation vs one training step of the amortizer's ``small`` preset, same batch size.

    Optional: skipped (with a note) when ``amorgp.amortizer`` is not installed.
    """
    try:
        from amorgp.amortizer import PRESETS, build_model
        from amorgp.training import simulator_config, training_loss
    except ImportError:
        return ["`amorgp.amortizer` is not installed: the training-step comparison is skipped.", ""]
    preset = PRESETS["small"]
    cfg = simulator_config(preset.network, preset.train)
    B = preset.train.batch_size
    sim = Simulator(cfg)
    torch.manual_seed(0)  # model initialisation only; data use explicit generators
    model = build_model(preset.network)
    opt = torch.optim.RAdam(model.parameters(), lr=preset.train.lr)
    batch = sim.sample(B, torch.Generator().manual_seed(5))

    def step() -> None:
        opt.zero_grad()
        out = training_loss(model, batch, preset.network.vocabulary, preset.train)
        out.loss.backward()
        opt.step()

    seeds = iter(range(10_000))
    t_sim = timed(lambda: sim.sample(B, torch.Generator().manual_seed(next(seeds))), repeats)
    t_step = timed(step, repeats)
    ms, a, c = stats(t_sim)
    mt, a2, c2 = stats(t_step)
    return [
        f"Amortizer preset `small` (batch {B}, n <= {cfg.n_max}, d <= {cfg.d_max}): "
        "simulating one batch against one optimiser step (forward, phase-1 loss, backward, "
        "RAdam) on that batch, in the same process.",
        "",
        "| measure | median (s) | IQR (s) |",
        "|---|---|---|",
        f"| simulate one batch | {ms:.3f} | {a:.3f} - {c:.3f} |",
        f"| one training step | {mt:.3f} | {a2:.3f} - {c2:.3f} |",
        f"| **simulation / training step** | **{ms / mt:.0%}** | |",
        "",
        "Training draws batches in DataLoader worker processes (`TrainConfig.num_workers`), "
        "so on a machine with a spare core simulation overlaps the step instead of adding to it.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batch")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    B = args.batch_size or (32 if args.quick else 128)
    repeats = args.repeats or (2 if args.quick else 3)
    cfg = SimulatorConfig.paper()
    sim = Simulator(cfg)
    vocab = cfg.vocabulary

    seeds = iter(range(10_000))
    ours = timed(lambda: sim.sample(B, torch.Generator().manual_seed(next(seeds))), repeats)
    stage_runs = [staged(sim, B, seed) for seed in range(repeats)]
    batch = sim.sample(B, torch.Generator().manual_seed(123))
    naive_svd = timed(lambda: naive_loop(batch, vocab, "svd", 0), max(1, repeats // 2))
    naive_chol = timed(lambda: naive_loop(batch, vocab, "cholesky", 0), max(1, repeats // 2))
    ours_same = timed(lambda: sim.sample(B, torch.Generator().manual_seed(123)), repeats)

    med, q1, q3 = stats(ours)
    lines = [
        "# amorgp-simulator benchmark",
        "",
        f"Machine: {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
        f"Python {platform.python_version()}, 1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end of the run.  Generated by `benchmarks/bench_simulator.py"
        f"{' --quick' if args.quick else ''}`; medians with interquartile ranges "
        f"over {repeats} repeats (wall time, shared machine: compare ratios, not absolutes).",
        "",
        f"## Paper preset, batch {B}",
        "",
        "| measure | median | IQR |",
        "|---|---|---|",
        f"| seconds per batch | {med:.3f} | {q1:.3f} - {q3:.3f} |",
        f"| datasets per second | {B / med:.1f} | {B / q3:.1f} - {B / q1:.1f} |",
        f"| mean n of the batch timed against the peer | {float(batch.n_points.double().mean()):.0f} | |",
        f"| mean d | {float(batch.n_dims.double().mean()):.2f} | |",
        f"| rejected draws (n_failed) in that batch | {batch.n_failed} | |",
        "",
        "## Per-stage breakdown (one batch, seconds)",
        "",
        "| stage | median | IQR | share |",
        "|---|---|---|---|",
    ]
    names = list(stage_runs[0])
    total = sum(statistics.median([r[k] for r in stage_runs]) for k in names)
    for k in names:
        m, a, c = stats([r[k] for r in stage_runs])
        lines.append(f"| {k} | {m:.4f} | {a:.4f} - {c:.4f} | {100 * m / total:.0f} % |")
    lines.append(f"| **sum** | {total:.4f} | | 100 % |")
    m_same = stats(ours_same)[0]
    lines += [
        "",
        "## Against a naive per-dataset loop (same datasets)",
        "",
        "Same X, structures, parameters and noise as one simulated batch; the peer loops "
        "over datasets in Python, builds each covariance with kernel-grammar's numpy reference "
        "formulas and draws with `numpy.random.Generator.multivariate_normal`.",
        "",
        "| method | seconds per batch (median) | IQR | datasets / s | ratio to ours |",
        "|---|---|---|---|---|",
    ]
    for label, times in (
        ("amorgp.simulator `Simulator.sample` (whole batch, batched)", ours_same),
        ("naive loop, numpy `multivariate_normal` (SVD, default)", naive_svd),
        ("naive loop, numpy `multivariate_normal(method='cholesky')`", naive_chol),
    ):
        m, a, c = stats(times)
        lines.append(f"| {label} | {m:.3f} | {a:.3f} - {c:.3f} | {B / m:.1f} | {m / m_same:.2f} |")
    lines += [
        "",
        "The simulator's time includes everything the peer does not: drawing the sizes, "
        "structures, negatives, parameters and inputs, and the jitter bookkeeping.",
        "",
        "## Share of a training step",
        "",
        "Target: simulation under 10 % of one training step of the small network preset on CPU.",
        "",
        *training_step_share(repeats),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure = args.out.with_suffix(".png")
    if _figure(figure, names, stage_runs, B, ours_same, naive_svd, naive_chol):
        lines += [f"![per-stage breakdown and throughput]({figure.name})", ""]
    args.out.write_text("\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
