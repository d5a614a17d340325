"""Does training on non-uniform inputs help on real data?  An A/B training comparison.

Two copies of the same network (``--init``, default the bundled model) are trained
for the same number of datasets on the paper prior (``d <= 8``, ``n <= --n-max``),
one with the paper's uniform inputs and one with the ``mixed`` input law of
:mod:`amorgp.simulator.inputs` (clusters, discrete levels, skewed marginals,
uniform; one law per column), then noise-fine-tuned for the same number of steps.
Both are scored on

* the fixed campaign validation set (paper prior with uniform inputs, ``d <= 8``,
  ``n <= 250``; mean per-point NLL, lower is better): the mixed law must not hurt it;
* the bundled real datasets (paper protocol splits, the first ``--kernels`` evaluation
  kernels, amortized without refinement): median test RMSE and NLL in
  standardised units.

Writes ``docs/training/input-laws.md`` (and ``.json``).  The mixed law goes into the
default prior only if it improves the real-data RMSE without hurting the simulated NLL.

Usage::

    python benchmarks/bench_input_laws.py [--datasets 20000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amorgp.amortizer import Amortizer
from amorgp.amortizer.api import PRETRAINED_DIR
from amorgp.amortizer.frontends.io import read_csv
from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import TrainConfig
from amorgp.training.campaign import campaign_validation_set, score_checkpoint
from amorgp.training.train import train

ROOT = Path(__file__).resolve().parents[1]
PAPER_N_TRAIN = {"airline": 100, "yacht": 250}


def real_scores(
    checkpoint: Path, datasets: list[str], n_kernels: int, splits: int
) -> dict[str, Any]:
    from amorgp.kernel_grammar import paper_evaluation_set

    amz = Amortizer.from_pretrained(checkpoint, device="cpu", calibrate=False)
    out: dict[str, Any] = {}
    for name in datasets:
        table = read_csv(ROOT / "data" / f"{name}.csv")
        assert table.y is not None
        X, y = table.X, table.y
        n_train = min(PAPER_N_TRAIN.get(name, 500), len(y) - 10)
        kernels = [t.broadcast(X.shape[1]) for t in paper_evaluation_set(0)[:n_kernels]]
        rmse, nll = [], []
        for split in range(splits):
            perm = np.random.default_rng(1000 + split).permutation(len(y))
            tr, te = perm[:n_train], perm[n_train : n_train + 1000]
            mu, sd = y[tr].mean(), y[tr].std()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fits = amz.infer_many(X[tr], y[tr], kernels, refine=0)
            for f in fits:
                m, v = (np.asarray(t) for t in f.predict(X[te]))
                mm, vv, t = (m - mu) / sd, v / sd**2, (y[te] - mu) / sd
                rmse.append(float(np.sqrt(np.mean((mm - t) ** 2))))
                nll.append(float(np.mean(0.5 * (np.log(2 * np.pi * vv) + (t - mm) ** 2 / vv))))
        out[name] = {"rmse": statistics.median(rmse), "nll": statistics.median(nll)}
    return out


def run_arm(
    law: str, init: Path, work: Path, datasets: int, n_max: int, ft_steps: int, seed: int
) -> Path:
    p1 = TrainConfig(
        phase=1,
        batch_size=16,
        lr=5e-4,
        warmup_steps=20,
        n_max=n_max,
        max_dims=8,
        inputs=law,
        size_buckets=4,
        val_size=32,
        val_every=100_000,
        num_workers=0,
        seed=seed,
    )
    train(
        work / f"{law}-p1",
        train_cfg=p1,
        init_from=init,
        max_datasets=datasets,
        device="cpu",
        progress=False,
    )
    p2 = replace(p1, phase=2, lr=3e-4, warmup_steps=10, n_max=250, seed=seed + 1)
    train(
        work / f"{law}-p2",
        train_cfg=p2,
        init_from=work / f"{law}-p1" / "last",
        max_steps=ft_steps,
        device="cpu",
        progress=False,
    )
    return work / f"{law}-p2" / "last"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--init", type=Path, default=PRETRAINED_DIR)
    ap.add_argument("--datasets", type=int, default=20_000, help="phase-1 datasets per arm")
    ap.add_argument("--n-max", type=int, default=100)
    ap.add_argument("--finetune-steps", type=int, default=100)
    ap.add_argument("--kernels", type=int, default=6)
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the arms' run directories here (default: a temporary one)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "training" / "input-laws.md")
    a = ap.parse_args(argv)
    if a.quick:
        a.datasets, a.finetune_steps, a.kernels, a.splits = 160, 3, 2, 1
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    datasets = ["airline", "yacht", "energy", "concrete", "housing"]
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        valset = campaign_validation_set(work, load_checkpoint(a.init).network)
        res: dict[str, Any] = {
            "init": str(a.init),
            "datasets_per_arm": a.datasets,
            "n_max": a.n_max,
        }
        for law in ("uniform", "mixed"):
            ckpt = run_arm(law, a.init, work, a.datasets, a.n_max, a.finetune_steps, seed=11)
            res[law] = {
                "simulated": score_checkpoint(ckpt, valset),
                "real": real_scores(ckpt, datasets, a.kernels, a.splits),
            }
            print(f"{law}: {res[law]['simulated']['nll']:.4f} {res[law]['real']}", flush=True)
    res["minutes"] = (time.perf_counter() - t0) / 60
    res["machine"] = f"{platform.machine()} CPU, 1 torch thread, torch {torch.__version__}"
    u, m = res["uniform"], res["mixed"]
    lines = [
        "# Input laws: uniform (paper) vs mixed, an A/B training comparison",
        "",
        f"Generated by `benchmarks/bench_input_laws.py{' --quick' if a.quick else ''}` in {res['minutes']:.0f} min on {res['machine']}: "
        f"both arms start from `{Path(a.init).name}`, train {a.datasets} datasets (phase 1, d <= 8, n <= {a.n_max}) and "
        f"{a.finetune_steps} noise fine-tuning steps with the same seed.",
        "",
        "| | uniform inputs (paper) | mixed inputs |",
        "|---|---|---|",
        f"| simulated validation NLL (paper prior, uniform inputs, d <= 8; lower is better) | {u['simulated']['nll']:.4f} | {m['simulated']['nll']:.4f} |",
    ]
    for name in datasets:
        lines.append(
            f"| {name}: median test RMSE / NLL ({a.kernels} kernels, {a.splits} splits) | "
            f"{u['real'][name]['rmse']:.4f} / {u['real'][name]['nll']:.3f} | {m['real'][name]['rmse']:.4f} / {m['real'][name]['nll']:.3f} |"
        )
    better = sum(m["real"][n]["rmse"] < u["real"][n]["rmse"] for n in datasets)
    verdict = (
        "mixed inputs improve the real-data RMSE on "
        f"{better} of {len(datasets)} datasets; simulated NLL {'not hurt' if m['simulated']['nll'] <= u['simulated']['nll'] + 0.005 else 'hurt'}."
    )
    lines += ["", f"Result: {verdict}", ""]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines))
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=float))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
