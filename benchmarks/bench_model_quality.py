"""Quality of the bundled amortization network: test RMSE and NLL against Type-2 ML.

Writes ``docs/benchmarks/model-quality.md`` (Markdown tables) and
``docs/benchmarks/model-quality.json`` (every number of the tables), and, with
``--metrics``, ``docs/benchmarks/model-quality-curve.png`` (validation curve).

Evaluations (Bitzer et al. 2023, Fig. 2b, 9, 10 and Table 2, reduced to a 2-core CPU):

1. **Simulated test set**: 200 (dataset, structure) pairs drawn from the training
   prior of the network (``n ~ U{10..n_max}``, ``d <= max_dims``, positive pairs:
   the structure is the generating one) with 50 held-out test points each, drawn
   jointly from the same GP.  For every pair the GP posterior predictive at the test
   points is computed exactly (float64, one Cholesky) with the hyperparameters of
   each method, and the per-dataset test RMSE and mean per-point test NLL
   ``0.5 log(2 pi v) + (y - m)^2 / (2 v)`` (``v`` includes the noise) are
   summarised by median and quartiles over pairs.
2. **n_train sweep** at ``d = 2``: the same for ``n = 10, 20, 50, 100``.
3. **Noise fine-tuning**: the phase-1 network (``--phase1``) next to the shipped one.
4. **Real data** (``data/*.csv``): inputs min-max scaled and targets standardised on
   the training split; random splits with ``n_train = min(paper n_train, cap)`` and
   at most 400 test points; a subset of the paper's 24 evaluation kernels
   (``paper_evaluation_set(0)``, each broadcast to every input dimension); metrics in
   standardised target units.

Methods: ``amortized`` (one forward pass), ``Type-2 ML`` (``amorgp.baselines``
GP-ML: Adam, lr 0.1, <= 150 steps, the default start plus prior-drawn restarts),
``ground truth`` (simulated data only) and ``prior means`` (a constant default: every
parameter at its prior mean, the output of an untrained network).

Usage::

    python benchmarks/bench_model_quality.py [--quick] [--checkpoint DIR] [--phase1 DIR]
        [--restarts R] [--metrics runs/NAME/metrics.jsonl ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from amorgp_experiments.paper import protocol as paper_protocol
from amorgp_experiments.paper.simulated import (
    gp_batches,
    markdown_table,
    predictive_metrics,
    simulated_pairs,
    summary,
)
from amorgp_experiments.paper.simulated import network_parameters_batch as amortized
from safetensors.torch import load_file, save_file
from torch import Tensor

from amorgp.amortizer import load_checkpoint
from amorgp.amortizer.api import PRETRAINED_DIR
from amorgp.baselines import Type2MLSettings, fit_type2ml_batch
from amorgp.kernel_grammar import (
    NOISE,
    Vocabulary,
    encode,
    paper_evaluation_set,
)
from amorgp.lazy_kernels import PaddedBatch
from amorgp.simulator import SimulatedBatch, SimulatorConfig

ROOT = Path(__file__).resolve().parents[1]
SEED = 20_230_917
PAPER_N_TRAIN = {"airline": 100, "yacht": 250}

Params = tuple[Tensor, Tensor]


# --------------------------------------------------------------------------- methods
def prior_means(batch: PaddedBatch) -> Params:
    """Every kernel parameter at its prior mean, noise at its prior mean."""
    vocab = batch.vocab
    table = np.ones((len(vocab) + 1, vocab.max_params))
    for i, sym in enumerate(vocab, start=1):
        for j, spec in enumerate(sym.params):
            table[i, j] = spec.prior.mean
    params = torch.as_tensor(table)[batch.symbols]
    return params, torch.full((batch.batch_size,), float(NOISE.prior.mean), dtype=torch.float64)


CACHE: Path | None = None


def type2ml(batch: PaddedBatch, restarts: int, seed: int) -> tuple[Tensor, Tensor, float]:
    """GP-ML fit of every pair (cached on disk under :data:`CACHE` by data hash and settings).

    Returns the parameters and the fit's wall-clock seconds (of the original fit when
    read back from the cache).
    """
    key = hashlib.sha256()
    for t in (batch.X, batch.y, batch.point_mask, batch.symbols, batch.symbol_mask):
        key.update(t.contiguous().numpy().tobytes())
    key.update(f"{restarts}/{seed}".encode())
    file = CACHE / f"type2ml-{key.hexdigest()[:24]}.safetensors" if CACHE is not None else None
    if file is not None and file.exists():
        t = load_file(str(file))
        return t["params"], t["noise"], float(t["time_s"])
    s = Type2MLSettings(restarts=restarts, init="default")
    fit = fit_type2ml_batch(batch, s, generator=torch.Generator().manual_seed(seed))
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(".tmp")
        save_file(
            {
                "params": fit.params.contiguous(),
                "noise": fit.noise.contiguous(),
                "time_s": torch.tensor(fit.time_s),
            },
            str(tmp),
        )
        tmp.replace(file)
    return fit.params, fit.noise, fit.time_s


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed(fn: Callable[[], Params]) -> tuple[Params, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


# --------------------------------------------------------------------------- simulated
def evaluate_simulated(
    models: dict[str, torch.nn.Module],
    batches: list[SimulatedBatch],
    vocab: Vocabulary,
    restarts: int,
    seed: int,
) -> dict[str, Any]:
    per: dict[str, dict[str, list[Tensor]]] = {}
    times: dict[str, float] = {}

    def add(name: str, metrics: dict[str, Tensor], seconds: float) -> None:
        slot = per.setdefault(name, {})
        for k, v in metrics.items():
            slot.setdefault(k, []).append(v)
        times[name] = times.get(name, 0.0) + seconds

    for i, b in enumerate(batches):
        gb, gt = gp_batches(b, vocab)
        Xt, yt, tm = b.X_test, b.y_test, b.test_mask
        assert Xt is not None
        assert yt is not None
        assert tm is not None
        for name, model in models.items():
            p, dt = timed(lambda model=model, gb=gb: amortized(model, gb))
            add(name, predictive_metrics(gb, *p, Xt, yt, tm), dt)
        pp, pn, dt = type2ml(gb, restarts, seed + i)
        add(
            f"Type-2 ML ({restarts} start{'s' if restarts > 1 else ''})",
            predictive_metrics(gb, pp, pn, Xt, yt, tm),
            dt,
        )
        log(f"  chunk {i + 1}/{len(batches)} (n <= {gb.X.shape[1]}): Type-2 ML {dt:.0f} s")
        add("ground truth", predictive_metrics(gt, b.params, b.noise, Xt, yt, tm), 0.0)
        add("prior means", predictive_metrics(gb, *prior_means(gb), Xt, yt, tm), 0.0)
    out: dict[str, Any] = {}
    for name, metrics in per.items():
        out[name] = {k: summary(torch.cat(v)) for k, v in metrics.items()}
        out[name]["time_s"] = times[name]
    return out


# --------------------------------------------------------------------------- real data
def load_csv(path: Path) -> tuple[Tensor, Tensor]:
    X, y = paper_protocol.load_csv(path)
    return torch.as_tensor(X), torch.as_tensor(y)


def normalise(
    X: Tensor, y: Tensor, Xs: Tensor, ys: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    lo, rng = X.min(0).values, X.max(0).values - X.min(0).values
    const = rng <= 0
    safe = torch.where(const, torch.ones_like(rng), rng)

    def tx(A: Tensor) -> Tensor:
        return torch.where(const, torch.full_like(A, 0.5), (A - lo) / safe)

    mu, sd = y.mean(), y.std(unbiased=False).clamp_min(1e-12)
    return tx(X), (y - mu) / sd, tx(Xs), (ys - mu) / sd


def evaluate_real(
    models: dict[str, torch.nn.Module],
    vocab: Vocabulary,
    files: list[Path],
    kernel_ids: list[int],
    splits: int,
    n_cap: int,
    restarts: int,
    seed: int,
) -> dict[str, Any]:
    templates = paper_evaluation_set(0)
    chosen = [templates[i] for i in kernel_ids]
    out: dict[str, Any] = {"kernels": [str(t) for t in chosen], "datasets": {}}
    for path in files:
        name = path.stem
        X, y = load_csv(path)
        n, d = X.shape
        n_train = min(PAPER_N_TRAIN.get(name, 500), n_cap, n - 10)
        per: dict[str, dict[str, list[Tensor]]] = {}
        times: dict[str, float] = {}
        for split in range(splits):
            g = torch.Generator().manual_seed(seed + 1000 * split)
            perm = torch.randperm(n, generator=g)
            tr, te = perm[:n_train], perm[n_train : n_train + 400]
            Xn, yn, Xt, yt = normalise(X[tr], y[tr], X[te], y[te])
            structs = tuple(t.broadcast(d) for t in chosen)
            K = len(structs)
            sym, smask = encode(list(structs), vocab, max_dims=d)
            gb = PaddedBatch(
                Xn[None].expand(K, -1, -1).contiguous(),
                yn[None].expand(K, -1).contiguous(),
                torch.ones(K, n_train, dtype=torch.bool),
                torch.ones(K, d, dtype=torch.bool),
                torch.as_tensor(sym),
                torch.as_tensor(smask),
                vocab,
            )
            Xtb = Xt[None].expand(K, -1, -1).contiguous()
            ytb = yt[None].expand(K, -1).contiguous()
            tmb = torch.ones(K, Xt.shape[0], dtype=torch.bool)
            results: dict[str, tuple[Params, float]] = {}
            for mname, model in models.items():
                results[mname] = timed(
                    lambda model=model, gb=gb: amortized_encoder_subset(model, gb, seed)
                )
            pp, pn, dt = type2ml(gb, restarts, seed + split)
            results[f"Type-2 ML ({restarts} start{'s' if restarts > 1 else ''})"] = ((pp, pn), dt)
            log(f"  {name} split {split}: Type-2 ML {dt:.0f} s")
            for mname, (p, dt) in results.items():
                metrics = predictive_metrics(gb, *p, Xtb, ytb, tmb)
                slot = per.setdefault(mname, {})
                for k, v in metrics.items():
                    slot.setdefault(k, []).append(v)
                times[mname] = times.get(mname, 0.0) + dt
        out["datasets"][name] = {
            "n_train": n_train,
            "d": d,
            "methods": {
                m: {**{k: summary(torch.cat(v)) for k, v in mm.items()}, "time_s": times[m]}
                for m, mm in per.items()
            },
        }
    return out


def amortized_encoder_subset(
    model: torch.nn.Module, gb: PaddedBatch, seed: int, max_points: int = 100
) -> Params:
    """Amortized parameters where the encoder reads at most ``max_points`` random points."""
    n = gb.X.shape[1]
    if n <= max_points:
        return amortized(model, gb)
    idx = (
        torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:max_points].sort().values
    )
    sub = replace(gb, X=gb.X[:, idx], y=gb.y[:, idx], point_mask=gb.point_mask[:, idx])
    return amortized(model, sub)


# --------------------------------------------------------------------------- report
def _table(results: dict[str, Any]) -> list[str]:
    return markdown_table(results)


def curve_plot(files: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    offset = 0
    for f in files:
        recs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        val = [r for r in recs if r.get("kind") == "validation"]
        if not val:
            continue
        xs = [offset + r["datasets_seen"] for r in val]
        ax.plot(
            xs,
            [r["nll_gap"] for r in val],
            marker=".",
            label=f"{f.stem}: NLL gap to truth (positives)",
        )
        offset = xs[-1]
    ax.set_xlabel("simulated datasets seen")
    ax.set_ylabel("validation NLL per point, predicted - true params")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--checkpoint", type=Path, default=PRETRAINED_DIR, help="the evaluated network")
    ap.add_argument(
        "--phase1",
        type=Path,
        default=ROOT / "docs" / "training" / "phase1",
        help="phase-1 network (no noise fine-tuning); skipped if missing",
    )
    ap.add_argument(
        "--restarts", type=int, default=5, help="Type-2 ML starts on the simulated test set"
    )
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--n-max", type=int, default=250, help="simulated set: n ~ U{10..n_max}")
    ap.add_argument("--d-max", type=int, default=8, help="simulated set: d <= d_max (paper prior)")
    ap.add_argument("--sweep-pairs", type=int, default=50)
    ap.add_argument("--sweep-restarts", type=int, default=1, help="Type-2 ML starts in the n sweep")
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--real-n-cap", type=int, default=150)
    ap.add_argument("--real-kernels", type=str, default="0,6,12,18")
    ap.add_argument(
        "--cache",
        type=Path,
        default=ROOT / "runs" / "model-quality-cache",
        help="cache of the Type-2 ML fits",
    )
    ap.add_argument(
        "--fits-only", action="store_true", help="only compute (and cache) the Type-2 ML fits"
    )
    ap.add_argument("--real-restarts", type=int, default=1)
    ap.add_argument(
        "--paper-splits",
        type=int,
        default=3,
        help="splits of the paper-protocol real-data targets (0 skips them; see model_quality_real.py)",
    )
    ap.add_argument("--paper-kernels", type=int, default=24, help="first k of the 24 kernels")
    ap.add_argument(
        "--paper-datasets", default="airline,yacht,energy,concrete,housing", help="comma-separated"
    )
    ap.add_argument(
        "--metrics", type=Path, nargs="*", default=[], help="metrics.jsonl files for the curve plot"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "model-quality.md")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    if args.quick:
        args.pairs, args.sweep_pairs, args.splits, args.real_n_cap = 40, 20, 1, 100
        args.real_kernels, args.restarts = "0,6,12,18", min(args.restarts, 2)
        args.paper_splits, args.paper_kernels, args.paper_datasets = 1, 4, "airline,yacht"

    global CACHE
    CACHE = args.cache
    ckpt = load_checkpoint(args.checkpoint)
    models: dict[str, torch.nn.Module] = {} if args.fits_only else {"amortized": ckpt.model}
    if (
        not args.fits_only
        and args.phase1 is not None
        and (args.phase1 / "checkpoint.json").exists()
    ):
        models["amortized, phase 1 only (no noise fine-tuning)"] = load_checkpoint(
            args.phase1
        ).model
    vocab = ckpt.network.vocabulary
    n_max, d_max = args.n_max, args.d_max
    t0 = time.perf_counter()

    cfg = SimulatorConfig(
        n_min=10, n_max=n_max, d_max=d_max, n_test=50, positive_ratio=1.0, vocabulary=vocab
    )
    log("simulated test set")
    sim = evaluate_simulated(
        models, simulated_pairs(cfg, args.pairs, SEED), vocab, args.restarts, SEED
    )
    sweep = {}
    for n in (10, 20, 50, 100):
        log(f"n_train sweep: n = {n}")
        c = replace(cfg, n_min=n, n_max=n, d_max=2, p_dims=1e-6)
        sweep[n] = evaluate_simulated(
            models,
            simulated_pairs(c, args.sweep_pairs, SEED + n),
            vocab,
            args.sweep_restarts,
            SEED + n,
        )
    files = sorted((ROOT / "data").glob("*.csv"))
    log("real data")
    kernel_ids = [int(i) for i in args.real_kernels.split(",")]
    real = evaluate_real(
        models, vocab, files, kernel_ids, args.splits, args.real_n_cap, args.real_restarts, SEED
    )
    paper = None
    if args.paper_splits > 0 and not args.fits_only:
        import model_quality_real

        log("real data, paper protocol")
        paper = model_quality_real.evaluate(
            args.checkpoint,
            [d for d in args.paper_datasets.split(",") if d],
            args.paper_splits,
            5,
            args.cache / "paper-protocol",
            n_kernels=args.paper_kernels,
            log=log,
        )
    elapsed = time.perf_counter() - t0
    if args.fits_only:
        log(f"fits cached in {args.cache} ({elapsed:.0f} s)")
        return

    record = {
        "checkpoint": str(args.checkpoint),
        "progress": ckpt.meta.get("progress", {}),
        "history": ckpt.meta.get("history", []),
        "args": {k: str(v) for k, v in vars(args).items()},
        "simulated": sim,
        "n_sweep_d2": {str(k): v for k, v in sweep.items()},
        "real": real,
        "paper_protocol": paper,
        "elapsed_s": elapsed,
        "host": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1))

    L = [
        "# Model quality of the bundled amortization network",
        "",
        f"Generated by `benchmarks/bench_model_quality.py{' --quick' if args.quick else ''}` in {elapsed / 60:.1f} min "
        f"({record['host']}). Checkpoint `{args.checkpoint.name}`, progress {json.dumps(record['progress'])}.",
        "",
        "Cells: median [first quartile, third quartile] over (dataset, structure) pairs. "
        "Test NLL is the mean negative log predictive density per held-out point (noise included); "
        "train NLL is the negative log marginal likelihood per training point. "
        f"Type-2 ML: GP-ML of `amorgp.baselines` (Adam, lr 0.1, <= 150 steps) with {args.restarts} start(s) "
        "on simulated data: the default start (parameters 1, noise std 0.2) plus draws from the "
        "priors, the best log marginal likelihood wins. "
        "Time: wall-clock of each method for the whole set, on the same machine, side by side.",
        "",
        f"## Simulated test set ({args.pairs} positive pairs, n ~ U{{10..{n_max}}}, d <= {d_max}, 50 test points each)",
        "",
        *_table(sim),
        "",
        f"## n_train sweep at d = 2 ({args.sweep_pairs} pairs per n, 50 test points each, "
        f"Type-2 ML with {args.sweep_restarts} start(s))",
        "",
    ]
    for n, res in sweep.items():
        L += [f"### n_train = {n}", "", *_table(res), ""]
    L += [
        f"## Real data ({args.splits} random splits, n_train = min(paper n_train, {args.real_n_cap}), <= 400 test points, "
        f"Type-2 ML with {args.real_restarts} start(s))",
        "",
        "Kernels (each broadcast to every input dimension): "
        + ", ".join(f"`{k}`" for k in real["kernels"])
        + ".",
        "Metrics in standardised target units (RMSE / std of the training targets).",
        "",
    ]
    for name, r in real["datasets"].items():
        L += [f"### {name} (n_train = {r['n_train']}, d = {r['d']})", "", *_table(r["methods"]), ""]
    if paper is not None:
        import model_quality_real

        L += [*model_quality_real.markdown(paper), ""]
    if args.metrics:
        png = args.out.with_name(args.out.stem + "-curve.png")
        curve_plot(args.metrics, png)
        L += ["## Validation curve", "", f"![validation curve]({png.name})", ""]
    args.out.write_text("\n".join(L) + "\n")
    print(f"wrote {args.out} ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
