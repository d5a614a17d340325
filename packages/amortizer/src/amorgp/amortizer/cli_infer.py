"""``amorgp infer``, ``amorgp predict`` and ``amorgp demo`` (added to the ``amorgp`` group by :func:`register`).

Exit codes: 0 success; 1 (``click.ClickException``) for a problem with the data or
the checkpoint (unreadable or invalid CSV, NaN/Inf, non-numeric or constant columns,
fewer than three rows, a corrupted checkpoint); 2 (``click.UsageError``) for bad
usage (unknown target column, a kernel that does not parse or does not match the
number of input columns, conflicting options).  User errors never print a traceback.

Examples::

    amorgp demo --plot airline.png
    amorgp infer data.csv --kernel "SE + PER" --kernel "LIN + SE*PER" --json
    amorgp predict data.csv --kernel "SE*PER + LIN" --split 0.2 --plot pred.png --refine 10
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np
import torch

from amorgp.amortizer.api import Amortizer, KernelResult
from amorgp.amortizer.io import Dataset, read_csv

__all__ = ["DEMO_DATA", "DEMO_KERNELS", "demo", "infer", "predict", "register"]

DEMO_DATA = Path(__file__).parent / "data" / "airline.csv"
DEMO_KERNELS = ("SE", "LIN + PER", "SE + PER", "LIN + SE*PER", "SE*LIN + PER", "SE + LIN*PER")

F = TypeVar("F", bound=Callable[..., Any])


def _common(f: F) -> F:
    options = [
        click.option("--target", help="Target column (default: the last column)."),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Seed of the encoder subset and splits.",
        ),
        click.option(
            "--device", help="torch device, e.g. cpu or cuda (default: cuda if available)."
        ),
        click.option(
            "--dtype",
            type=click.Choice(["float64", "float32"]),
            default="float64",
            show_default=True,
            help="dtype of the GP algebra (the network runs in float32).",
        ),
        click.option(
            "--checkpoint",
            type=click.Path(path_type=Path),
            help="Checkpoint directory (default: the bundled pretrained model).",
        ),
        click.option(
            "--refine",
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            help="L-BFGS iterations of Type-2 ML started from the amortized prediction.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _amortizer(checkpoint: Path | None, device: str | None, dtype: str, seed: int) -> Amortizer:
    if device is not None:
        try:
            dev = torch.device(device)
        except RuntimeError as err:
            raise click.UsageError(f"--device: {err}") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise click.UsageError("--device cuda: no CUDA device is available")
    try:
        return Amortizer.from_pretrained(
            checkpoint,
            device=device,
            dtype=torch.float64 if dtype == "float64" else torch.float32,
            seed=seed,
        )
    except ValueError as err:
        raise click.ClickException(f"cannot load the model: {err}") from None


def _read(path: Path, target: str | None, **kwargs: Any) -> Dataset:
    try:
        return read_csv(path, target, **kwargs)
    except ValueError as err:
        if "unknown target column" in str(err):
            raise click.UsageError(f"--target: {err}") from None
        raise click.ClickException(str(err)) from None


def _structures(amz: Amortizer, kernels: Sequence[str], data: Dataset) -> None:
    d = data.X.shape[1]
    for k in kernels:
        try:
            amz.structure(k, d)
        except ValueError as err:
            raise click.UsageError(
                f"--kernel {k!r}: {err} (the data have {d} input column(s): {', '.join(data.feature_names)})"
            ) from None


def _infer(
    amz: Amortizer, data: Dataset, kernels: Sequence[str], refine: int
) -> list[KernelResult]:
    assert data.y is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            results = amz.infer_many(data.X, data.y, list(kernels), refine=refine)
        except ValueError as err:
            raise click.ClickException(str(err)) from None
    for w in caught:  # one clean line on stderr instead of a warnings traceback line
        click.echo(f"Warning: {w.message}", err=True)
    return results


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}"


def _table(results: Sequence[KernelResult], data: Dataset) -> str:
    lines = []
    for r in results:
        lines.append(
            f"kernel {r.kernel_text}   log marginal likelihood {r.log_marginal_likelihood_original:.2f} "
            f"(normalised {r.log_marginal_likelihood:.2f})   noise {_fmt(r.noise_original)} "
            f"(normalised {_fmt(r.noise)})"
        )
        lines.append(
            f"  {'dim':<12} {'symbol':<8} {'parameter':<16} {'normalised':>11} {'original':>11}"
        )
        for h in r.table:
            col = data.feature_names[h.dim] if h.dim < len(data.feature_names) else str(h.dim)
            lines.append(
                f"  {col:<12} {h.symbol:<8} {h.name:<16} {_fmt(h.value):>11} {_fmt(h.original):>11}"
            )
    t = results[0].time_s
    lines.append(
        f"{len(results)} kernel(s), n = {results[0].n_points} (encoder read {results[0].encoder_points}), "
        f"{1e3 * t:.1f} ms in total; '-' = no exact original-unit value (LIN terms)"
    )
    return "\n".join(lines)


@click.command("infer")
@click.argument("data", type=click.Path(path_type=Path))
@click.option(
    "--kernel",
    "-k",
    "kernels",
    multiple=True,
    required=True,
    help="Kernel expression (repeatable), e.g. 'SE + PER'.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_common
def infer(
    data: Path,
    kernels: tuple[str, ...],
    as_json: bool,
    target: str | None,
    seed: int,
    device: str | None,
    dtype: str,
    checkpoint: Path | None,
    refine: int,
) -> None:
    """Amortized GP hyperparameters of each --kernel for the table DATA (CSV with a header)."""
    table = _read(data, target)
    amz = _amortizer(checkpoint, device, dtype, seed)
    _structures(amz, kernels, table)
    results = _infer(amz, table, kernels, refine)
    if as_json:
        out = {
            "data": str(data),
            "target": table.target_name,
            "features": list(table.feature_names),
            "results": [r.to_dict() for r in results],
        }
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(_table(results, table))


def _predictor(result: KernelResult) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    def f(Xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, v = result.predict(Xq, include_noise=True)
        return m.numpy(), np.sqrt(v.numpy())

    return f


def _save_figure(fig: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        tmp.replace(path)
    except OSError as err:
        raise click.ClickException(f"cannot write the plot {path}: {err.strerror or err}") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def _plot_prediction(
    path: Path, result: KernelResult, train: Dataset, test: Dataset | None
) -> None:
    from amorgp.amortizer.plotting import plot_predictive_1d, plot_slices, require_matplotlib

    try:
        plt = require_matplotlib()
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    assert train.y is not None
    d = train.X.shape[1]
    if d == 1:
        fig, ax = plt.subplots(figsize=(8, 4))
        plot_predictive_1d(
            ax,
            train.X,
            train.y,
            _predictor(result),
            X_test=None if test is None else test.X,
            y_test=None if test is None else test.y,
            label=result.kernel_text,
        )
        ax.set_xlabel(train.feature_names[0])
        ax.set_ylabel(train.target_name or "y")
    else:
        cols = min(d, 4)
        rows = math.ceil(d / cols)
        fig, axs = plt.subplots(
            rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, layout="constrained"
        )
        flat = list(axs.reshape(-1))
        plot_slices(
            flat[:d], train.X, train.y, _predictor(result), feature_names=train.feature_names
        )
        for ax in flat[d:]:
            ax.axis("off")
        for ax in axs[:, 0]:
            ax.set_ylabel(train.target_name or "y")
        fig.suptitle(f"{result.kernel_text}: slices through the training medians")
    _save_figure(fig, path)
    plt.close(fig)


@click.command("predict")
@click.argument("data", type=click.Path(path_type=Path))
@click.option("--kernel", "-k", required=True, help="Kernel expression, e.g. 'SE*PER + LIN'.")
@click.option(
    "--test",
    "test_path",
    type=click.Path(path_type=Path),
    help="CSV of test inputs (targets optional).",
)
@click.option(
    "--split", type=float, help="Hold out this fraction of DATA (0 < split < 1) as test set."
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a plot (PNG) here.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write test predictions (CSV) here.",
)
@_common
def predict(
    data: Path,
    kernel: str,
    test_path: Path | None,
    split: float | None,
    plot_path: Path | None,
    output: Path | None,
    target: str | None,
    seed: int,
    device: str | None,
    dtype: str,
    checkpoint: Path | None,
    refine: int,
) -> None:
    """GP predictions on a test set with amortized hyperparameters; RMSE and NLL when targets are known."""
    if (test_path is None) == (split is None):
        raise click.UsageError("give exactly one of --test TEST.csv or --split FRACTION")
    if split is not None and not 0.0 < split < 1.0:
        raise click.UsageError(f"--split must lie strictly between 0 and 1, got {split}")
    table = _read(data, target)
    assert table.y is not None
    if split is not None:
        n = table.X.shape[0]
        n_test = round(split * n)
        if n_test < 1 or n - n_test < 3:
            raise click.UsageError(
                f"--split {split} leaves {n - n_test} training and {n_test} test rows of {n}; "
                "need at least 3 training rows and 1 test row"
            )
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
        te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
        train = Dataset(table.X[tr], table.y[tr], table.feature_names, table.target_name)
        test = Dataset(table.X[te], table.y[te], table.feature_names, table.target_name)
        if float(np.ptp(train.y)) == 0.0:  # type: ignore[arg-type]
            raise click.ClickException("the training part of the split has a constant target")
    else:
        assert test_path is not None
        train = table
        try:
            test = read_csv(
                test_path,
                table.target_name if target is None else target,
                require_target=False,
                feature_names=table.feature_names,
                training=False,
            )
        except ValueError as err:
            if "unknown target column" in str(err):
                test = _read(
                    test_path,
                    None,
                    require_target=False,
                    feature_names=table.feature_names,
                    training=False,
                )
            else:
                raise click.ClickException(str(err)) from None
    amz = _amortizer(checkpoint, device, dtype, seed)
    _structures(amz, [kernel], train)
    (result,) = _infer(amz, train, [kernel], refine)
    t0 = time.perf_counter()
    try:
        mean_t, var_t = result.predict(test.X, include_noise=True)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    t_pred = time.perf_counter() - t0
    mean, var = mean_t.numpy(), var_t.numpy()
    click.echo(
        f"kernel {result.kernel_text}: n_train = {train.X.shape[0]}, n_test = {test.X.shape[0]}, "
        f"inference {1e3 * result.time_s:.1f} ms, prediction {1e3 * t_pred:.1f} ms"
        + (f", refined with {refine} L-BFGS iterations" if refine else "")
    )
    if test.y is not None:
        rmse = float(np.sqrt(np.mean((test.y - mean) ** 2)))
        nll = float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (test.y - mean) ** 2 / var))
        click.echo(f"test RMSE {rmse:.4g}   test NLL {nll:.4g} (per point, original units)")
    if output is not None:
        header = ",".join([*test.feature_names, "mean", "std"])
        body = np.column_stack([test.X, mean, np.sqrt(var)])
        tmp = output.with_name(f".{output.name}.tmp")
        try:
            np.savetxt(tmp, body, delimiter=",", header=header, comments="", fmt="%.10g")
            tmp.replace(output)
        except OSError as err:
            raise click.ClickException(f"cannot write {output}: {err.strerror or err}") from None
        click.echo(f"predictions written to {output}")
    if plot_path is not None:
        _plot_prediction(plot_path, result, train, test)
        click.echo(f"plot written to {plot_path}")


@click.command("demo")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("amorgp-demo.png"),
    show_default=True,
    help="Where to write the figure.",
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
@_common
def demo(
    plot_path: Path,
    no_plot: bool,
    kernels: tuple[str, ...],
    no_baseline: bool,
    target: str | None,
    seed: int,
    device: str | None,
    dtype: str,
    checkpoint: Path | None,
    refine: int,
) -> None:
    """Airline passengers 1949-1960: amortized hyperparameters of several kernels next to Type-2 ML."""
    table = _read(DEMO_DATA, target)
    assert table.y is not None
    chosen = list(kernels) or list(DEMO_KERNELS)
    amz = _amortizer(checkpoint, device, dtype, seed)
    _structures(amz, chosen, table)
    _infer(amz, table, chosen[:1], 0)  # warm-up (first-call allocations), not timed
    t0 = time.perf_counter()
    results = _infer(amz, table, chosen, refine)
    t_amortized = time.perf_counter() - t0
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
    click.echo(
        f"airline passengers (Box & Jenkins 1949-1960), n = {n}, "
        f"input {table.feature_names[0]}, target {table.target_name}"
    )
    click.echo(f"model: {amz.network.model}, vocabulary {', '.join(amz.vocabulary.symbols)}")
    click.echo(
        "hyperparameters in original units (years, thousands of passengers); LIN terms have "
        "no exact original-unit value and are shown normalised"
    )
    offset = results[0].normalization.lml_offset(n)
    cols = ["amortized"] + (["Type-2 ML"] if baseline is not None else [])
    for i, r in enumerate(results):
        click.echo("")
        click.echo(f"{'kernel ' + r.kernel_text:<32}" + "".join(f"{c:>13}" for c in cols))
        for h in r.table:
            name = f"{h.symbol}.{h.name}" + (" (normalised)" if h.original is None else "")
            values = [h.original if h.original is not None else h.value]
            if baseline is not None:
                bv = baseline[i].hyperparameters[(h.dim, h.addend, h.name)]
                bo = r.normalization.to_original(h.dim, h.symbol, _slot(h), bv)
                values.append(bo if bo is not None else bv)
            click.echo(f"  {name:<30}" + "".join(f"{_fmt(v):>13}" for v in values))
        noise = [r.noise_original]
        lml = [r.log_marginal_likelihood_original]
        if baseline is not None:
            noise.append(r.normalization.noise_to_original(baseline[i].noise))
            lml.append(baseline[i].log_marginal_likelihood + offset)
        click.echo(f"  {'noise variance':<30}" + "".join(f"{_fmt(v):>13}" for v in noise))
        click.echo(f"  {'log marginal likelihood':<30}" + "".join(f"{v:>13.2f}" for v in lml))
    click.echo("")
    line = f"time for {len(chosen)} kernels: amortized {1e3 * t_amortized:.1f} ms"
    if refine:
        line += f" (incl. {refine} L-BFGS refinement iterations)"
    if baseline is not None:
        line += f", Type-2 ML (Adam, <= 150 steps) {1e3 * t_baseline:.1f} ms, speed-up x{t_baseline / t_amortized:.1f}"
    click.echo(line)
    if not no_plot:
        best = max(range(len(results)), key=lambda i: results[i].log_marginal_likelihood)
        _demo_plot(plot_path, table, results[best], None if baseline is None else baseline[best])
        click.echo(
            f"plot written to {plot_path} (best amortized kernel: {results[best].kernel_text})"
        )


def _slot(h: Any) -> int:
    from amorgp.kernel_grammar import base_symbol

    return list(base_symbol(h.symbol).param_names).index(h.name)


def _demo_plot(path: Path, table: Dataset, result: KernelResult, baseline: Any | None) -> None:
    from amorgp.amortizer.plotting import plot_predictive_1d, require_matplotlib

    try:
        plt = require_matplotlib()
    except ValueError as err:
        raise click.ClickException(f"{err}; or run the demo with --no-plot") from None
    assert table.y is not None
    panels = 1 if baseline is None else 2
    fig, axs = plt.subplots(1, panels, figsize=(6 * panels, 3.8), squeeze=False, sharey=True)
    plot_predictive_1d(
        axs[0, 0], table.X, table.y, _predictor(result), extend=0.25, label="amortized"
    )
    axs[0, 0].set_title(f"amortized: {result.kernel_text}")
    if baseline is not None:

        def base_pred(Xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            m, v = baseline.predict(Xq)
            return np.asarray(m), np.sqrt(np.asarray(v))

        plot_predictive_1d(
            axs[0, 1], table.X, table.y, base_pred, extend=0.25, label="Type-2 ML", color="C1"
        )
        axs[0, 1].set_title(f"Type-2 ML: {result.kernel_text}")
    for ax in axs[0]:
        ax.set_xlabel(table.feature_names[0])
    axs[0, 0].set_ylabel(table.target_name or "y")
    _save_figure(fig, path)
    plt.close(fig)


def register(group: click.Group) -> None:
    """Add ``infer``, ``predict`` and ``demo`` to ``group``."""
    for command in (infer, predict, demo):
        group.add_command(command)
