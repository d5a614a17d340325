"""``amorgp demo``: the airline passenger series, amortized next to Type-2 ML.

Examples::

    amorgp demo --plot airline.png
    amorgp demo --no-plot --no-baseline -k SE -k "SE + PER"
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import click

from amorgp.amortizer.bundled import DATA_DIR
from amorgp.amortizer.strictjson import json_text
from amorgp.cli._common import (
    Refine,
    check_finite,
    check_kernels,
    fmt,
    inference_options,
    load_amortizer,
    run_inference,
)
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import check_plot_path, emit, json_document, json_option

__all__ = ["DEMO_DATA", "DEMO_KERNELS", "demo"]

DEMO_DATA = DATA_DIR / "airline.csv"
DEMO_KERNELS = ("SE", "LIN + PER", "SE + PER", "LIN + SE*PER", "SE*LIN + PER", "SE + LIN*PER")


def _slot(h: Any) -> int:
    from amorgp.kernel_grammar import base_symbol

    return list(base_symbol(h.symbol).param_names).index(h.name)


def _report(results: list[Any], baseline: list[Any] | None, n: int) -> None:
    """One block per kernel: hyperparameters, noise and LML (amortized | Type-2 ML)."""
    offset = results[0].normalization.lml_offset(n)
    cols = ["amortized"] + (["Type-2 ML"] if baseline is not None else [])
    for i, r in enumerate(results):
        emit("")
        emit(f"{'kernel ' + r.kernel_text:<32}" + "".join(f"{c:>13}" for c in cols))
        for h in r.table:
            name = f"{h.symbol}.{h.name}" + (" (normalised)" if h.original is None else "")
            values = [h.original if h.original is not None else h.value]
            if baseline is not None:
                bv = baseline[i].hyperparameters[(h.dim, h.addend, h.name)]
                bo = r.normalization.to_original(h.dim, h.symbol, _slot(h), bv)
                values.append(bo if bo is not None else bv)
            emit(f"  {name:<30}" + "".join(f"{fmt(v):>13}" for v in values))
        noise = [r.noise_original]
        lml = [r.log_marginal_likelihood_original]
        if baseline is not None:
            noise.append(r.normalization.noise_to_original(baseline[i].noise))
            lml.append(baseline[i].log_marginal_likelihood + offset)
        emit(f"  {'noise variance':<30}" + "".join(f"{fmt(v):>13}" for v in noise))
        emit(f"  {'log marginal likelihood':<30}" + "".join(f"{v:>13.2f}" for v in lml))
        if r.start != "network":
            emit(f"  {'amortized start':<30}{r.start}")


@click.command("demo", cls=AmorgpCommand)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("amorgp-demo.png"),
    show_default=True,
    help="Where to write the figure (format by extension; checked before the work).",
)
@click.option("--no-plot", is_flag=True, help="Do not draw the figure.")
@click.option(
    "--kernel",
    "-k",
    "kernels",
    multiple=True,
    help=f"Kernels to compare (default: {', '.join(DEMO_KERNELS)}).",
)
@click.option("--no-baseline", is_flag=True, help="Skip the Type-2 ML comparison.")
@json_option()
@inference_options
def demo(
    plot_path: Path,
    no_plot: bool,
    kernels: tuple[str, ...],
    no_baseline: bool,
    as_json: bool,
    target: str | None,
    seed: int,
    device: str | None,
    dtype: str,
    checkpoint: Path | None,
    refine: Refine,
    calibrate: bool,
) -> None:
    """Airline passengers 1949-1960: amortized hyperparameters of several kernels next to Type-2 ML."""
    from amorgp.amortizer.io import read_csv

    if not no_plot:
        try:
            check_plot_path(plot_path)
        except ValueError as err:  # matplotlib is missing
            raise click.ClickException(f"{err}; or run the demo with --no-plot") from None
    table = read_csv(DEMO_DATA, target)
    assert table.y is not None
    chosen = list(kernels) or list(DEMO_KERNELS)
    amz = load_amortizer(checkpoint, device, dtype, seed, calibrate)
    check_kernels(amz, chosen, table)
    run_inference(amz, table, chosen[:1], 0)  # warm-up (first-call allocations), not timed
    t0 = time.perf_counter()
    results = run_inference(amz, table, chosen, refine)
    t_amortized = time.perf_counter() - t0
    check_finite(results)
    baseline: list[Any] | None = None
    t_baseline = math.nan
    if not no_baseline:
        from amorgp.baselines import fit_many

        t0 = time.perf_counter()
        try:
            baseline = list(fit_many(table.X, table.y, chosen, "gp-ml", vocab=amz.vocabulary))
        except ValueError as err:
            raise click.ClickException(f"Type-2 ML failed: {err}") from None
        t_baseline = time.perf_counter() - t0
    n = table.X.shape[0]
    best = max(range(len(results)), key=lambda i: results[i].log_marginal_likelihood)
    if as_json:
        offset = results[0].normalization.lml_offset(n)
        fields: dict[str, Any] = {
            "data": "airline",
            "target": table.target_name,
            "features": list(table.feature_names),
            "results": [r.to_dict() for r in results],
            "best": results[best].kernel_text,
            "amortized_time_s": t_amortized,
        }
        if baseline is not None:
            fields["type2ml"] = [
                {
                    "kernel": r.kernel_text,
                    "log_marginal_likelihood": b.log_marginal_likelihood,
                    "log_marginal_likelihood_original": b.log_marginal_likelihood + offset,
                    "noise": b.noise,
                    "noise_original": r.normalization.noise_to_original(b.noise),
                }
                for r, b in zip(results, baseline, strict=True)
            ]
            fields["type2ml_time_s"] = t_baseline
        emit(json_text(json_document("demo", fields), indent=2))
        if not no_plot:
            from amorgp.cli._plots import plot_demo

            plot_demo(plot_path, table, results[best], None if baseline is None else baseline[best])
            click.echo(f"plot written to {plot_path}", err=True)
        return
    emit(
        f"airline passengers (Box & Jenkins 1949-1960), n = {n}, "
        f"input {table.feature_names[0]}, target {table.target_name}"
    )
    emit(f"model: {amz.network.model}, vocabulary {', '.join(amz.vocabulary.symbols)}")
    emit(
        "hyperparameters in original units (years, thousands of passengers); LIN terms have "
        "no exact original-unit value and are shown normalised"
    )
    _report(results, baseline, n)
    emit("")
    line = f"time for {len(chosen)} kernels: amortized {1e3 * t_amortized:.1f} ms"
    if calibrate:
        line += " (incl. the calibration of scale and noise)"
    if any(r.refine_status != "none" for r in results):
        steps = ", ".join(str(r.refine_steps) for r in results)
        line += f" (incl. L-BFGS refinement: {steps} iterations)"
    if baseline is not None:
        line += f", Type-2 ML (Adam, <= 150 steps) {1e3 * t_baseline:.1f} ms, speed-up x{t_baseline / t_amortized:.1f}"
    emit(line)
    periods = [h.original for h in results[best].table if h.name.endswith("period")]
    if periods:
        emit(
            f"best amortized kernel: {results[best].kernel_text}, period "
            + ", ".join(f"{p:.3f}" for p in periods if p is not None)
            + f" years (start: {results[best].start})"
        )
    if not no_plot:
        from amorgp.cli._plots import plot_demo

        plot_demo(plot_path, table, results[best], None if baseline is None else baseline[best])
        emit(f"plot written to {plot_path} (best amortized kernel: {results[best].kernel_text})")
