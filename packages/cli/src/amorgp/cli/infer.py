"""``amorgp infer``: amortized hyperparameters of one or more kernels for a CSV table.

Examples::

    amorgp infer data.csv --kernel "SE + PER" --kernel "LIN + SE*PER"
    amorgp infer data.csv -k "(SE + LIN)@0 * PER@1" --target y --json > result.json
    amorgp infer sales.parquet --group-by store -k "SE + SE*PER" -o fits.parquet
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from amorgp.cli._common import (
    Refine,
    check_finite,
    constraint_options,
    fmt,
    inference_options,
    kernels_option,
    load_amortizer,
    run_inference,
    starts_option,
)
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import emit, json_document, json_option, json_text

if TYPE_CHECKING:
    from amorgp.amortizer.api import KernelResult
    from amorgp.amortizer.frontends.io import Dataset

__all__ = ["infer"]


UNTOUCHED_NOTE = "* a start's constant, not fitted: use --refine auto"
"""The footnote of the marked hyperparameters (:meth:`KernelResult.untouched`)."""


def _optimum(r: KernelResult) -> str:
    """``yes (gain 0.003 nats)``, ``no (gain 2.3 nats)`` or ``unknown (why)``: whether the
    fit is at an optimum of the log marginal likelihood (:meth:`KernelResult.optimality`)."""
    opt = r.optimality()
    if opt.at_optimum is None:
        return f"unknown ({opt.source})"
    return f"{'yes' if opt.at_optimum else 'no'} (gain {opt.gain:.3g} nats)"


def _how(r: KernelResult) -> str:
    """The line saying how a kernel's fit got there: start, refinement, optimum."""
    steps = "step" if r.refine_steps == 1 else "steps"
    return (
        f"  start {r.start}   refinement {r.refine_status} ({r.refine_steps} {steps})   "
        f"optimum: {_optimum(r)}"
    )


def _table(results: Sequence[KernelResult], data: Dataset) -> str:
    """One block per kernel: how the fit got there (the start that won, the refinement,
    whether it is at an optimum), then its folded hyperparameters (one output scale per
    product term, as ``AmortizedGPRegressor.kernel_``), normalised and in original units;
    a hyperparameter still at a start's constant is marked ``*`` (:data:`UNTOUCHED_NOTE`)."""
    from amorgp.amortizer.frontends.fitted_kernel import Folding
    from amorgp.amortizer.stages.results import evaluate_optimality

    evaluate_optimality(results)
    lines = []
    marked = False
    for r in results:
        lines.append(
            f"kernel {r.kernel_text}   log marginal likelihood {r.log_marginal_likelihood_original:.2f} "
            f"(normalised {r.log_marginal_likelihood:.2f})   noise {fmt(r.noise_original)} "
            f"(normalised {fmt(r.noise)})   network {r.network}"
            + ("   scale and noise calibrated" if r.calibrated else "")
        )
        lines.append(_how(r))
        lines.append(
            f"  {'dim':<12} {'symbol':<8} {'parameter':<16} {'normalised':>11} {'original':>11}"
        )
        folding = Folding(r.kernel)
        normalised = folding.fold([h.value for h in r.table])
        original = folding.fold([h.original for h in r.table])
        untouched = set(r.untouched())
        for n, v, o in zip(folding.names, normalised, original, strict=True):
            col = data.feature_names[n.dim] if n.dim < len(data.feature_names) else str(n.dim)
            mark = " *" if (n.dim, n.addend, n.param) in untouched else ""
            marked = marked or bool(mark)
            lines.append(f"  {col:<12} {n.symbol:<8} {n.param:<16} {fmt(v):>11} {fmt(o):>11}{mark}")
    t = results[0].call_time_s
    lines.append(
        f"{len(results)} kernel(s), n = {results[0].n_points} (encoder read {results[0].encoder_points}), "
        f"{1e3 * t:.1f} ms in total; '-' = no exact original-unit value (LIN terms)"
    )
    if marked:
        lines.append(UNTOUCHED_NOTE)
    if any(r.kernel.n_dims > 1 for r in results):
        lines.append(
            "several columns: the variances of the first column are the output scales of the "
            "product (original: in target units); a later column's first addend has no "
            "variance, its other addends a weight relative to it"
        )
    return "\n".join(lines)


@click.command("infer", cls=AmorgpCommand)
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@kernels_option("Kernel expression (repeatable), e.g. 'SE + PER'.")
@json_option(
    "Print one JSON document (schema_version 1) instead of a table (stdout holds only "
    "the JSON; messages go to stderr)."
)
@click.option(
    "--group-by",
    "group_by",
    multiple=True,
    help="Fit every group of this column (repeatable) as its own dataset: one output row per "
    "group and kernel (CSV or Parquet in; see --output).",
)
@click.option(
    "--input",
    "inputs",
    multiple=True,
    help="Input column (repeatable; with --group-by; default: every column but the group "
    "and target columns).",
)
@click.option(
    "--predict-at",
    "predict_at",
    multiple=True,
    help="With --group-by: a point (inputs separated by commas, repeatable) at which to add "
    "each group's predictive mean and standard deviation.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --group-by: the output file, .csv, .parquet or .jsonl (default: CSV on "
    "stdout, JSON Lines with --json).",
)
@constraint_options
@starts_option
@inference_options
def infer(
    data: Path,
    kernels: tuple[str, ...],
    as_json: bool,
    target: str | None,
    seed: int,
    refine: Refine,
    starts: int | None,
    group_by: tuple[str, ...] = (),
    inputs: tuple[str, ...] = (),
    predict_at: tuple[str, ...] = (),
    output: Path | None = None,
    noise_floor: float | None = None,
    fixed: dict[Any, float] | None = None,
    bounds: dict[Any, tuple[float, float]] | None = None,
) -> None:
    """Amortized GP hyperparameters of each --kernel for the table DATA (CSV with a header).

    A progress bar on stderr (on a terminal) follows long runs; -v logs the size and
    the GP backend.  A result that is not a finite number is refused (exit 1).  With
    --group-by, DATA (CSV or Parquet) holds many datasets, one per group, fitted in
    batches; a group that fails keeps its rows with its error, and a run that fits no
    group writes nothing (exit 1).
    """
    from amorgp.amortizer.frontends.io import read_csv

    if group_by:
        from amorgp.cli._groups import run_groups

        run_groups(
            data, group_by, kernels, target, inputs, predict_at, output, as_json, refine,
            seed, starts, noise_floor=noise_floor, fixed=fixed, bounds=bounds,
        )  # fmt: skip
        return
    for name, given in (("--input", inputs), ("--predict-at", predict_at), ("--output", output)):
        if given:
            raise click.UsageError(f"{name} needs --group-by")

    table = read_csv(data, target)
    amz = load_amortizer(seed)
    amz.starts = starts
    results = run_inference(
        amz, table, kernels, refine, noise_floor=noise_floor, fixed=fixed, bounds=bounds
    )
    check_finite(results)
    if as_json:
        out = json_document(
            "infer",
            {
                "data": str(data),
                "target": table.target_name,
                "features": list(table.feature_names),
                "results": [r.to_dict() for r in results],
            },
        )
        emit(json_text(out, indent=2))
    else:
        emit(_table(results, table))
