"""Options and steps shared by ``infer``, ``predict`` and ``demo``.

Each step raises the library's typed errors (mapped to exit codes by
:class:`~amorgp.cli._errors.AmorgpCommand`) or a click exception that
names the option at fault.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from amorgp.cli._estimate import announce, estimate_seconds
from amorgp.cli._output import non_finite
from amorgp.core.errors import shorten

if TYPE_CHECKING:
    from amorgp.amortizer.api import Amortizer, KernelResult
    from amorgp.amortizer.frontends.io import Dataset
    from amorgp.kernel_grammar import DimWiseStructure

__all__ = [
    "check_device",
    "check_finite",
    "announce",
    "check_kernels",
    "estimate_seconds",
    "running",
    "fmt",
    "inference_options",
    "kernels_option",
    "load_amortizer",
    "run_inference",
]

log = logging.getLogger("amorgp.cli")

F = TypeVar("F", bound=Callable[..., Any])


starts_option = click.option(
    "--starts",
    type=click.IntRange(min=1),
    default=None,
    help="Starts of a kernel with a periodic term (periodogram periods, harmonics; the "
    "best by likelihood wins); 1: the network's prediction alone.  [default: 8, or 1 "
    "with --no-calibrate]",
)
"""The ``--starts`` option of the commands that infer (``amorgp.amortizer.stages.multistart``)."""


def kernels_option(help_text: str) -> Callable[[F], F]:
    """The required, repeatable ``--kernel``/``-k`` option (parameter ``kernels``) of the
    commands that fit the kernels they are given."""
    return click.option("--kernel", "-k", "kernels", multiple=True, required=True, help=help_text)


_INDEX_DIGITS = 6
"""Most digits of a dimension or addend index in a hyperparameter name (a million
dimensions is far beyond any kernel; a 5000-digit index is not even an ``int``)."""


def _index(text: str) -> bool:
    """Whether ``text`` is an index: ASCII digits only (``str.isdigit`` also accepts
    superscripts such as ``²`` that ``int`` refuses), at most :data:`_INDEX_DIGITS`."""
    return text.isascii() and text.isdigit() and len(text) <= _INDEX_DIGITS


def _constraint_name(text: str, option: str) -> str | tuple[int, int, str]:
    """``noise`` or ``DIM.ADDEND.NAME`` (the ``--json`` hyperparameters' ``dim``,
    ``addend`` and ``name``) as a name of ``Amortizer.infer_many``'s ``fixed``/``bounds``;
    the estimator's printed forms are read too (``noise_level``, ``d0.0.lengthscale``,
    ``d0.0.SE.lengthscale``: one naming scheme everywhere)."""
    if text in ("noise", "noise_level"):
        return "noise"
    parts = text.split(".")
    if parts[0][:1] == "d":
        parts[0] = parts[0][1:]
    if len(parts) == 4 and parts[2]:  # DIM.ADDEND.SYMBOL.NAME: the symbol is a label
        parts = [parts[0], parts[1], parts[3]]
    if len(parts) == 3 and _index(parts[0]) and _index(parts[1]) and parts[2]:
        return (int(parts[0]), int(parts[1]), parts[2])
    raise click.BadParameter(
        f"{shorten(text)!r} is not a hyperparameter name: 'noise' or DIM.ADDEND.NAME as in "
        f"--json's hyperparameters, DIM and ADDEND of at most {_INDEX_DIGITS} digits 0-9 "
        "(e.g. 0.0.lengthscale; the estimator's d0.0.SE.lengthscale is read too)",
        param_hint=option,
    )


def _number(text: str, what: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise click.BadParameter(f"{what} {text!r} is not a number", param_hint=option) from None


def _parse_fixed(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[Any, float] | None:
    out: dict[Any, float] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--fixed")
        out[_constraint_name(name.strip(), "--fixed")] = _number(value, name, "--fixed")
    return out or None


def _parse_bounds(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[Any, tuple[float, float]] | None:
    out: dict[Any, tuple[float, float]] = {}
    for item in values:
        name, sep, pair = item.partition("=")
        low, colon, high = pair.partition(":")
        if not (sep and colon):
            raise click.BadParameter(f"{item!r} is not NAME=LOW:HIGH", param_hint="--bounds")
        key = _constraint_name(name.strip(), "--bounds")
        out[key] = (_number(low, "low", "--bounds"), _number(high, "high", "--bounds"))
    return out or None


def constraint_options(f: F) -> F:
    """``--noise-floor --fixed --bounds``: ``Amortizer.infer_many``'s ``noise_floor``,
    ``fixed`` and ``bounds`` (normalised units, names as ``--json``'s hyperparameters)."""
    options = [
        click.option(
            "--noise-floor",
            "noise_floor",
            type=float,
            default=None,
            help="Smallest noise variance of the fit, in normalised units (standardised "
            "targets; default 1e-6).  Lower it (e.g. 1e-10, with --refine auto) for "
            "near-noiseless data; a fit that ends at the floor prints a warning.",
        ),
        click.option(
            "--fixed",
            "fixed",
            multiple=True,
            callback=_parse_fixed,
            metavar="NAME=VALUE",
            help="Hold a hyperparameter at VALUE (repeatable), e.g. --fixed noise=1e-4 or "
            "--fixed 0.1.per_period=0.25.  NAME is 'noise' or DIM.ADDEND.NAME as in --json's "
            "hyperparameters; values in normalised units (inputs scaled to [0, 1], "
            "standardised targets).",
        ),
        click.option(
            "--bounds",
            "bounds",
            multiple=True,
            callback=_parse_bounds,
            metavar="NAME=LOW:HIGH",
            help="Keep a hyperparameter within [LOW, HIGH] during --refine (repeatable; the "
            "start is clipped into them), names and units as --fixed.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


BACKEND_NAMES = ("auto", "cholesky", "cg", "keops", "block", "dense")
"""``--backend``'s choices: :data:`amorgp.lazy_kernels.backends.BACKENDS` (spelled out so
that ``--help`` imports no torch; a test keeps them equal)."""


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Keep a model option in the context, where :func:`load_amortizer` reads it."""
    ctx.meta[f"amorgp.{param.name}"] = value
    return value


def inference_options(f: F) -> F:
    """``--target --seed --device --dtype --backend --memory-budget --checkpoint --refine
    --calibrate``."""
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
            "--device",
            expose_value=False,
            callback=_remember,
            help="torch device, e.g. cpu or cuda (default: cuda if available).",
        ),
        click.option(
            "--dtype",
            type=click.Choice(["float64", "float32"]),
            default="float64",
            show_default=True,
            expose_value=False,
            callback=_remember,
            help="dtype of the GP algebra (the network runs in float32).",
        ),
        click.option(
            "--backend",
            type=click.Choice(BACKEND_NAMES),
            default="auto",
            show_default=True,
            expose_value=False,
            callback=_remember,
            help="GP solver: auto picks dense Cholesky, dense CG, KeOps CG or block CG by "
            "the memory budget; the others force one (dense: Cholesky or dense CG).",
        ),
        click.option(
            "--memory-budget",
            type=click.FloatRange(min=0.0, min_open=True),
            default=4.0,
            show_default=True,
            expose_value=False,
            callback=_remember,
            help="GiB the dense GP backends may use; beyond it auto turns to the lazy solvers.",
        ),
        click.option(
            "--checkpoint",
            type=click.Path(path_type=Path),
            expose_value=False,
            callback=_remember,
            help="Checkpoint directory (default: the bundled pretrained model).",
        ),
        click.option(
            "--refine",
            type=RefineType(),
            default="default",
            show_default=True,
            help="Type-2 ML from the amortized prediction: 'default' (every kernel not at "
            "its optimum refined until one more step is predicted to gain under 0.01 nats, "
            "where the dense float64 Fisher scoring applies, up to 2000 points; above, "
            "none, and the result says so), 'auto' (the same, and L-BFGS rounds above), "
            "or N (at most N iterations; 0: the amortized answer alone).",
        ),
        click.option(
            "--calibrate/--no-calibrate",
            default=True,
            show_default=True,
            expose_value=False,
            callback=_remember,
            help="Set each kernel's global scale and noise to their exact Type-2 ML values "
            "after the network (one tridiagonal reduction per kernel on the CPU; before --refine); "
            "--no-calibrate: the network's prediction alone.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


Refine = int | Literal["auto"] | None
"""``--refine`` after :class:`RefineType`: ``infer_many``'s ``refine`` as it is (``None``:
the default)."""


class RefineType(click.ParamType):
    """``--refine``: a non-negative integer, ``auto`` or ``default`` (``None``, the
    library's default refinement)."""

    name = "N|auto|default"

    def convert(self, value: Any, param: Any, ctx: Any) -> Refine:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        if text == "default":
            return None
        if text.isascii() and text.isdigit() and len(text) <= 9:
            return int(text)
        self.fail(
            f"{shorten(str(value), quote=True)} is neither a non-negative integer (at most 9 "
            "ASCII digits), 'auto' nor 'default'",
            param,
            ctx,
        )


class _ProgressBars:
    """A :data:`~amorgp.amortizer.frontends.inference.Progress` hook: one tqdm bar per stage on
    stderr (only on a terminal), and with ``-v`` one log line per stage on any stderr.

    The library reports the network pass, each refinement round and each kernel's log
    marginal likelihood; the stages between them (the calibration's eigendecompositions,
    the posterior and its CG solves, the prediction) are shown as running stages whose
    elapsed time a background thread keeps moving, so a long step never looks stalled.
    """

    def __init__(self, calibrate: bool = True, refine: bool = False) -> None:
        self.stage = ""
        self.bar: Any = None
        self.calibrate = calibrate
        self.refine = refine
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            self.start(stage, total)
        with self._lock:
            if self.bar is not None:
                self.bar.n = done
                self.bar.refresh()
        if done >= total:
            self._after(stage)

    def _after(self, stage: str) -> None:
        """The running stage that follows a finished library stage."""
        if stage == "network":
            if self.calibrate:
                then = ", then refinement" if self.refine else ""
                self.start(f"calibration (exact scale and noise){then}", 0)
            elif self.refine:
                self.start("refinement (first round)", 0)
            else:
                self.start("posterior (factorisation or CG)", 0)
        elif stage == "refine":
            self.start("posterior (factorisation or CG)", 0)

    def start(self, stage: str, total: int) -> None:
        """Begin ``stage`` (``total == 0``: a running stage without a count)."""
        from tqdm import tqdm

        self.close_bar()
        log.info("%s ... (%.1f s so far)", stage, time.perf_counter() - self.t0)
        with self._lock:
            self.stage = stage
            self.bar = tqdm(
                total=total or None,
                desc=stage,
                disable=None,
                file=sys.stderr,
                leave=False,
                bar_format=None if total else "{desc}: {elapsed}",
            )
            if self.bar.disable:
                return
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self.bar is not None:
                    self.bar.refresh()

    def close_bar(self) -> None:
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    def close(self) -> None:
        self._stop.set()
        self.close_bar()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None


TRAIN_HINT = "pip install 'amorgp-cli[train]' (amorgp-training and amorgp-simulator)"


def require_training(what: str) -> None:
    """Raise :class:`~amorgp.core.errors.MissingExtraError` (one line naming ``what``
    and ``amorgp-training``) unless the training package and the simulator it needs are
    installed."""
    try:
        import amorgp.training  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name is None or not err.name.startswith(("amorgp.training", "amorgp.simulator")):
            raise
        from amorgp.core.errors import MissingExtraError

        raise MissingExtraError(
            f"{what} needs amorgp-training: {TRAIN_HINT}", name=err.name
        ) from None


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
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise click.BadParameter(f"{device}: no MPS device is available", param_hint="--device")


def load_amortizer(seed: int) -> Amortizer:
    """The network of ``--checkpoint`` (default: the bundled model) on ``--device`` in
    ``--dtype``, with ``--calibrate`` as its default for every kernel it fits and the solver
    plan of ``--backend`` and ``--memory-budget`` (all read from the command's context, with
    their defaults outside one)."""
    import torch

    from amorgp.amortizer.api import Amortizer
    from amorgp.core.errors import OptionError

    meta = click.get_current_context(silent=True)
    options = meta.meta if meta is not None else {}
    device = options.get("amorgp.device")
    check_device(device)
    try:
        return Amortizer.from_pretrained(
            options.get("amorgp.checkpoint"),
            device=device,
            dtype=torch.float64
            if options.get("amorgp.dtype", "float64") == "float64"
            else torch.float32,
            seed=seed,
            calibrate=options.get("amorgp.calibrate", True),
            backend=options.get("amorgp.backend", "auto"),
            memory_budget=float(options.get("amorgp.memory_budget", 4.0)) * 2**30,
        )
    except OptionError:
        raise  # an option out of its domain (--seed): a usage error, exit 2
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
    *,
    noise_floor: float | None = None,
    fixed: dict[Any, float] | None = None,
    bounds: dict[Any, tuple[float, float]] | None = None,
) -> list[KernelResult]:
    """Amortized hyperparameters and log marginal likelihoods of ``kernels``.

    Library output goes to stderr; library warnings become one ``Warning: ...`` line
    each on stderr; progress bars on stderr (only on a terminal) follow the network
    pass, the refinement and each kernel's log marginal likelihood (the slow part for
    large ``n``); ``-v`` logs the size and the GP backend first.  ``noise_floor``,
    ``fixed``, ``bounds``: as :meth:`~amorgp.amortizer.frontends.inference.Amortizer.infer_many`'s
    (``None``: its defaults; :func:`constraint_options`).
    """
    assert data.y is not None
    structures = check_kernels(amz, kernels, data)
    n, d = data.X.shape
    terms = [sum(len(a) for a in s.dims) for s in structures]
    announce(n, d, terms, amz.gp_backend(n, max(terms), graph=False), refine, amz.calibrate)
    bars = _ProgressBars(calibrate=amz.calibrate, refine=refine != 0)
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
                noise_floor=noise_floor,
                fixed=fixed,
                bounds=bounds,
            )
    finally:
        bars.close()
    log.info("inference done in %.1f s", time.perf_counter() - bars.t0)
    for w in caught:  # one clean line on stderr instead of a warnings traceback line
        click.echo(f"Warning: {w.message}", err=True)
    return results


@contextlib.contextmanager
def running(stage: str) -> Iterator[None]:
    """Show ``stage`` as a running stage (elapsed time moving on a terminal; logged
    with ``-v``) while the block runs, e.g. the prediction."""
    bars = _ProgressBars()
    bars.start(stage, 0)
    try:
        yield
    finally:
        bars.close()
        log.info("%s done in %.1f s", stage, time.perf_counter() - bars.t0)


def check_finite(results: Sequence[KernelResult]) -> None:
    """Refuse to report NaN or infinite numbers as a result (exit 1, naming them)."""
    for r in results:
        bad = non_finite(r.to_dict(optimality=False))  # the numbers, not the diagnostics
        if bad:
            raise click.ClickException(
                f"kernel {r.kernel_text}: the result is not finite ({'; '.join(bad)}); "
                "the data's values are probably beyond the float64 range of the GP algebra: "
                "rescale the columns"
            )


def fmt(x: float | None) -> str:
    """Four significant digits, ``-`` for a missing value."""
    return "-" if x is None else f"{x:.4g}"
