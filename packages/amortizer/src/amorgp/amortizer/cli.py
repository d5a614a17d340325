"""The ``amorgp`` command line (click group).

Commands live in this module as ``@main.command()`` functions, one per command,
each with its own ``--help``; errors of the library (``ValueError``) become
``click.ClickException`` (exit code 1), bad usage ``click.UsageError`` (exit 2).
To add a command, define another ``@main.command()`` function below.

Examples::

    amorgp model-info --preset small
    amorgp train --preset small --phase 1 --out runs/small --max-minutes 60
    amorgp train --out runs/small --resume --max-minutes 60
    amorgp train --phase 2 --from runs/small/last --out runs/small-p2 --max-minutes 10
    torchrun --nproc_per_node 2 -m amorgp.amortizer.cli train --preset small --out runs/ddp ...
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import click
from torch import nn

from amorgp.amortizer.config import PRESETS, NetworkConfig, TrainConfig, preset

__all__ = ["main"]


def _parse_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    fields = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise click.UsageError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in fields:
            raise click.UsageError(
                f"--set: unknown training option {key!r}; known: {', '.join(fields)}"
            )
        typ = str(fields[key])
        out[key] = int(value) if typ == "int" else float(value) if typ == "float" else value
    return out


def _component_counts(model: nn.Module) -> list[tuple[str, int]]:
    rows = [
        (name, sum(p.numel() for p in child.parameters())) for name, child in model.named_children()
    ]
    return [*rows, ("total", sum(p.numel() for p in model.parameters()))]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log progress messages to stderr.")
def main(verbose: bool) -> None:
    """amorgp: amortized GP hyperparameter inference for structured kernels."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


@main.command("train")
@click.option(
    "--preset",
    "preset_name",
    type=click.Choice(sorted(PRESETS)),
    default="small",
    show_default=True,
    help="Architecture and training recipe.",
)
@click.option(
    "--model",
    type=click.Choice(["structured", "ahgp-se-ard"]),
    default="structured",
    show_default=True,
    help="Network class (ahgp-se-ard: the fixed SE-ARD comparison model).",
)
@click.option(
    "--phase",
    type=click.IntRange(1, 2),
    default=1,
    show_default=True,
    help="1: per-point NLL on all pairs; 2: noise fine-tuning (needs --from).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Run directory (checkpoints, metrics.jsonl, validation set).",
)
@click.option("--resume", is_flag=True, help="Continue the run in --out exactly where it stopped.")
@click.option(
    "--from",
    "init_from",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Start from the weights of this checkpoint (e.g. runs/NAME/last for phase 2).",
)
@click.option("--max-minutes", type=float, help="Wall-clock budget of this call.")
@click.option("--max-datasets", type=int, help="Budget in datasets (summed over ranks).")
@click.option("--max-steps", type=int, help="Stop at this total number of optimiser steps.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a training option, e.g. --set batch_size=64 --set lr=1e-4.",
)
@click.option("--device", help="torch device (default: cuda if available, else cpu).")
@click.option("--no-progress", is_flag=True, help="Do not show a progress bar.")
def train_command(
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
) -> None:
    """Train an amortization network on simulated data (Ctrl-C stops and checkpoints)."""
    from amorgp.amortizer.checkpoint import load_checkpoint
    from amorgp.amortizer.train import SE_VOCABULARY, train

    if phase == 2 and init_from is None and not resume:
        raise click.UsageError("phase 2 fine-tunes a trained network: pass --from runs/NAME/last")
    if resume and init_from is not None:
        raise click.UsageError("--resume and --from exclude each other")
    if max_minutes is None and max_datasets is None and max_steps is None:
        max_minutes = math.inf  # until interrupted
    extra = _parse_overrides(overrides)
    try:
        network: NetworkConfig | None = None
        train_cfg: TrainConfig | None = None
        if init_from is not None:
            base = load_checkpoint(init_from).meta.get("train", {})
            train_cfg = TrainConfig.from_dict({**base, **extra, "phase": phase})
        elif not resume:
            chosen = preset(preset_name, phase=phase, **extra)
            network, train_cfg = chosen.network, chosen.train
            if model == "ahgp-se-ard":
                network = dataclasses.replace(
                    network, model="ahgp-se-ard", vocabulary=SE_VOCABULARY
                )
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
        )
    except ValueError as err:
        raise click.ClickException(str(err)) from err
    click.echo(
        json.dumps(
            {
                "step": result.step,
                "datasets_seen": result.datasets_seen,
                "stopped_by": result.stopped_by,
                "checkpoint": str(result.last_checkpoint) if result.last_checkpoint else None,
                "validation": result.validation,
            }
        )
    )


