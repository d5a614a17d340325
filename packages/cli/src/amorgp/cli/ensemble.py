"""``amorgp ensemble`` and ``amorgp search``: model averaging and structure search over kernels.

Both run the amortization network through :mod:`amorgp.ensembles` (one batched
``fit_many`` call per kernel list or search level).

Examples::

    amorgp ensemble data.csv                        # the 24 paper kernels, BMA, 20 % held out
    amorgp ensemble data.csv -k SE -k "SE + PER" -k "LIN + SE*PER" --weighting stacking --json
    amorgp ensemble airline.csv --plot ensemble.png
    amorgp search data.csv --depth 3 --beam 2 --refine 5
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from amorgp.cli._common import (
    Refine,
    announce,
    check_kernels,
    fmt,
    inference_options,
    load_amortizer,
    running,
)
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import (
    SCHEMA_VERSION,
    check_plot_path,
    emit,
    json_document,
    json_option,
    json_text,
    plot_option,
)
from amorgp.cli._plots import plot_ensemble
from amorgp.cli.predict import holdout_scores, split_mode_option, split_table

if TYPE_CHECKING:
    from amorgp.amortizer.api import Amortizer
    from amorgp.amortizer.frontends.io import Dataset
    from amorgp.ensembles import KernelEnsemble, SearchResult

__all__ = ["ensemble", "search"]


def _kernels(amz: Amortizer, table: Dataset, given: tuple[str, ...], preset: str) -> list[Any]:
    from amorgp.kernel_grammar import paper_evaluation_set

    if given:
        return check_kernels(amz, list(given), table)
    d = table.X.shape[1]
    return [t.broadcast(d) for t in paper_evaluation_set(0)] if preset == "paper24" else []


def _lml_original(fit: Any) -> float | None:
    """The log marginal likelihood of ``fit`` in the data's original units (the
    normalised one plus the normalisation's constant), ``None`` if unknown."""
    value = getattr(fit, "log_marginal_likelihood_original", None)
    return float(value) if value is not None and math.isfinite(value) else None


def _member_rows(ens: KernelEnsemble, test: Dataset | None) -> list[dict[str, Any]]:
    import numpy as np

    rows = ens.table()
    for row, fit in zip(rows, ens.fits, strict=True):
        row["log_marginal_likelihood_original"] = (
            None if row["status"] == "failed" else _lml_original(fit)
        )
    if test is None or test.y is None:
        return rows
    for row, fit in zip(rows, ens.fits, strict=True):
        if fit is None or row["status"] == "failed":
            continue
        m, v = (np.asarray(t) for t in fit.predict(test.X))
        row["test_rmse"], row["test_nll"] = holdout_scores(test.y, m, v)
    return rows


@click.command("ensemble", cls=AmorgpCommand)
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--kernel", "-k", "kernel_texts", multiple=True, help="A member kernel (repeatable).")
@click.option(
    "--kernels",
    "preset",
    type=click.Choice(["paper24"]),
    default="paper24",
    show_default=True,
    help="Member set when no --kernel is given: the paper's 24 evaluation kernels.",
)
@click.option(
    "--weighting",
    type=click.Choice(["bma", "uniform", "stacking"]),
    default="bma",
    show_default=True,
    help="bma: softmax of the log marginal likelihoods; stacking: held-out log score.",
)
@click.option(
    "--split",
    type=float,
    default=0.2,
    show_default=True,
    help="Fraction of DATA held out for the predictive metrics (0: none): random rows "
    "by default, the last rows of the file with --split-mode last.",
)
@split_mode_option
@plot_option("Write a plot of the mixture and its top members (checked before the work).")
@json_option("Print JSON only on stdout.")
@inference_options
def ensemble(
    data: Path,
    kernel_texts: tuple[str, ...],
    preset: str,
    weighting: str,
    split: float,
    split_mode: str,
    plot_path: Path | None,
    as_json: bool,
    target: str | None,
    seed: int,
    refine: Refine,
) -> None:
    """Bayesian model averaging over kernel structures for the table DATA (CSV with a header)."""
    train, test = _prepare(data, target, split, seed, plot_path, split_mode)
    amz = load_amortizer(seed)
    kernels = _kernels(amz, train, kernel_texts, preset)
    n = int(train.X.shape[0])
    terms = [sum(len(a) for a in k.dims) for k in kernels]
    announce(
        n,
        int(train.X.shape[1]),
        terms,
        amz.gp_backend(n, max(terms), graph=False),
        refine,
        amz.calibrate,
    )
    inference = amz.method(refine=refine)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, running("ensemble"):
        warnings.simplefilter("always")
        ens, rows, scores = _fit(inference, train, test, kernels, weighting, seed)
    elapsed = time.perf_counter() - t0
    for w in caught:
        click.echo(f"Warning: {w.message}", err=True)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "command": "ensemble",
        "data": str(data),
        "weighting": weighting,
        "n_train": int(train.X.shape[0]),
        "n_test": 0 if test is None else int(test.X.shape[0]),
        "split": {"fraction": split, "mode": split_mode} if test is not None else None,
        "members": rows,
        "ensemble": None if scores is None else {"test_rmse": scores[0], "test_nll": scores[1]},
        "time_s": elapsed,
    }
    emit(json_text(summary, indent=2) if as_json else _ensemble_text(summary, ens.n_members))
    if plot_path is not None:
        plot_ensemble(plot_path, ens, train, test)
        if as_json:
            click.echo(f"plot written to {plot_path}", err=True)
        else:
            emit(f"plot written to {plot_path}")


