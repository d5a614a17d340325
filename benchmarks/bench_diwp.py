"""The deep inverse Wishart process against the GP baselines, standard UCI protocol.

For concrete, energy, yacht and housing: random 90/10 splits (targets normalised on the
training part by each method), the test log-likelihood per point in the original units of
``y`` (mean and standard error over splits), the test RMSE and the training time of each
method:

* ``diwp``: the deep inverse Wishart process;
* ``gp-ml-lbfgs``: exact GP with the SE-ARD kernel (``SE`` in every dimension), Type-2 ML;
* ``svgp``: SVGP with the same kernel;
* ``advi-meanfield``: ADVI over the SE-ARD hyperparameters (``--advi``; slow on large n).

Settings (``--setting``; ``--quick`` is ``--setting quick``):

* ``quick``: 2 splits, the DIWP's quick configuration (1 hidden layer, 32 inducing points,
  300 steps), short baseline optimisations; a smoke run (CI).
* ``medium``: DIWP with the paper's model (2 hidden layers, 100 inducing points) trained
  for 1500 Adam steps (the last 300 at ``1e-3``) with 5 samples per step, 100 at test;
  exact GP at its defaults; SVGP with 100 inducing points (the DIWP's number); ADVI with
  at most 2000 iterations.  What a CPU affords: 2-4 CPU minutes of DIWP training per
  split and dataset on one core.
* ``paper``: the paper's setting (4000 steps, the last 1000 at ``1e-3``, 10/100 samples)
  and every baseline at its defaults; hours per dataset on a CPU.

Each result (a *cell*: dataset, split, method, setting and a hash of the method's
settings) is appended to a JSONL cache (``--cache``, default ``diwp-cells/cells.jsonl``
beside ``--out``) as soon as it is computed; a rerun computes only the missing cells, so
an interrupted run resumes.  Splits are the outer loop, so a run stopped early has the
same number of splits for every dataset; several runs (e.g. one per dataset group) may
share a cache.  The Markdown (``--out``) has one table per setting found in the cache,
each row with its number of splits; with the default ``--out``, the DIWP sections of
``docs/benchmarks/baselines.md`` and ``packages/baselines/README.md`` (between
``<!-- diwp:begin -->`` and ``<!-- diwp:end -->``) are regenerated from the largest
non-quick setting in the cache.
``--render`` only rewrites the Markdown from the cache.  ``--jobs N`` runs ``N`` worker
processes (one torch thread each unless ``--threads``), worker ``i`` computing the cells at
positions ``i, i + N, ...`` of the fixed (split, dataset, method) order; they share the
cache, and the Markdown is written once they are done (e.g. ``--jobs 14`` on a 16-core
machine).  ``--merge OTHER.jsonl`` first appends the cells of another cache that this one
lacks (a run on another machine started from a copy of this cache).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amorgp.amortizer.jsonlog import write_text_atomic
from amorgp.baselines import fit
from amorgp.baselines.diwp import DIWPSettings, fit_diwp

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
OUT = ROOT / "docs" / "benchmarks" / "diwp.md"
README = ROOT / "packages" / "baselines" / "README.md"
DATASETS = ("concrete", "energy", "yacht", "housing")
METHODS = ("diwp", "gp-ml-lbfgs", "svgp", "advi-meanfield")
SETTINGS = ("quick", "medium", "paper")
REFERENCE = {  # test log-likelihood, 20 splits: (DWP, deep GP)
    "concrete": (-3.13, -3.18),
    "energy": (-0.70, -0.73),
    "yacht": (-0.46, -0.77),
    "housing": (-2.39, -2.48),
}
BEGIN, END = "<!-- diwp:begin -->", "<!-- diwp:end -->"


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A bundled dataset, read by the library's CSV reader (last column the target)."""
    from amorgp.amortizer.frontends.io import read_csv

    table = read_csv(DATA / f"{name}.csv")
    assert table.y is not None
    return table.X, table.y


