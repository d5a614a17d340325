"""``amorgp train``: train an amortization network on simulated data.

Examples::

    amorgp train --preset small --phase 1 --out runs/small --max-minutes 60
    amorgp train --out runs/small --resume --max-minutes 60
    amorgp train --phase 2 --from runs/small/last --out runs/small-p2 --max-minutes 10
    torchrun --nproc_per_node 2 -m amorgp.cli train --preset small --out runs/ddp ...
"""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Any

import click

from amorgp.amortizer.networks.config import PRESETS, NetworkConfig, TrainConfig, preset
from amorgp.amortizer.networks.registry import network_names, network_spec
from amorgp.cli._common import check_device, require_training
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import SCHEMA_VERSION, emit, json_option, json_text

__all__ = ["parse_overrides", "train_command"]


BOUNDS: dict[str, tuple[float, float]] = {
    "batch_size": (1, 4096),
    "lr": (1e-12, 1e12),
    "warmup_steps": (0, 10**9),
    "grad_clip": (0.0, 1e6),
    "weight_decay": (0.0, 10.0),
    "alpha": (0.0, 1e6),
    "beta": (0.0, 1e6),
    "n_min": (1, 20_000),
    "n_max": (1, 20_000),
    "max_dims": (1, 64),
    "encoder_points": (0, 20_000),
    "size_buckets": (1, 64),
    "val_size": (1, 100_000),
    "val_every": (1, 10**9),
    "num_workers": (0, 256),
    "seed": (0, 2**63 - 1),
}
"""Inclusive range of every numeric training option ``--set`` accepts: wide enough for
any run this code can carry out on one machine, narrow enough that a typo (an extra
digit) is refused before a run directory is created, never met as an out-of-memory
error, an integer overflow in torch or a half-created run."""


def _check_bounds(key: str, out: float) -> None:
    low, high = BOUNDS.get(key, (-math.inf, math.inf))
    if key == "lr" and out <= 0:
        raise click.BadParameter(f"lr must be positive, got {out:g}", param_hint="--set")
    if not low <= out <= high:
        shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in (low, high, out)]
        raise click.BadParameter(
            f"{key} must lie in [{shown[0]}, {shown[1]}], got {shown[2]}", param_hint="--set"
        )


def _parse_value(key: str, typ: Any, value: str) -> Any:
    if typ is int:
        try:
            number = int(value)
        except ValueError:
            raise click.BadParameter(
                f"{key} expects an integer, got {value!r}", param_hint="--set"
            ) from None
        _check_bounds(key, number)
        return number
    if typ is float:
        try:
            out = float(value)
        except ValueError:
            raise click.BadParameter(
                f"{key} expects a number, got {value!r}", param_hint="--set"
            ) from None
        if not math.isfinite(out):
            raise click.BadParameter(f"{key} must be finite, got {value!r}", param_hint="--set")
        _check_bounds(key, out)
        return out
    if typ is str:
        if key == "inputs":
            from amorgp.simulator.inputs import INPUT_LAWS

            if value not in INPUT_LAWS:
                raise click.BadParameter(
                    f"inputs must be one of {', '.join(INPUT_LAWS)}, got {value!r}",
                    param_hint="--set",
                )
        if key == "prior":
            from amorgp.amortizer.networks.config import TRAINING_PRIORS

            if value not in TRAINING_PRIORS:
                raise click.BadParameter(
                    f"prior must be one of {', '.join(TRAINING_PRIORS)}, got {value!r}",
                    param_hint="--set",
                )
        return value
    raise click.BadParameter(f"{key} cannot be set from the command line", param_hint="--set")


def _check_init_overrides(init_from: Path, extra: dict[str, Any], phase: int) -> None:
    """Validate ``--set`` on top of the recipe stored in ``--from`` (cross-field rules
    such as ``n_min <= n_max``) before the run directory is created."""
    import json

    try:
        stored = json.loads((init_from / "checkpoint.json").read_text())["train"]
        base = TrainConfig.from_dict(stored).to_dict()
    except (OSError, KeyError, TypeError, ValueError):
        return  # the run reports an unreadable checkpoint itself
    from amorgp.training.runstate import check_step_memory

    try:
        check_step_memory(TrainConfig.from_dict({**base, **extra, "phase": phase}))
    except (TypeError, ValueError) as err:
        raise click.BadParameter(str(err), param_hint="--set") from None


def parse_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    """``("lr=1e-4", "batch_size=64")`` -> ``{"lr": 1e-4, "batch_size": 64}``, each value
    parsed by the type of its :class:`~amorgp.amortizer.networks.config.TrainConfig` field.

    Raises:
        click.BadParameter: not ``KEY=VALUE``, an unknown key, ``phase`` (use
            ``--phase``), or a value that does not parse as the field's type.
    """
    types = typing.get_type_hints(TrainConfig)
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"expects KEY=VALUE, got {item!r}", param_hint="--set")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key == "phase":
            raise click.BadParameter("the phase is chosen by --phase", param_hint="--set")
        if key not in types:
            known = ", ".join(k for k in types if k != "phase")
            raise click.BadParameter(
                f"unknown training option {key!r}; known: {known}", param_hint="--set"
            )
        out[key] = _parse_value(key, types[key], value.strip())
    return out


