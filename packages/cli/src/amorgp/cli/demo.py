"""``amorgp demo``: the airline passenger series, amortized next to Type-2 ML.

The peers are what a practitioner runs: Type-2 ML by L-BFGS with restarts, the project's
``gp-ml-lbfgs`` baseline (:data:`PEER_RESTARTS` starts per kernel: its default start and
prior draws, the best kept; in log space, as scikit-learn) and, where scikit-learn is
installed and has the kernel (sums of products of ``RBF``, ``ExpSineSquared`` and
``DotProduct``), scikit-learn's ``GaussianProcessRegressor(n_restarts_optimizer=3,
normalize_y=True)`` on the input as given, each with its time; the demo also says
what the amortized fit reaches with ``refine="auto"`` (L-BFGS iterations from the
amortized start until the log marginal likelihood stops improving), and its time.

Examples::

    amorgp demo --plot airline.png
    amorgp demo --no-plot --no-baseline -k SE -k "SE + PER"
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Final

import click

from amorgp.amortizer.networks.bundled import DATA_DIR
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
from amorgp.cli._output import check_plot_path, emit, json_document, json_option, plot_option

__all__ = ["DEMO_DATA", "DEMO_KERNELS", "PEER", "PEER_RESTARTS", "demo"]

DEMO_DATA = DATA_DIR / "airline.csv"
DEMO_KERNELS = ("SE", "LIN + PER", "SE + PER", "LIN + SE*PER", "SE*LIN + PER", "SE + LIN*PER")
#: the Type-2 ML peer: L-BFGS (strong-Wolfe line search) with restarts per kernel
PEER: Final = "gp-ml-lbfgs"
PEER_RESTARTS = 3
PEER_LABEL = f"Type-2 ML (L-BFGS, {PEER_RESTARTS} starts)"
SKLEARN_LABEL = f"scikit-learn (L-BFGS, 1 + {PEER_RESTARTS} starts)"


def _sklearn_kernel(text: str) -> Any | None:
    """scikit-learn's kernel of a one-column sum of products of elementary kernels (each
    product with its own ``ConstantKernel`` variance, ``WhiteKernel`` noise), or None where a
    factor has no scikit-learn conversion in its lazy-kernels registration
    (:attr:`amorgp.lazy_kernels.TorchElementary.sklearn`).  Every parameter starts at 1 in
    the grammar's units (scikit-learn's default bounds)."""
    from sklearn.gaussian_process import kernels as sk

    from amorgp.kernel_grammar import ELEMENTARY
    from amorgp.lazy_kernels import TORCH_ELEMENTARY

    total = None
    for term in text.split("+"):
        parts, c = [], 1.0
        for name in (n.strip() for n in term.split("*")):
            form = TORCH_ELEMENTARY.get(name) if name in ELEMENTARY else None
            if form is None or form.sklearn is None:
                return None
            p = dict.fromkeys((q.name for q in ELEMENTARY[name].params), 1.0)
            part, factor = form.sklearn(sk, p, lambda _: (1e-5, 1e5), 0.0, 1.0)
            parts.append(part)
            c *= factor
        product = sk.ConstantKernel(c)
        for part in parts:
            product = product * part
        total = product if total is None else total + product
    return None if total is None else total + sk.WhiteKernel()


def _sklearn_fits(X: Any, y: Any, kernels: list[str], seed: int) -> list[float | None] | None:
    """scikit-learn's log marginal likelihood (standardised targets) per kernel (None where
    it has no such kernel); None without scikit-learn or for several input columns."""
    import importlib.util
    import warnings

    import numpy as np

    if importlib.util.find_spec("sklearn") is None or X.shape[1] != 1:
        return None
    from sklearn.gaussian_process import GaussianProcessRegressor

    x = np.asarray(X, dtype=np.float64)  # the inputs as given, as users pass them
    out: list[float | None] = []
    for text in kernels:
        kernel = _sklearn_kernel(text)
        if kernel is None:
            out.append(None)
            continue
        gpr = GaussianProcessRegressor(
            kernel, n_restarts_optimizer=PEER_RESTARTS, normalize_y=True, random_state=seed
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gpr.fit(x, np.asarray(y, dtype=np.float64))
        out.append(float(gpr.log_marginal_likelihood_value_))
    return out


def _unit(h: Any) -> Any:
    """The :class:`~amorgp.core.units.Unit` of the hyperparameter row ``h``."""
    from amorgp.kernel_grammar import base_symbol

    sym = base_symbol(h.symbol)
    return sym.param_units[list(sym.param_names).index(h.name)]


def _report(
    results: list[Any],
    baseline: list[Any] | None,
    n: int,
    auto: list[Any] | None = None,
    sklearn: list[float | None] | None = None,
) -> None:
    """One block per kernel: hyperparameters, noise and LML (amortized | refine="auto" |
    Type-2 ML | scikit-learn: its log marginal likelihood only)."""
    offset = results[0].normalization.lml_offset(n)
    cols = ["amortized"] + (["auto"] if auto is not None else [])
    cols += ["Type-2 ML"] if baseline is not None else []
    cols += ["scikit-learn"] if sklearn is not None else []
    for i, r in enumerate(results):
        emit("")
        emit(f"{'kernel ' + r.kernel_text:<32}" + "".join(f"{c:>14}" for c in cols))
        for j, h in enumerate(r.table):
            name = f"{h.symbol}.{h.name}" + (" (normalised)" if h.original is None else "")
            values = [h.original if h.original is not None else h.value]
            if auto is not None:
                a = auto[i].table[j]
                values.append(a.original if a.original is not None else a.value)
            if baseline is not None:
                bv = baseline[i].hyperparameters[(h.dim, h.addend, h.name)]
                bo = r.normalization.to_original(h.dim, _unit(h), bv)
                values.append(bo if bo is not None else bv)
            emit(f"  {name:<30}" + "".join(f"{fmt(v):>14}" for v in values))
        noise = [r.noise_original]
        lml = [r.log_marginal_likelihood_original]
        if auto is not None:
            noise.append(auto[i].noise_original)
            lml.append(auto[i].log_marginal_likelihood_original)
        if baseline is not None:
            noise.append(r.normalization.noise_to_original(baseline[i].noise))
            lml.append(baseline[i].log_marginal_likelihood + offset)
        emit(f"  {'noise variance':<30}" + "".join(f"{fmt(v):>14}" for v in noise))
        text = "".join(f"{v:>14.2f}" for v in lml)
        if sklearn is not None:
            sk = sklearn[i]
            text += f"{'-' if sk is None else f'{sk + offset:.2f}':>14}"
        emit(f"  {'log marginal likelihood':<30}" + text)
        if r.start != "network":
            emit(f"  {'amortized start':<30}{r.start}")


@click.command("demo", cls=AmorgpCommand)
@plot_option(
    "Where to write the figure (format by extension; checked before the work).",
    default=Path("amorgp-demo.png"),
    show_default=True,
)
@click.option("--no-plot", is_flag=True, help="Do not draw the figure.")
@click.option(
    "--kernel",
    "-k",
    "kernels",
    multiple=True,
    help=f"Kernels to compare (default: {', '.join(DEMO_KERNELS)}).",
)
@click.option(
    "--no-baseline",
    is_flag=True,
    help=f"Skip the comparison ({PEER_LABEL} per kernel, and the amortized fit with "
    "--refine auto).",
)
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
    refine: Refine,
) -> None:
    """Airline passengers 1949-1960: amortized hyperparameters of several kernels next to
    Type-2 ML by L-BFGS with 3 starts per kernel, and to the amortized fit with
    --refine auto (the library's default refinement at this size).  The first column is
    the amortized answer unless --refine says otherwise."""
    from amorgp.amortizer.frontends.io import read_csv

    if not no_plot:
        try:
            check_plot_path(plot_path)
        except ValueError as err:  # matplotlib is missing
            raise click.ClickException(f"{err}; or run the demo with --no-plot") from None
    table = read_csv(DEMO_DATA, target)
    assert table.y is not None
    chosen = list(kernels) or list(DEMO_KERNELS)
    amz = load_amortizer(seed)
    check_kernels(amz, chosen, table)
    run_inference(amz, table, chosen[:1], 0)  # warm-up (first-call allocations), not timed
    if refine is None:  # the first column is the amortized answer; auto is the second
        refine = 0
    t0 = time.perf_counter()
    results = run_inference(amz, table, chosen, refine)
    t_amortized = time.perf_counter() - t0
    check_finite(results)
    baseline: list[Any] | None = None
    auto: list[Any] | None = None
    sklearn: list[float | None] | None = None
    t_baseline = t_auto = t_sklearn = math.nan
    if not no_baseline:
        import torch

        from amorgp.baselines import fit_many

        if refine != "auto":
            t0 = time.perf_counter()
            auto = run_inference(amz, table, chosen, "auto")
            t_auto = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            baseline = list(
                fit_many(
                    table.X,
                    table.y,
                    chosen,
                    PEER,
                    vocab=amz.vocabulary,
                    generator=torch.Generator().manual_seed(seed),
                    restarts=PEER_RESTARTS,
                    space="log",
                )
            )
        except ValueError as err:
            raise click.ClickException(f"Type-2 ML failed: {err}") from None
        t_baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        sklearn = _sklearn_fits(table.X, table.y, chosen, seed)
        t_sklearn = time.perf_counter() - t0
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
            fields["type2ml_method"] = {
                "method": PEER,
                "restarts": PEER_RESTARTS,
                "space": "log",
            }
        if sklearn is not None:
            fields["sklearn"] = [
                {
                    "kernel": k,
                    "log_marginal_likelihood": v,
                    "log_marginal_likelihood_original": None if v is None else v + offset,
                }
                for k, v in zip(chosen, sklearn, strict=True)
            ]
            fields["sklearn_time_s"] = t_sklearn
        if auto is not None:
            fields["refine_auto"] = [r.to_dict() for r in auto]
            fields["refine_auto_time_s"] = t_auto
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
    _report(results, baseline, n, auto, sklearn)
    emit("")
    line = f"time for {len(chosen)} kernels: amortized {1e3 * t_amortized:.1f} ms"
    if amz.calibrate:
        line += " (incl. the calibration of scale and noise)"
    if any(r.refine_status not in ("none", "skipped") for r in results):
        steps = ", ".join(str(r.refine_steps) for r in results)
        line += f" (incl. the refinement: {steps} steps)"
    if auto is not None:
        line += f"; --refine auto {1e3 * t_auto:.1f} ms"
    if baseline is not None:
        line += (
            f"; {PEER_LABEL} {1e3 * t_baseline:.1f} ms, speed-up x{t_baseline / t_amortized:.1f}"
        )
        if auto is not None:
            line += f" (--refine auto: x{t_baseline / t_auto:.1f})"
    if sklearn is not None:
        line += f"; {SKLEARN_LABEL} {1e3 * t_sklearn:.1f} ms"
    emit(line)
    if baseline is not None:
        offset = results[0].normalization.lml_offset(n)
        lml_peer = [b.log_marginal_likelihood + offset for b in baseline]
        for label, res in (("amortized", results), ("--refine auto", auto)):
            if res is None:
                continue
            ahead = sum(
                r.log_marginal_likelihood_original >= p - 0.5
                for r, p in zip(res, lml_peer, strict=True)
            )
            text = (
                f"{label}: log marginal likelihood within 0.5 of {PEER_LABEL} or above in "
                f"{ahead} of {len(res)} kernels"
            )
            if sklearn is not None and any(v is not None for v in sklearn):
                pairs = [(r, v) for r, v in zip(res, sklearn, strict=True) if v is not None]
                ahead_sk = sum(
                    r.log_marginal_likelihood_original >= v + offset - 0.5 for r, v in pairs
                )
                text += f", of scikit-learn in {ahead_sk} of {len(pairs)}"
            emit(text)
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
