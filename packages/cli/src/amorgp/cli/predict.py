"""``amorgp predict``: GP predictions on a test set with amortized hyperparameters.

Examples::

    amorgp predict data.csv --kernel "SE*PER + LIN" --split 0.2 --plot pred.png
    amorgp predict data.csv -k "SE + PER" --test new.csv --output pred.csv --refine 10
    amorgp predict data.csv -k SE -k "SE + PER" --split 0.2 --output - > pred.csv

Several ``--kernel`` options predict with every kernel (one result block each; the
CSV gets ``mean``/``std`` columns per kernel, suffixed ``[KERNEL]``).  ``--output -``
or ``--output /dev/stdout`` writes the CSV to standard output (the summary lines go
to stderr then).  With ``--test`` (new points to predict) that is the default: without
``--output`` or ``--json`` the predictions go to standard output.  With ``--split`` (an
evaluation) the summary says how to get them when no ``--output`` is given.
"""

from __future__ import annotations

import csv
import io
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click
import numpy as np

from amorgp.amortizer.frontends.io import Dataset, read_csv
from amorgp.cli._common import (
    Refine,
    check_finite,
    constraint_options,
    inference_options,
    kernels_option,
    load_amortizer,
    run_inference,
    running,
    starts_option,
)
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import (
    atomic_write,
    check_output_path,
    check_plot_path,
    emit,
    is_stderr,
    is_stdout,
    json_document,
    json_option,
    json_text,
    plot_option,
)

if TYPE_CHECKING:
    from amorgp.amortizer.api import KernelResult

__all__ = ["predict", "holdout_scores", "write_predictions"]


def write_predictions(
    path: Path,
    names: tuple[str, ...],
    X: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    kernels: Sequence[str] = (),
) -> None:
    """CSV of the test inputs, predictive mean and std, every float written so that it
    reads back exactly (shortest round-trip ``repr``), atomically (see
    :func:`~amorgp.cli._output.atomic_write`), or on standard output when
    ``path`` is ``-`` or ``/dev/stdout``.

    ``mean`` and ``std`` are ``(n,)`` or, with several ``kernels``, ``(n, k)``: the
    columns are then ``mean[KERNEL]``, ``std[KERNEL]`` per kernel.
    """
    mean, std = np.asarray(mean), np.asarray(std)
    if mean.ndim == 1:
        header = ["mean", "std"]
        body = np.column_stack([X, mean, std]).tolist()
    else:
        header = [f"{c}[{k}]" for k in kernels for c in ("mean", "std")]
        pairs = np.stack([mean, std], axis=2).reshape(mean.shape[0], -1)
        body = np.column_stack([X, pairs]).tolist()

    def write_to(fh: TextIO) -> None:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow([*names, *header])
        out.writerows([repr(v) for v in row] for row in body)

    if is_stdout(path):
        text = io.StringIO()
        write_to(text)
        emit(text.getvalue().rstrip("\n"))
        return
    if is_stderr(path):  # the stream itself: never a file renamed over what it points at
        write_to(sys.stderr)
        sys.stderr.flush()
        return

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            write_to(fh)

    atomic_write(path, write)


