"""``amorgp campaign``: the long, resumable training campaign (CPU by default).

Example::

    nohup nice -n 19 amorgp campaign > campaign.out 2>&1 &
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import click

from amorgp.cli._common import check_device, require_training
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import emit, json_document, json_option, json_text

__all__ = ["campaign_command", "default_campaign_state"]


def default_campaign_state() -> Path:
    """``$AMORGP_CAMPAIGN_DIR``, else ``$XDG_CACHE_HOME/amorgp/campaign`` (``~/.cache``)."""
    root = os.environ.get("AMORGP_CAMPAIGN_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "amorgp" / "campaign"


@click.command("campaign", cls=AmorgpCommand)
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
@click.option(
    "--real-data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder of CSV datasets (last column the target) on which every segment's "
    "model is also scored (e.g. the repository's data/).",
)
@click.option(
    "--swa-members",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Segment ends whose phase-1 weights are averaged into the evaluated model "
    "(1: the latest weights alone).",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="torch device of the training segments, e.g. cuda on a lent GPU (the campaign "
    "continues from the export's phase1-latest where the state directory is new).",
)
@click.option(
    "--report-only",
    is_flag=True,
    help="Train nothing: write the campaign report (campaign.md and campaign-curve.png "
    "beside the export folder) from EXPORT/campaign.jsonl.",
)
@click.option(
    "--card",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="With --report-only: also replace the campaign tables of this model card "
    "(between <!-- campaign:begin --> and <!-- campaign:end -->).",
)
@json_option("The record is one JSON document (schema_version 1) with or without this flag.")
def campaign_command(
    state: Path | None,
    export_dir: Path,
    init_from: Path | None,
    segment_minutes: float,
    finetune_steps: int,
    max_minutes: float | None,
    threads: int,
    real_data: Path | None,
    swa_members: int,
    device: str,
    report_only: bool,
    card: Path | None,
    as_json: bool,
) -> None:
    """Run the long, resumable training campaign (see amorgp.training.campaign).

    Start it in the background at low priority, e.g.
    ``nohup nice -n 19 amorgp campaign > campaign.out 2>&1 &``;
    stop it with Ctrl-C or SIGTERM (it checkpoints first).
    """
    if report_only:
        _report(export_dir, card)
        return
    if card is not None:
        raise click.UsageError("--card needs --report-only")
    import torch

    from amorgp.amortizer.api import PRETRAINED_DIR

    require_training("amorgp campaign")
    from amorgp.training.campaign import run_campaign

    check_device(device)
    torch.set_num_threads(threads)
    logging.getLogger("amorgp").setLevel(logging.INFO)
    record = run_campaign(
        state or default_campaign_state(),
        export_dir,
        init=init_from or PRETRAINED_DIR,
        baseline=PRETRAINED_DIR,
        segment_minutes=segment_minutes,
        finetune_steps=finetune_steps,
        max_minutes=max_minutes if max_minutes is not None else math.inf,
        real_data=real_data,
        swa_members=swa_members,
        device=device,
    )
    emit(json_text(json_document("campaign", dict(record))))


def _report(export_dir: Path, card: Path | None) -> None:
    from amorgp.amortizer.extras import require_experiments

    require_experiments("amorgp campaign --report-only")
    from amorgp_experiments.campaign_report import campaign_report

    log = export_dir / "campaign.jsonl"
    if not log.is_file():
        raise click.UsageError(f"--report-only: no campaign log at {log}")
    markdown = export_dir.parent / f"{export_dir.name}.md"
    figure = export_dir.parent / f"{export_dir.name}-curve.png"
    try:
        campaign_report(log, markdown, figure, card=card)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    emit(
        json_text(
            json_document(
                "campaign",
                {"report": str(markdown), "figure": str(figure), "card": card and str(card)},
            )
        )
    )
