"""Options and steps shared by ``infer``, ``predict`` and ``demo``.

Each step raises the library's typed errors (mapped to exit codes by
:class:`~amorgp.amortizer.cli._errors.AmorgpCommand`) or a click exception that
names the option at fault.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from amorgp.amortizer.cli._output import non_finite

if TYPE_CHECKING:
    from amorgp.amortizer.api import Amortizer, KernelResult
    from amorgp.amortizer.io import Dataset
    from amorgp.kernel_grammar import DimWiseStructure

__all__ = [
    "check_device",
    "check_finite",
    "check_kernels",
    "fmt",
    "inference_options",
    "load_amortizer",
    "run_inference",
]

log = logging.getLogger("amorgp.cli")

F = TypeVar("F", bound=Callable[..., Any])


def inference_options(f: F) -> F:
    """``--target --seed --device --dtype --checkpoint --refine --calibrate``."""
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
            type=RefineType(),
            default="0",
            show_default=True,
            help="Most L-BFGS iterations of Type-2 ML started from the amortized prediction, "
            "or 'auto' (until the log marginal likelihood stops improving).",
        ),
        click.option(
            "--calibrate/--no-calibrate",
            default=True,
            show_default=True,
            help="Set each kernel's global scale and noise to their exact Type-2 ML values "
            "after the network (one eigendecomposition per kernel; before --refine); "
            "--no-calibrate: the network's prediction alone.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


Refine = int | Literal["auto"]
"""``--refine`` after :class:`RefineType`: ``infer_many``'s ``refine`` as it is."""


class RefineType(click.ParamType):
    """``--refine``: a non-negative integer or ``auto`` (the default ``"0"`` converts too)."""

    name = "N|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> Refine:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit():
            return int(text)
        self.fail(f"{value!r} is neither a non-negative integer nor 'auto'", param, ctx)


class _ProgressBars:
    """A :data:`~amorgp.amortizer.inference.Progress` hook drawing one tqdm bar per stage
    on stderr (switched off when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.stage = ""
        self.bar: Any = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if stage != self.stage:
            self.close()
            self.stage = stage
            self.bar = tqdm(total=total, desc=stage, disable=None, file=sys.stderr, leave=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def check_device(device: str | None) -> None:
    """Raise a usage error for a ``--device`` torch does not know or cannot use."""
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise click.BadParameter(str(err), param_hint="--device") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise click.BadParameter(f"{device}: use cpu, cuda or mps", param_hint="--device")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise click.BadParameter(f"{device}: no CUDA device is available", param_hint="--device")


def load_amortizer(
    checkpoint: Path | None, device: str | None, dtype: str, seed: int, calibrate: bool = True
) -> Amortizer:
    """The network of ``--checkpoint`` (default: the bundled model) on ``--device``, with
    ``--calibrate`` as its default for every kernel it fits."""
    import torch

    from amorgp.amortizer.api import Amortizer

    check_device(device)
    try:
        return Amortizer.from_pretrained(
            checkpoint,
            device=device,
            dtype=torch.float64 if dtype == "float64" else torch.float32,
            seed=seed,
            calibrate=calibrate,
        )
    except ValueError as err:
        raise click.ClickException(f"cannot load the model: {err}") from None


def check_kernels(amz: Amortizer, kernels: Sequence[str], data: Dataset) -> list[DimWiseStructure]:
    """Parse every ``--kernel`` for the data's input columns (usage error naming it)."""
    d = data.X.shape[1]
    out = []
    for k in kernels:
        try:
            out.append(amz.structure(k, d))
        except ValueError as err:
            raise click.BadParameter(
                f"{k!r}: {err} (the data have {d} input column(s): "
                f"{', '.join(data.feature_names)})",
                param_hint="--kernel",
            ) from None
    return out


def run_inference(
    amz: Amortizer,
    data: Dataset,
    kernels: Sequence[str],
    refine: Refine,
) -> list[KernelResult]:
    """Amortized hyperparameters and log marginal likelihoods of ``kernels``.

    Library output goes to stderr; library warnings become one ``Warning: ...`` line
    each on stderr; progress bars on stderr (only on a terminal) follow the network
    pass, the refinement and each kernel's log marginal likelihood (the slow part for
    large ``n``); ``-v`` logs the size and the GP backend first.
    """
    assert data.y is not None
    structures = check_kernels(amz, kernels, data)
    n, d = data.X.shape
    n_terms = max(sum(len(a) for a in s.dims) for s in structures)
    log.info(
        "working on n = %d points, d = %d, %d kernel(s) with backend %s",
        n,
        d,
        len(kernels),
        amz.gp_backend(n, n_terms, graph=False),
    )
    bars = _ProgressBars()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            results = amz.infer_many(
                data.X,
                data.y,
                list(kernels),
                refine=refine,
                evaluate_lml=True,
                progress=bars,
            )
    finally:
        bars.close()
    for w in caught:  # one clean line on stderr instead of a warnings traceback line
        click.echo(f"Warning: {w.message}", err=True)
    return results


def check_finite(results: Sequence[KernelResult]) -> None:
    """Refuse to report NaN or infinite numbers as a result (exit 1, naming them)."""
    for r in results:
        bad = non_finite(r.to_dict())
        if bad:
            raise click.ClickException(
                f"kernel {r.kernel_text}: the result is not finite ({'; '.join(bad)}); "
                "the data's values are probably beyond the float64 range of the GP algebra: "
                "rescale the columns"
            )


def fmt(x: float | None) -> str:
    """Four significant digits, ``-`` for a missing value."""
    return "-" if x is None else f"{x:.4g}"