def _check_combination(
    ctx: click.Context, out_dir: Path, resume: bool, init_from: Path | None, phase: int
) -> None:
    if resume:
        given = [
            opt
            for name, opt in (
                ("preset_name", "--preset"),
                ("model", "--model"),
                ("phase", "--phase"),
            )
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if ctx.params["overrides"]:
            given.append("--set")
        if init_from is not None:
            given.append("--from")
        if given:
            raise click.UsageError(
                f"{', '.join(given)} conflict(s) with --resume: a resumed run continues with "
                "the configuration stored in --out",
                ctx,
            )
        return
    if phase == 2 and init_from is None:
        raise click.UsageError(
            "phase 2 fine-tunes a trained network: pass --from runs/NAME/last", ctx
        )
    from amorgp.training.rundir import RunDirectory

    if RunDirectory(out_dir).holds_run():
        raise click.UsageError(
            f"{out_dir} already holds a run: add --resume to continue it, or choose another --out",
            ctx,
        )


def _configs(
    preset_name: str, model: str, phase: int, extra: dict[str, Any]
) -> tuple[NetworkConfig, TrainConfig]:
    """The network and the recipe of a new run (checked before any work)."""
    from amorgp.training.runstate import check_step_memory

    try:
        chosen = preset(preset_name, phase=phase, **extra)
        check_step_memory(chosen.train)  # the quadratic memory of n_max
    except ValueError as err:  # a --set value outside its domain
        raise click.BadParameter(str(err), param_hint="--set") from None
    return network_spec(model).configure(chosen.network), chosen.train


@click.command("train", cls=AmorgpCommand)
@click.option(
    "--preset",
    "preset_name",
    type=click.Choice(sorted(PRESETS)),
    default="small",
    show_default=True,
    help="Architecture and training recipe (not with --resume).",
)
@click.option(
    "--model",
    type=click.Choice(list(network_names())),
    default="structured",
    show_default=True,
    help="Network class (ahgp-se-ard: the fixed SE-ARD comparison model; not with --resume).",
)
@click.option(
    "--phase",
    type=click.IntRange(1, 2),
    default=1,
    show_default=True,
    help="1: per-point NLL on all pairs; 2: noise fine-tuning (needs --from; not with --resume).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Run directory (checkpoints, metrics.jsonl, validation set); one process at a time.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --out exactly where it stopped, with its stored configuration "
    "(--preset, --model, --phase, --set and --from are refused).",
)
@click.option(
    "--from",
    "init_from",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Start from the weights of this checkpoint (e.g. runs/NAME/last for phase 2).",
)
@click.option(
    "--max-minutes",
    type=click.FloatRange(min=0.0, min_open=True),
    help="Wall-clock budget of this call (> 0).",
)
@click.option(
    "--max-datasets", type=click.IntRange(min=1), help="Budget in datasets (summed over ranks)."
)
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    help="Stop at this total number of optimiser steps, counted from the start of the run "
    "(also with --resume).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a training option, e.g. --set batch_size=64 --set lr=1e-4 (not with --resume).",
)
@click.option("--device", help="torch device (default: cuda if available, else cpu).")
@click.option("--no-progress", is_flag=True, help="Do not show a progress bar.")
@json_option("The summary is one JSON document (schema_version 1) with or without this flag.")
@click.pass_context
def train_command(
    ctx: click.Context,
    preset_name: str,
    model: str,
    phase: int,
    out_dir: Path,
    resume: bool,
    init_from: Path | None,
    max_minutes: float | None,
    max_datasets: int | None,
    max_steps: int | None,
    overrides: tuple[str, ...],
    device: str | None,
    no_progress: bool,
    as_json: bool,
) -> None:
    """Train an amortization network on simulated data (Ctrl-C stops and checkpoints).

    Without a budget (--max-minutes, --max-datasets, --max-steps) it runs until
    interrupted.  Prints a JSON summary (step, datasets seen, stop reason, checkpoint).
    """
    require_training("amorgp train")
    from amorgp.training.train import train

    extra = parse_overrides(overrides)
    _check_combination(ctx, out_dir, resume, init_from, phase)
    check_device(device)
    if max_minutes is None and max_datasets is None and max_steps is None:
        max_minutes = math.inf  # until interrupted
    network: NetworkConfig | None = None
    train_cfg: TrainConfig | None = None
    overrides_given: dict[str, Any] | None = None
    if init_from is not None:  # the checkpoint's recipe, with --phase and --set on top
        _check_init_overrides(init_from, extra, phase)
        overrides_given = {**extra, "phase": phase}
    elif not resume:
        network, train_cfg = _configs(preset_name, model, phase, extra)
    result = train(
        out_dir,
        network,
        train_cfg,
        resume=resume,
        init_from=init_from,
        max_minutes=max_minutes,
        max_datasets=max_datasets,
        max_steps=max_steps,
        device=device,
        progress=not no_progress,
        train_overrides=overrides_given,
    )
    summary = {
        "schema_version": SCHEMA_VERSION,
        "command": "train",
        "step": result.step,
        "datasets_seen": result.datasets_seen,
        "stopped_by": result.stopped_by,
        "checkpoint": str(result.last_checkpoint) if result.last_checkpoint else None,
        "validation": result.validation,
    }
    emit(json_text(summary))