def split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random 90/10 split of ``range(n)``."""
    perm = np.random.default_rng(seed).permutation(n)
    n_train = round(0.9 * n)
    return perm[:n_train], perm[n_train:]


def evaluate(result: Any, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean test log-likelihood per point, RMSE), original units."""
    mean, _ = result.predict(X)
    rmse = float(np.sqrt(np.mean((mean.numpy() - y) ** 2)))
    return float(result.log_predictive_density(X, y).mean()), rmse


def diwp_settings(setting: str, n_train: int) -> DIWPSettings:
    if setting == "quick":
        return DIWPSettings.quick(n_inducing=min(32, n_train))
    n_ind = min(100, n_train)
    if setting == "medium":
        return DIWPSettings(
            n_inducing=n_ind,
            iterations=1500,
            late_iterations=300,
            train_samples=5,
            test_samples=100,
        )
    return DIWPSettings(n_inducing=n_ind)


def baseline_options(setting: str, method: str, n_train: int) -> dict[str, Any]:
    options: dict[str, dict[str, dict[str, Any]]] = {
        "quick": {
            "gp-ml-lbfgs": {"max_iters": 30},
            "svgp": {"max_iters": 100},
            "advi-meanfield": {"max_iters": 200, "adapt_iters": 10, "n_predictive_samples": 20},
        },
        "medium": {
            "gp-ml-lbfgs": {},
            "svgp": {"inducing_fraction": min(1.0, 100 / n_train)},
            "advi-meanfield": {"max_iters": 2000},
        },
    }
    return options.get(setting, {}).get(method, {})


def method_config(setting: str, method: str, n_train: int) -> dict[str, Any]:
    """The settings a cell is computed with (hashed into its key)."""
    if method == "diwp":
        s = diwp_settings(setting, n_train)
        return {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.init}
    return baseline_options(setting, method, n_train)


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def run_method(method: str, Xtr: np.ndarray, ytr: np.ndarray, setting: str, seed: int) -> Any:
    gen = torch.Generator().manual_seed(seed)
    if method == "diwp":
        return fit_diwp(Xtr, ytr, diwp_settings(setting, len(ytr)), generator=gen)
    options = baseline_options(setting, method, len(ytr))
    return fit(Xtr, ytr, "SE", method=method, generator=gen, **options)  # type: ignore[arg-type]


# -- the cell cache -------------------------------------------------------------------------
def cell_key(cell: dict[str, Any]) -> tuple[str, int, str, str, str]:
    return (cell["dataset"], cell["split"], cell["method"], cell["setting"], cell["hash"])