def _prepare(
    data: Path,
    target: str | None,
    split: float,
    seed: int,
    plot_path: Path | None,
    split_mode: str = "random",
) -> tuple[Dataset, Dataset | None]:
    """Check the options, read DATA and hold out ``split`` of it (before any inference)."""
    from amorgp.amortizer.frontends.io import read_csv

    if not 0.0 <= split < 1.0:
        raise click.BadParameter(f"must lie in [0, 1), got {split}", param_hint="--split")
    if plot_path is not None:
        check_plot_path(plot_path)
    table = read_csv(data, target)
    train, test = split_table(table, split, seed, split_mode) if split > 0 else (table, None)
    if plot_path is not None and train.X.shape[1] > 1 and test is None:
        raise click.BadParameter(
            "a plot of d > 1 data needs held-out points (--split > 0)", param_hint="--plot"
        )
    return train, test


def _fit(
    inference: Any,
    train: Dataset,
    test: Dataset | None,
    kernels: list[Any],
    weighting: str,
    seed: int,
) -> tuple[KernelEnsemble, list[dict[str, Any]], tuple[float, float] | None]:
    """The ensemble, its member rows (with test scores) and the mixture's test scores."""
    from amorgp.ensembles import KernelEnsemble

    ens = KernelEnsemble.fit(
        inference,
        train.X,
        train.y,
        kernels,
        weighting=weighting,  # type: ignore[arg-type]
        generator=_generator(seed),
    )
    rows = _member_rows(ens, test)
    if test is None or test.y is None:
        return ens, rows, None
    mix = ens.predictive(test.X)
    return ens, rows, holdout_scores(test.y, mix.mean().numpy(), mix.variance().numpy())


def _ensemble_text(summary: dict[str, Any], n_members: int) -> str:
    lines = [
        f"{n_members} kernels, {summary['weighting']} weights, n_train = {summary['n_train']}"
        + (f", n_test = {summary['n_test']}" if summary["n_test"] else "")
        + f", {summary['time_s']:.2f} s",
        f"  {'kernel':<34} {'weight':>8} {'log ML':>10} {'test RMSE':>10} {'test NLL':>9}"
        "   (log ML: log marginal likelihood in the data's original units)",
    ]
    for r in sorted(summary["members"], key=lambda r: -r["weight"]):
        lml = r["log_marginal_likelihood_original"]
        if r["status"] == "failed":
            lml_text = "failed"
        else:
            lml_text = "-" if lml is None else f"{lml:.2f}"
        lines.append(
            f"  {r['kernel']:<34} {r['weight']:>8.3f} {lml_text:>10} "
            f"{fmt(r.get('test_rmse')):>10} {fmt(r.get('test_nll')):>9}"
        )
    scores = summary["ensemble"]
    if scores is not None:
        lines.append(
            f"ensemble: test RMSE {scores['test_rmse']:.4g}   test NLL {scores['test_nll']:.4g} "
            "(per point, original units)"
        )
    return "\n".join(lines)


