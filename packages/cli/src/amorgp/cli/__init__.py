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

Start-up: the group imports a command's module only when that command runs (or
its ``--help`` is asked), so ``amorgp --help`` and ``amorgp --version`` import
neither torch nor scikit-learn.  ``-v/--verbose`` works before or after the command.

Errors: every command is an :class:`~amorgp.cli._errors.AmorgpCommand`,
which maps the library's typed errors to exit codes in one place (2: usage,
``OptionError``/``KernelSyntaxError``; 1: data, checkpoint, training and file errors),
never by their text and never with a traceback.  Results go to stdout, everything
else (warnings, progress, library output) to stderr.  To add a command, write a
module with an ``@click.command(cls=AmorgpCommand)`` function and add it to
:data:`COMMANDS`.

Examples::

    amorgp demo --plot airline.png
    amorgp infer data.csv --kernel "SE + PER" --kernel "LIN + SE*PER" --json
    amorgp predict data.csv --kernel "SE*PER + LIN" --split 0.2 --plot pred.png --refine 10
    amorgp model-info --preset small
    amorgp train --preset small --phase 1 --out runs/small --max-minutes 60
    torchrun --nproc_per_node 2 -m amorgp.cli train --preset small --out runs/ddp ...
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import Any

import click

from amorgp.cli._errors import AmorgpCommand, AmorgpGroup, set_verbose

__all__ = ["COMMANDS", "AmorgpCommand", "main", "package_versions", "set_verbose"]

COMMANDS: dict[str, tuple[str, str, str]] = {
    "train": ("train", "train_command", "Train an amortization network on simulated data."),
    "campaign": ("campaign", "campaign_command", "The long, resumable training campaign."),
    "model-info": ("model_info", "model_info", "Parameter counts of a preset or a checkpoint."),
    "infer": ("infer", "infer", "Amortized GP hyperparameters of each --kernel for a CSV table."),
    "predict": ("predict", "predict", "GP predictions on a test set; RMSE and NLL."),
    "demo": ("demo", "demo", "The airline series, amortized next to Type-2 ML."),
    "ensemble": ("ensemble", "ensemble", "Bayesian model averaging over kernel structures."),
    "search": ("ensemble", "search", "Greedy/beam search for the kernel structure."),
    "benchmark": ("benchmark", "benchmark", "Reproducible benchmark runs (the paper's)."),
}
"""``name: (module under amorgp.cli, attribute, one-line help)``; the module
is imported only when the command runs or shows its help."""

_PACKAGES = (
    "amorgp",
    "amorgp-kernel-grammar",
    "amorgp-diff-linalg",
    "amorgp-lazy-kernels",
    "amorgp-simulator",
    "amorgp-baselines",
    "amorgp-ensembles",
    "amorgp-amortizer",
    "amorgp-training",
    "amorgp-cli",
    "amorgp-gpytorch",
    "torch",
)


def package_versions() -> dict[str, str]:
    """Installed versions of the amorgp distributions and torch (read from the package
    metadata, without importing anything); absent ones are left out."""
    import importlib.metadata

    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo("\n".join(f"{k} {v}" for k, v in package_versions().items()))
    ctx.exit()


class _LazyGroup(AmorgpGroup):
    """The ``amorgp`` group: commands from :data:`COMMANDS`, imported on demand."""

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        """Every command (imports all the command modules)."""
        return {name: self._load(name) for name in COMMANDS}

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        if value:
            raise TypeError("add commands to COMMANDS")

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name) if cmd_name in COMMANDS else None

    def _load(self, cmd_name: str) -> click.Command:
        entry = COMMANDS[cmd_name]
        module = importlib.import_module(f"amorgp.cli.{entry[0]}")
        command: click.Command = getattr(module, entry[1])
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, entry[2]) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Log progress messages (size, backend, time estimate) to stderr; also after the command.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the versions of the amorgp packages and torch, and exit.",
)
def main(verbose: bool) -> None:
    """amorgp: amortized GP hyperparameter inference for structured kernels."""
    set_verbose(verbose)
    # the process is the command's own: glibc keeps freed kernel-matrix temporaries for
    # reuse (amorgp.core.memory), unless the user set glibc's own variables
    from amorgp.core.memory import tune_malloc, user_chose_malloc

    if not user_chose_malloc():
        tune_malloc()


def __getattr__(name: str) -> Any:
    """The command modules (``amorgp.cli.infer`` ...) on first use."""
    if name in {entry[0] for entry in COMMANDS.values()}:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