def _default_campaign_state() -> Path:
    root = os.environ.get("AMORGP_CAMPAIGN_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "amorgp" / "campaign"


@main.command("campaign")
@click.option(
    "--state",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State directory outside the repository "
    "(default $AMORGP_CAMPAIGN_DIR or ~/.cache/amorgp/campaign).",
)
@click.option(
    "--export",
    "export_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs/training/campaign"),
    show_default=True,
    help="Repository folder for the log, the latest phase-1 weights and the best model.",
)
@click.option(
    "--init",
    "init_from",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Checkpoint to start from when nothing can be resumed (default: the bundled model).",
)
@click.option("--segment-minutes", type=click.FloatRange(min=0.5), default=20.0, show_default=True)
@click.option("--finetune-steps", type=click.IntRange(min=1), default=100, show_default=True)
@click.option(
    "--max-minutes",
    type=click.FloatRange(min=0.0, min_open=True),
    default=None,
    help="Stop after this many minutes (default: until Ctrl-C or SIGTERM).",
)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True)
def campaign_command(
    state: Path | None,
    export_dir: Path,
    init_from: Path | None,
    segment_minutes: float,
    finetune_steps: int,
    max_minutes: float | None,
    threads: int,
) -> None:
    """Run the long, resumable CPU training campaign (see amorgp.amortizer.campaign).

    Start it in the background at low priority, e.g.
    ``nohup nice -n 19 amorgp campaign > campaign.out 2>&1 &``;
    stop it with Ctrl-C or SIGTERM (it checkpoints first).
    """
    import torch

    from amorgp.amortizer.api import PRETRAINED_DIR
    from amorgp.amortizer.campaign import run_campaign

    torch.set_num_threads(threads)
    logging.getLogger("amorgp").setLevel(logging.INFO)
    try:
        record = run_campaign(
            state or _default_campaign_state(),
            export_dir,
            init=init_from or PRETRAINED_DIR,
            baseline=PRETRAINED_DIR,
            segment_minutes=segment_minutes,
            finetune_steps=finetune_steps,
            max_minutes=max_minutes if max_minutes is not None else math.inf,
        )
    except ValueError as err:
        raise click.ClickException(str(err)) from err
    click.echo(json.dumps(record, default=str))


@main.command("model-info")
@click.option(
    "--preset", "preset_name", type=click.Choice(sorted(PRESETS)), help="Describe a preset."
)
@click.option(
    "--model",
    type=click.Choice(["structured", "ahgp-se-ard"]),
    default="structured",
    show_default=True,
)
@click.argument(
    "checkpoint", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
def model_info(preset_name: str | None, model: str, checkpoint: Path | None) -> None:
    """Parameter counts of a preset (default: all presets) or of a CHECKPOINT directory."""
    from amorgp.amortizer.checkpoint import load_checkpoint
    from amorgp.amortizer.model import build_model
    from amorgp.amortizer.train import SE_VOCABULARY

    if checkpoint is not None and preset_name is not None:
        raise click.UsageError("give either --preset or CHECKPOINT, not both")
    if checkpoint is not None:
        try:
            ckpt = load_checkpoint(checkpoint)
        except ValueError as err:
            raise click.ClickException(str(err)) from err
        click.echo(
            f"checkpoint {checkpoint}: {ckpt.network.model}, vocabulary {', '.join(ckpt.network.vocabulary.symbols)}"
        )
        for name, n in _component_counts(ckpt.model):
            click.echo(f"  {name:<18} {n:>12,d}")
        click.echo(f"  progress: {json.dumps(ckpt.meta.get('progress', {}))}")
        click.echo(f"  validation: {json.dumps(ckpt.meta.get('validation', {}))}")
        return
    names = [preset_name] if preset_name else list(PRESETS)
    for name in names:
        network = PRESETS[name].network
        if model == "ahgp-se-ard":
            network = dataclasses.replace(network, model="ahgp-se-ard", vocabulary=SE_VOCABULARY)
        counts = _component_counts(build_model(network))
        total = counts[-1][1]
        click.echo(
            f"{name} ({network.model}): {total:,d} parameters, {4 * total / 2**20:.1f} MiB float32 — {PRESETS[name].description}"
        )
        for comp, n in counts[:-1]:
            click.echo(f"  {comp:<18} {n:>12,d}")


def _register_inference_commands() -> None:
    from amorgp.amortizer.cli_infer import register

    register(main)


_register_inference_commands()

if __name__ == "__main__":  # torchrun -m amorgp.amortizer.cli ...
    main()