def holdout_scores(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    """Test RMSE ``sqrt(mean((y - m)^2))`` and mean Gaussian NLL
    ``mean(log(2 pi v) / 2 + (y - m)^2 / (2 v))``, computed without overflow for
    values near the float64 limit (residuals scaled by their largest magnitude).

    Raises:
        click.ClickException: a score is not finite all the same.
    """
    resid = y - mean
    scale = float(np.max(np.abs(resid)))
    rmse = scale * float(np.sqrt(np.mean((resid / scale) ** 2))) if scale > 0 else 0.0
    z = resid / np.sqrt(var)
    nll = float(np.mean(0.5 * np.log(2 * np.pi) + 0.5 * np.log(var) + 0.5 * z**2))
    if not (np.isfinite(rmse) and np.isfinite(nll)):
        raise click.ClickException(
            "the test scores are not finite; the test targets are probably beyond the "
            "float64 range: rescale the columns"
        )
    return rmse, nll


SPLIT_MODES = ("random", "last")
"""How ``--split`` holds rows out: ``random`` rows (seeded by ``--seed``) or the ``last``
rows of the file (the end of a time series)."""


def split_mode_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--split-mode random|last`` option."""
    return click.option(
        "--split-mode",
        type=click.Choice(SPLIT_MODES),
        default="random",
        show_default=True,
        help="Which rows --split holds out: random rows (seeded by --seed), or the last "
        "rows of the file, e.g. the end of a time series (forecasting).",
    )(f)


def split_table(
    table: Dataset, split: float, seed: int, mode: str = "random"
) -> tuple[Dataset, Dataset]:
    """A ``split`` fraction of ``table`` as test rows: random rows (``mode="random"``,
    seeded) or the last rows in file order (``mode="last"``); usage error if too few
    remain."""
    import torch

    assert table.y is not None
    if mode not in SPLIT_MODES:
        raise click.BadParameter(f"use one of {', '.join(SPLIT_MODES)}", param_hint="--split-mode")
    n = table.X.shape[0]
    n_test = round(split * n)
    if n_test < 1 or n - n_test < 3:
        raise click.BadParameter(
            f"{split} leaves {n - n_test} training and {n_test} test rows of {n}; "
            "need at least 3 training rows and 1 test row",
            param_hint="--split",
        )
    if mode == "last":
        tr, te = np.arange(n - n_test), np.arange(n - n_test, n)
    else:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
        te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    train = Dataset(table.X[tr], table.y[tr], table.feature_names, table.target_name)
    test = Dataset(table.X[te], table.y[te], table.feature_names, table.target_name)
    if float(np.ptp(train.y)) == 0.0:  # type: ignore[arg-type]
        raise click.ClickException("the training part of the split has a constant target")
    return train, test


def _check_paths(inputs: list[Path], output: Path | None, plot_path: Path | None) -> None:
    """Validate the output paths before any work (and never overwrite an input)."""
    if output is not None and plot_path is not None and output.resolve() == plot_path.resolve():
        raise click.BadParameter(f"{plot_path}: the same file as --output", param_hint="--plot")
    for path, option in ((output, "--output"), (plot_path, "--plot")):
        if path is None or (option == "--output" and (is_stdout(path) or is_stderr(path))):
            continue
        if any(path.resolve() == p.resolve() for p in inputs):
            raise click.BadParameter(f"{path} is an input file", param_hint=option)
        (check_output_path if option == "--output" else check_plot_path)(path, option)


@click.command("predict", cls=AmorgpCommand)
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@kernels_option("Kernel expression, e.g. 'SE*PER + LIN' (repeatable: predicts with each).")
@click.option(
    "--test",
    "test_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="CSV of test inputs (targets optional).  Without --output or --json the "
    "predictions (CSV: inputs, mean, std) go to standard output and the summary to "
    "standard error.",
)
@click.option(
    "--split",
    type=float,
    help="Hold out this fraction of DATA (0 < split < 1) as test set: random rows by "
    "default, the last rows of the file with --split-mode last.",
)
@split_mode_option
@plot_option(
    "Write a plot here (format by extension: png, pdf, svg, ...); checked before the work."
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write test predictions (CSV, full float precision) here; replaced atomically; "
    "'-' or /dev/stdout: standard output (the default with --test; with --split the "
    "predictions are written only when asked).",
)
@json_option()
@constraint_options
@starts_option
@inference_options
def predict(
    data: Path,
    kernels: tuple[str, ...],
    test_path: Path | None,
    split: float | None,
    split_mode: str,
    plot_path: Path | None,
    output: Path | None,
    as_json: bool,
    target: str | None,
    seed: int,
    refine: Refine,
    starts: int | None,
    noise_floor: float | None = None,
    fixed: dict[Any, float] | None = None,
    bounds: dict[Any, tuple[float, float]] | None = None,
) -> None:
    """GP predictions on a test set with amortized hyperparameters; RMSE and NLL when targets are known."""
    if (test_path is None) == (split is None):
        raise click.UsageError("give exactly one of --test TEST.csv or --split FRACTION")
    if split is not None and not 0.0 < split < 1.0:
        raise click.BadParameter(
            f"must lie strictly between 0 and 1, got {split}", param_hint="--split"
        )
    if plot_path is not None and len(kernels) > 1:
        raise click.BadParameter(
            f"draws one kernel; {len(kernels)} --kernel options given: plot them one at a time",
            param_hint="--plot",
        )
    if as_json and output is not None and is_stdout(output):
        raise click.BadParameter(
            "--json already writes standard output: give --output a file", param_hint="--output"
        )
    if output is None and test_path is not None and not as_json:
        output = Path("-")  # predicting new points: the predictions are the answer
    _check_paths([data] + ([test_path] if test_path else []), output, plot_path)
    table = read_csv(data, target)
    if split is not None:
        train, test = split_table(table, split, seed, split_mode)
    else:
        assert test_path is not None
        train = table
        test = read_csv(
            test_path,
            table.target_name,
            require_target=False,
            feature_names=table.feature_names,
            training=False,
        )
    amz = load_amortizer(seed)
    amz.starts = starts
    results = run_inference(
        amz, train, kernels, refine, noise_floor=noise_floor, fixed=fixed, bounds=bounds
    )
    check_finite(results)
    # the summary goes to stderr when stdout carries the CSV or the JSON document
    say = (
        (lambda text: click.echo(text, err=True))
        if as_json or (output is not None and is_stdout(output))
        else emit
    )
    means, stds, blocks = [], [], []
    for result in results:
        mean, var, block = _predict_one(result, train, test, say)
        means.append(mean)
        stds.append(np.sqrt(var))
        blocks.append(block)
    if output is not None:
        if len(results) == 1:
            write_predictions(output, test.feature_names, test.X, means[0], stds[0])
        else:
            write_predictions(
                output,
                test.feature_names,
                test.X,
                np.stack(means, 1),
                np.stack(stds, 1),
                [r.kernel_text for r in results],
            )
        if not is_stdout(output):
            say(f"predictions written to {output}")
    elif not as_json:
        say(
            "predictions not written: --output FILE (CSV), --output - (standard output) or "
            "--json (mean and std) writes them"
        )
    if plot_path is not None:
        from amorgp.cli._plots import plot_prediction

        plot_prediction(plot_path, results[0], train, test)
        say(f"plot written to {plot_path}")
    if as_json:
        emit(
            json_text(
                json_document(
                    "predict",
                    {
                        "data": str(data),
                        "target": train.target_name,
                        "features": list(train.feature_names),
                        "n_train": int(train.X.shape[0]),
                        "n_test": int(test.X.shape[0]),
                        "split": None if split is None else {"fraction": split, "mode": split_mode},
                        "results": blocks,
                    },
                ),
                indent=2,
            )
        )


def _predict_one(
    result: KernelResult, train: Dataset, test: Dataset, say: Callable[[str], None]
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Predictive mean and variance of one kernel on ``test``, its summary lines said,
    and its JSON block."""
    t0 = time.perf_counter()
    with running(f"prediction ({result.kernel_text}, {test.X.shape[0]} points)"):
        mean_t, var_t = result.predict(test.X, include_noise=True)
    t_pred = time.perf_counter() - t0
    mean, var = np.asarray(mean_t), np.asarray(var_t)
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var > 0).all()):
        raise click.ClickException(
            f"kernel {result.kernel_text}: the predictions are not finite; the data's values "
            "are probably beyond the float64 range of the GP algebra: rescale the columns"
        )
    refined = (", scale and noise calibrated" if result.calibrated else "") + (
        f", refined on a subset of the points: {result.refine_steps} steps (the subset's "
        "optimum, not checked on all points)"
        if result.refine_status == "subset"
        else f", refined: {result.refine_steps} steps ({result.refine_status})"
        if result.refine_status not in ("none", "skipped")
        else ", not refined (skipped: too large for the default refinement, or float32)"
        if result.refine_status == "skipped"
        else ""
    )
    say(
        f"kernel {result.kernel_text}: n_train = {train.X.shape[0]}, n_test = {test.X.shape[0]}, "
        f"inference {1e3 * result.call_time_s:.1f} ms, prediction {1e3 * t_pred:.1f} ms" + refined
    )
    block: dict[str, Any] = {
        "kernel": result.kernel_text,
        "log_marginal_likelihood": result.log_marginal_likelihood_original,
        "prediction_time_s": t_pred,
        "test_rmse": None,
        "test_nll": None,
        "mean": mean.tolist(),
        "std": np.sqrt(var).tolist(),
    }
    if test.y is not None:
        rmse, nll = holdout_scores(test.y, mean, var)
        block["test_rmse"], block["test_nll"] = rmse, nll
        say(f"test RMSE {rmse:.4g}   test NLL {nll:.4g} (per point, original units)")
    return mean, var, block