def _generator(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


@click.command("search", cls=AmorgpCommand)
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--depth", type=click.IntRange(min=0), default=3, show_default=True, help="Expansion levels."
)
@click.option(
    "--beam",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Structures kept per level.",
)
@click.option("--criterion", type=click.Choice(["bic", "lml"]), default="bic", show_default=True)
@click.option(
    "--max-addends",
    type=click.IntRange(min=1, max=6),
    default=4,
    show_default=True,
    help="Addends per dimension at most (the network was trained with <= 6).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Structures listed per level; the best ones refitted with --refine (not with 0).",
)
@json_option("Print JSON only on stdout.")
@inference_options
def search(
    data: Path,
    depth: int,
    beam: int,
    criterion: str,
    max_addends: int,
    top: int,
    as_json: bool,
    target: str | None,
    seed: int,
    refine: Refine,
) -> None:
    """Greedy/beam search for the kernel structure of the table DATA, scored by the
    amortized log marginal likelihood (or BIC; after the exact scale and noise unless
    --no-calibrate); the best --top structures are then refitted with --refine (by default
    refined until at an optimum; --refine 0: not refitted)."""
    from amorgp.amortizer.frontends.io import read_csv
    from amorgp.ensembles import describe_structure, format_description

    table = read_csv(data, target)
    amz = load_amortizer(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = _run_search(amz, table, depth, beam, criterion, max_addends, top, refine)
        terms = describe_structure(res.best.fit, table.X)
    for w in {str(w.message) for w in caught}:
        click.echo(f"Warning: {w}", err=True)
    if as_json:
        emit(json_text(_search_json(str(data), criterion, res, terms, table, top), indent=2))
        return
    emit(_criterion_note(criterion))
    for i, lvl in enumerate(res.levels):
        emit(
            f"level {i}: {len(lvl)} structures; best "
            + ", ".join(f"{c.structure} ({_shown_score(c, criterion)})" for c in lvl[:top])
        )
    emit(
        f"best structure ({_shown_score(res.best, criterion)}, {res.n_scored} structures "
        f"scored in {res.time_s:.2f} s{', refined' if res.refined else ''}): {res.best.structure}"
    )
    emit(format_description(terms, list(table.feature_names)))


def _criterion_note(criterion: str) -> str:
    if criterion == "bic":
        return (
            "scores: BIC = -2 log ML + k log n (k: hyperparameters and noise), log marginal "
            "likelihood in the data's original units; lower is better"
        )
    return (
        "scores: log ML, the log marginal likelihood in the data's original units; higher is better"
    )


def _offset(fit: Any) -> float:
    """Original-unit minus normalised log marginal likelihood (the same for every
    structure on one dataset; 0 where a fit carries no original units)."""
    original = getattr(fit, "log_marginal_likelihood_original", None)
    normalised = getattr(fit, "log_marginal_likelihood", None)
    if original is None or normalised is None:
        return 0.0
    diff = float(original) - float(normalised)
    return diff if math.isfinite(diff) else 0.0


def _scores(c: Any, criterion: str) -> dict[str, float | None]:
    """``log_marginal_likelihood_original`` and, for BIC, ``bic`` (conventional sign,
    lower is better, original units) of a scored candidate (``None`` if it failed)."""
    if not math.isfinite(c.score):
        return {"log_marginal_likelihood_original": None, "bic": None}
    off = _offset(c.fit)
    out: dict[str, float | None] = {
        "log_marginal_likelihood_original": c.log_marginal_likelihood + off
    }
    if criterion == "bic":
        out["bic"] = -2.0 * (c.score + off)
    return out


def _shown_score(c: Any, criterion: str) -> str:
    s = _scores(c, criterion)
    if s["log_marginal_likelihood_original"] is None:
        return "failed"
    if criterion == "bic":
        return f"BIC {s['bic']:.2f}"
    return f"log ML {s['log_marginal_likelihood_original']:.2f}"


def _run_search(
    amz: Amortizer,
    table: Dataset,
    depth: int,
    beam: int,
    criterion: str,
    max_addends: int,
    top: int,
    refine: Refine,
) -> SearchResult:
    """The structure search with a progress bar on stderr (only on a terminal)."""
    from tqdm import tqdm

    from amorgp.ensembles import structure_search

    bar = tqdm(total=depth + 1, desc="search levels", disable=None, file=sys.stderr, leave=False)

    def progress(level: int, n: int, best: float) -> None:
        bar.set_postfix(scored=n, best=f"{best:.2f}")
        bar.update(1)

    try:
        return structure_search(
            amz.method(refine=0),  # candidates scored by the amortized answer
            table.X,
            table.y,
            depth=depth,
            beam=beam,
            criterion=criterion,  # type: ignore[arg-type]
            max_addends=max_addends,
            refine=None if refine == 0 else amz.method(refine=refine),
            refine_top=top,
            progress=progress,
        )
    finally:
        bar.close()


def _search_json(
    data: str, criterion: str, res: SearchResult, terms: list[Any], table: Dataset, top: int
) -> dict[str, Any]:
    best = res.best
    return json_document(
        "search",
        {
            "data": data,
            "criterion": criterion,
            "score_note": "score: the search's criterion in normalised units, higher is "
            "better (lml: log ML; bic: log ML - k log n / 2); bic: the conventional BIC "
            "in original units, lower is better",
            "n_scored": res.n_scored,
            "time_s": res.time_s,
            "best": {
                "kernel": str(best.structure),
                "score": best.score,
                "log_marginal_likelihood": best.log_marginal_likelihood,
                **_scores(best, criterion),
                "terms": [
                    {
                        "dim": t.dim,
                        "column": table.feature_names[t.dim],
                        "symbol": t.symbol,
                        "variance_share": t.share,
                        "normalised": t.hyperparameters,
                        "original": t.original,
                    }
                    for t in terms
                ],
            },
            "levels": [
                [
                    {
                        "kernel": str(c.structure),
                        "score": c.score if math.isfinite(c.score) else None,
                        **_scores(c, criterion),
                    }
                    for c in lvl[:top]
                ]
                for lvl in res.levels
            ],
        },
    )
