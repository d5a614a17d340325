"""The ``amorgp`` command line: a click group with one module per command.

===============  ================================================================
module           command
===============  ================================================================
``train``        ``amorgp train``: train a network on simulated data
``campaign``     ``amorgp campaign``: the long, resumable CPU training campaign
``model_info``   ``amorgp model-info``: parameter counts of a preset or checkpoint
``infer``        ``amorgp infer``: amortized hyperparameters for a CSV table
``predict``      ``amorgp predict``: GP predictions on a test set
``demo``         ``amorgp demo``: the airline series, amortized next to Type-2 ML
``ensemble``     ``amorgp ensemble`` / ``amorgp search``: model averaging, structure search
``benchmark``    ``amorgp benchmark paper``: the paper's experiments (resumable)
===============  ================================================================

Errors: every command is an :class:`~amorgp.amortizer.cli._errors.AmorgpCommand`,
which maps the library's typed errors to exit codes in one place (2: usage,
``OptionError``/``KernelSyntaxError``; 1: data, checkpoint, training and file errors),
never by their text and never with a traceback.  Results go to stdout, everything
else (warnings, progress, library output) to stderr.  To add a command, write a
module with an ``@click.command(cls=AmorgpCommand)`` function and add it below.

Examples::

    amorgp demo --plot airline.png
    amorgp infer data.csv --kernel "SE + PER" --kernel "LIN + SE*PER" --json
    amorgp predict data.csv --kernel "SE*PER + LIN" --split 0.2 --plot pred.png --refine 10
    amorgp model-info --preset small
    amorgp train --preset small --phase 1 --out runs/small --max-minutes 60
    torchrun --nproc_per_node 2 -m amorgp.amortizer.cli train --preset small --out runs/ddp ...
"""

from __future__ import annotations

import logging

import click

from amorgp.amortizer.cli import (
    benchmark,
    campaign,
    demo,
    ensemble,
    infer,
    model_info,
    predict,
    train,
)
from amorgp.amortizer.cli._errors import AmorgpCommand, AmorgpGroup

__all__ = ["AmorgpCommand", "main"]


@click.group(cls=AmorgpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-v", "--verbose", is_flag=True, help="Log progress messages (size, backend) to stderr."
)
def main(verbose: bool) -> None:
    """amorgp: amortized GP hyperparameter inference for structured kernels."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


for _command in (
    train.train_command,
    campaign.campaign_command,
    model_info.model_info,
    infer.infer,
    predict.predict,
    demo.demo,
    ensemble.ensemble,
    ensemble.search,
    benchmark.benchmark,
):
    main.add_command(_command)