def read_cells(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the cache (a torn last line is ignored)."""
    if not path.exists():
        return []
    cells = []
    for line in path.read_text().splitlines():
        try:
            cells.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return cells


def append_cell(path: Path, cell: dict[str, Any]) -> None:
    """Append one line with a single ``write`` on an ``O_APPEND`` descriptor (atomic for
    concurrent writers of lines this short), then ``fsync``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(cell, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def merge_cells(cache: Path, other: Path) -> int:
    """Append the cells of another cache (e.g. a run on another machine) that ``cache``
    lacks; returns how many were added."""
    if not other.is_file():
        raise SystemExit(f"--merge: no cell cache at {other}")
    done = {cell_key(c) for c in read_cells(cache)}
    added = 0
    for cell in read_cells(other):
        if cell_key(cell) not in done:
            append_cell(cache, cell)
            done.add(cell_key(cell))
            added += 1
    return added


def compute_cell(name: str, seed: int, method: str, setting: str, key_hash: str) -> dict:
    X, y = load(name)
    tr, te = split(len(y), seed)
    t0 = time.perf_counter()
    res = run_method(method, X[tr], y[tr], setting, seed)
    train_s = time.perf_counter() - t0
    ll, rmse = evaluate(res, X[te], y[te])
    return {
        "dataset": name,
        "split": seed,
        "method": method,
        "setting": setting,
        "hash": key_hash,
        "loglik": ll,
        "rmse": rmse,
        "train_s": train_s,
        "threads": torch.get_num_threads(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- rendering ------------------------------------------------------------------------------
def mean_se(values: list[float]) -> tuple[float, float]:
    v = np.array([x for x in values if math.isfinite(x)])
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan


def fmt(m: float, se: float) -> str:
    if not math.isfinite(m):
        return "n/a"
    return f"{m:.3f} ± {se:.3f}" if math.isfinite(se) else f"{m:.3f}"


def current_cells(cells: list[dict[str, Any]], setting: str) -> dict[tuple[str, str], list]:
    """The cells of ``setting`` whose hash matches the current settings, by (dataset, method);
    one per split (the latest line wins)."""
    by_key: dict[tuple[str, int, str, str, str], dict[str, Any]] = {}
    for c in cells:
        if c["setting"] != setting or c["dataset"] not in DATASETS:
            continue
        n_train = round(0.9 * len(load_cached(c["dataset"])[1]))
        if c["hash"] != config_hash(method_config(setting, c["method"], n_train)):
            continue
        by_key[cell_key(c)] = c
    out: dict[tuple[str, str], list] = {}
    for c in sorted(by_key.values(), key=lambda c: c["split"]):
        out.setdefault((c["dataset"], c["method"]), []).append(c)
    return out


_DATA_CACHE: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def load_cached(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in _DATA_CACHE:
        _DATA_CACHE[name] = load(name)
    return _DATA_CACHE[name]


def table(groups: dict[tuple[str, str], list]) -> str:
    rows = [
        "| dataset | method | splits | test log-lik | RMSE | train s / split "
        "| literature DWP / deep GP |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in DATASETS:
        ref = REFERENCE[name]
        for method in METHODS:
            cs = groups.get((name, method))
            if not cs:
                continue
            ll = fmt(*mean_se([c["loglik"] for c in cs]))
            rmse = fmt(*mean_se([c["rmse"] for c in cs]))
            t = np.mean([c["train_s"] for c in cs])
            rows.append(
                f"| {name} | {method} | {len(cs)} | {ll} | {rmse} | {t:.1f} "
                f"| {ref[0]:.2f} / {ref[1]:.2f} |"
            )
    return "\n".join(rows) + "\n"


def _splits(n: int) -> str:
    return f"{n} split{'' if n == 1 else 's'}"


def targets(groups: dict[tuple[str, str], list]) -> str:
    """The DIWP quality targets, checked on the mean test log-likelihood of the cells present."""
    lines, wins, near = [], 0, 0
    present = [d for d in DATASETS if (d, "diwp") in groups]
    for name in present:
        cells = groups[(name, "diwp")]
        diwp, se = mean_se([c["loglik"] for c in cells])
        deep = REFERENCE[name][1]
        ok = diwp >= deep - 0.1
        near += ok
        # the exact GP against the DIWP on the splits both have
        gp_by_split = {c["split"]: c["loglik"] for c in groups.get((name, "gp-ml-lbfgs"), [])}
        both = [c for c in cells if c["split"] in gp_by_split]
        gp = mean_se([gp_by_split[c["split"]] for c in both])[0] if both else math.nan
        diwp_both = mean_se([c["loglik"] for c in both])[0] if both else math.nan
        better = math.isfinite(gp) and diwp_both > gp
        wins += better
        gp_text = (
            f"{gp:.3f} vs DIWP {diwp_both:.3f} on the same {_splits(len(both))}" if both else "n/a"
        )
        lines.append(
            f"- {name}: DIWP {fmt(diwp, se)} ({_splits(len(cells))}) vs deep GP {deep:.2f} — "
            f"{'within' if ok else 'not within'} 0.1 nats (or better); exact GP {gp_text} — "
            f"DIWP {'better' if better else 'not better'}."
        )
    verdict = (
        f"Within 0.1 nats of the deep-GP column on {near} of {len(present)} datasets "
        f"(target: all four); better than the exact GP on {wins} (target: at least two). "
        "With a few splits the standard errors are large; the literature column is a "
        "20-split mean."
    )
    return "\n".join(lines) + "\n\n" + verdict + "\n"


SETTING_TEXT = {
    "quick": (
        "quick — the DIWP's quick configuration (1 hidden layer, 32 inducing points, 300 "
        "Adam steps, 3/30 samples) and short baseline optimisations (L-BFGS 30 iterations, "
        "SVGP 100 steps); a smoke run, not the protocol's numbers"
    ),
    "medium": (
        "medium — DIWP with the paper's model (2 hidden layers, 100 inducing points, SE "
        "Gram kernel) but 1500 Adam steps (lr 1e-2, the last 300 at 1e-3) and 5 samples "
        "per step (the paper: 4000 steps, 10 samples), 100 samples at test; exact GP "
        "(SE-ARD, Type-2 ML, L-BFGS) at its defaults; SVGP with 100 inducing points "
        "(the DIWP's number; its default is n/2) and its other defaults; ADVI at most 2000 "
        "iterations"
    ),
    "paper": (
        "paper — the paper's DIWP setting (2 hidden layers, 100 inducing points, 4000 Adam "
        "steps, the last 1000 at 1e-3, 10/100 samples) and every baseline at its defaults"
    ),
}


def render(cells: list[dict[str, Any]], out: Path) -> None:
    """Write ``out`` (every setting in the cache) and, beside the default output, the DIWP
    sections of ``baselines.md`` and of the baselines README."""
    parts = [
        "# Deep inverse Wishart process vs GP baselines (UCI protocol)\n\n"
        "Generated by `benchmarks/bench_diwp.py` from the cell cache "
        "`diwp-cells/cells.jsonl` (one line per dataset, split, method and setting; a "
        "rerun computes only missing cells). Random 90/10 splits (split `k` is "
        "`numpy.random.default_rng(k).permutation`), test log-likelihood per point in the "
        "original units of y (mean ± standard error over the splits in the `splits` "
        "column), RMSE, training seconds per split on one CPU thread of a shared 2-core "
        "machine (wall clock, inflated by other load). Literature reference: DWP / deep "
        "GP test log-likelihood, 20 splits. The protocol asks for 20 splits and the "
        "paper's setting; fewer splits or a reduced setting are stated per table.\n\n"
        "To extend a table, rerun with more splits: `python benchmarks/bench_diwp.py "
        "--setting medium --splits 20` (or `--setting paper`, `--advi`, `--datasets ...`); "
        "only the missing cells are computed, and runs on disjoint datasets may share the "
        "cache; `--jobs N` runs N worker processes on one cache (e.g. 14 on a 16-core "
        "machine). One DIWP training step with 2 hidden layers and 100 inducing points costs "
        "about 75 (yacht) to 150 (concrete) ms of CPU time with 5 samples, twice that with "
        "the paper's 10, so a medium cell is 2-4 CPU minutes and a paper cell 9-20.\n"
    ]
    for setting in SETTINGS:
        groups = current_cells(cells, setting)
        if not groups:
            continue
        parts.append(f"\n## Setting {SETTING_TEXT[setting]}\n\n" + table(groups))
        if setting != "quick" and any(m == "diwp" for _, m in groups):
            parts.append("\nTargets (DIWP mean over the splits above):\n\n" + targets(groups))
    write_atomic(out, "".join(parts))
    if out.resolve() != OUT.resolve():
        return
    body = summary(cells)
    if body is not None:
        head = "## Deep inverse Wishart process (UCI protocol)\n\n"
        write_section(OUT.parent / "baselines.md", head + body, append=True)
        write_section(README, body, append=False)


def summary(cells: list[dict[str, Any]]) -> str | None:
    """The table and targets of the largest non-quick setting in the cache."""
    chosen = next((s for s in ("paper", "medium") if current_cells(cells, s)), None)
    if chosen is None:
        return None
    groups = current_cells(cells, chosen)
    return (
        "Generated by `benchmarks/bench_diwp.py` (every setting and the cell cache: "
        "`docs/benchmarks/diwp.md`). Setting "
        f"{SETTING_TEXT[chosen]}. Random 90/10 splits, test log-likelihood per point in "
        "original units (mean ± standard error over the `splits` column; the protocol asks "
        "for 20), training seconds per split on one CPU thread of a shared machine.\n\n"
        + table(groups)
        + "\n"
        + targets(groups)
    )


def write_section(path: Path, body: str, *, append: bool) -> None:
    """Replace the text between the DIWP markers of ``path`` by ``body``; without markers,
    append a marked section (``append``) or leave the file alone."""
    if not path.exists():
        return
    text = path.read_text()
    section = f"{BEGIN}\n{body}{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    elif append:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        return
    write_atomic(path, text)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def run_workers(argv: list[str], jobs: int) -> None:
    """Run this script ``jobs`` times in parallel on disjoint shards of the cells; an
    interrupt stops every worker (their finished cells stay in the cache)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
    procs = [subprocess.Popen([*cmd, "--shard", f"{i}/{jobs}"]) for i in range(jobs)]
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        raise
    if any(codes):
        raise SystemExit(f"workers failed with exit codes {codes}")


def main(argv: list[str] | None = None) -> None:
    # a job started in the background inherits SIGINT ignored: make Ctrl-C / kill -INT stop
    # it (finished cells are kept; the cell in progress is lost)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="--setting quick")
    p.add_argument("--setting", choices=SETTINGS, default="paper")
    p.add_argument("--splits", type=int, default=None, help="default: 2 quick, else 20")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--methods", default="diwp,gp-ml-lbfgs,svgp", help="comma-separated")
    p.add_argument("--advi", action="store_true", help="add advi-meanfield to --methods")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--cache", type=Path, default=None, help="default: beside --out")
    p.add_argument("--render", action="store_true", help="only rewrite the Markdown")
    p.add_argument("--jobs", type=int, default=1, help="worker processes sharing the cache")
    p.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        help="another cell cache (JSONL) whose missing cells are added first; repeatable",
    )
    p.add_argument("--shard", default=None, help=argparse.SUPPRESS)  # "i/N": set by --jobs
    argv = list(sys.argv[1:] if argv is None else argv)
    a = p.parse_args(argv)
    setting = "quick" if a.quick else a.setting
    splits = a.splits if a.splits is not None else (2 if setting == "quick" else 20)
    datasets = a.datasets.split(",")
    methods = a.methods.split(",") + (["advi-meanfield"] if a.advi else [])
    bad = [d for d in datasets if d not in DATASETS] + [m for m in methods if m not in METHODS]
    if bad or splits < 1 or a.jobs < 1:
        p.error(f"unknown datasets/methods {bad}, splits < 1 or jobs < 1")
    cache = a.cache or a.out.parent / "diwp-cells" / "cells.jsonl"
    torch.set_num_threads(a.threads)
    for other in a.merge if a.shard is None else []:
        print(f"merged {merge_cells(cache, other)} cells from {other}")
    if a.render:
        pass
    elif a.jobs > 1 and a.shard is None:
        run_workers(argv, a.jobs)
    else:
        shard, shards = (int(v) for v in a.shard.split("/")) if a.shard else (0, 1)
        order = [(seed, name, m) for seed in range(splits) for name in datasets for m in methods]
        done = {cell_key(c) for c in read_cells(cache)}
        for i, (seed, name, m) in enumerate(order):
            if i % shards != shard:
                continue
            n_train = round(0.9 * len(load_cached(name)[1]))
            h = config_hash(method_config(setting, m, n_train))
            if (name, seed, m, setting, h) in done:
                continue
            cell = compute_cell(name, seed, m, setting, h)
            append_cell(cache, cell)
            print(
                f"{name} split {seed} {m} ({setting}): ll {cell['loglik']:.3f} "
                f"rmse {cell['rmse']:.3f} {cell['train_s']:.0f}s",
                flush=True,
            )
            if shards == 1 and m == methods[-1] and name == datasets[-1]:
                render(read_cells(cache), a.out)  # after every split of a single process
        if a.shard:
            return  # the parent renders once every worker is done
    render(read_cells(cache), a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
