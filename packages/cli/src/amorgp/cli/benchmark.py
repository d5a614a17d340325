"""``amorgp benchmark``: reproducible benchmark runs; ``amorgp benchmark paper`` and
``amorgp benchmark ablation`` (the network against null starts on real data).

Examples::

    amorgp benchmark paper --quick --out runs/paper-quick
    amorgp benchmark paper --datasets yacht,energy --splits 5 --experiments fig3,table1
    amorgp benchmark paper --data my.csv --experiments fig3
    amorgp benchmark paper --report-only          # the report from the cached cells alone
    amorgp benchmark paper --report-only --merge other/out   # add another run's cells first
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from amorgp.cli._errors import AmorgpCommand, AmorgpGroup
from amorgp.cli._output import emit, json_document, json_option, json_text

__all__ = ["ablation", "benchmark", "paper"]


def _items(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _int_items(text: str | None, option: str) -> tuple[int, ...] | None:
    items = _items(text)
    if items is None:
        return None
    try:
        return tuple(int(s) for s in items)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: give comma-separated integers", param_hint=option
        ) from None


@click.group("benchmark", cls=AmorgpGroup)
def benchmark() -> None:
    """Reproducible benchmark runs (see `amorgp benchmark paper --help`)."""


@benchmark.command("paper", cls=AmorgpCommand)
@click.option("--quick", is_flag=True, help="A smoke run of minutes (few kernels, short budgets).")
@click.option(
    "--datasets",
    help="Comma-separated bundled datasets (airline, concrete, energy, housing, yacht); "
    "default all (quick: airline,yacht).",
)
@click.option(
    "--data",
    "data_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A CSV of your own (header row, last column the target); repeatable.",
)
@click.option("--experiments", help="Comma-separated experiments (default: all).")
@click.option("--splits", type=click.IntRange(min=1), help="Random splits per dataset.")
@click.option("--kernels", help="Comma-separated positions (0-23) of the evaluation kernels.")
@click.option("--methods", help="Comma-separated methods of Fig. 3 (default: all).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs/benchmarks/paper"),
    show_default=True,
    help="Output folder (README.md, results.json, figures, cells/ cache).",
)
@click.option(
    "--model", default="default", show_default=True, help="Bundled model name or directory."
)
@click.option(
    "--threads", type=click.IntRange(min=1), default=1, show_default=True, help="torch threads."
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="torch device of the amortization networks (e.g. cuda); the baselines run on the CPU.",
)
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@click.option("--report-only", is_flag=True, help="Compute nothing: the report from cells/.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes (one thread each) for the real-data cells of Fig. 3 and Fig. 11.",
)
@click.option(
    "--merge",
    "merge_from",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Another run's output folder: its cells missing from OUT are added first; repeatable.",
)
@json_option()
def paper(
    quick: bool,
    datasets: str | None,
    data_files: tuple[Path, ...],
    experiments: str | None,
    splits: int | None,
    kernels: str | None,
    methods: str | None,
    out: Path,
    model: str,
    threads: int,
    device: str,
    no_progress: bool,
    report_only: bool,
    jobs: int,
    merge_from: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Every experiment of Bitzer et al. (2023) on the bundled data (resumable).

    Finished cells are stored under OUT/cells/; a rerun computes only the missing ones,
    so an interrupted run continues where it stopped.
    """
    import torch

    from amorgp.amortizer.extras import require_experiments
    from amorgp.cli._common import check_device

    require_experiments("amorgp benchmark paper")
    from amorgp_experiments.paper import PaperConfig, run_paper
    from amorgp_experiments.paper.config import model_identity
    from amorgp_experiments.paper.protocol import load_dataset

    check_device(device)
    model_identity(model)  # a model that cannot be found fails now (exit 1, naming it)
    torch.set_num_threads(threads)
    base = PaperConfig.quick_config() if quick else PaperConfig.full()
    changes: dict[str, Any] = {"model": model, "device": device}
    names = _items(datasets)
    if names is not None or data_files:
        changes["datasets"] = (*(names or ()), *(str(p) for p in data_files))
    for key, value in (
        ("experiments", _items(experiments)),
        ("methods", _items(methods)),
        ("kernel_ids", _int_items(kernels, "--kernels")),
        ("splits", splits),
    ):
        if value is not None:
            changes[key] = value
    config = dataclasses.replace(base, **changes)
    for name in config.datasets:
        load_dataset(name)  # an unknown name or a bad file fails now, before any work
    for folder in merge_from:
        if not (folder / "cells").is_dir():
            raise click.BadParameter(f"no cells/ folder under {folder}", param_hint="--merge")
    merged: dict[str, int] = {}
    if merge_from:
        from amorgp_experiments.paper.cache import CellCache

        cache = CellCache(out)
        for folder in merge_from:
            merged[str(folder)] = cache.merge(folder)
            if not as_json:
                emit(f"merged {merged[str(folder)]} cells from {folder}")
    record = run_paper(config, out, progress=not no_progress, report_only=report_only, jobs=jobs)
    if as_json:
        emit(
            json_text(
                json_document(
                    "benchmark paper",
                    {
                        "readme": str(out / "README.md"),
                        "results": str(out / "results.json"),
                        "merged": merged,
                        "cells_computed": record["cells_computed"],
                        "elapsed_s": record["elapsed_s"],
                    },
                ),
                indent=2,
            )
        )
        return
    emit(
        f"wrote {out / 'README.md'} and {out / 'results.json'} "
        f"({record['cells_computed']} cells computed, {record['elapsed_s']:.0f} s)"
    )


@benchmark.command(
    "ablation",
    cls=AmorgpCommand,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.pass_context
def ablation(ctx: click.Context) -> None:
    """The network against null starts on real data (docs/benchmarks/ablation.md).

    Every option goes to ``python -m amorgp_experiments.ablation`` (``--help`` there):
    ``--checkpoint`` (repeatable), ``--paper``, ``--splits``, ``--refine``, ``--report``.
    """
    from amorgp.amortizer.extras import require_experiments

    require_experiments("amorgp benchmark ablation")
    from amorgp_experiments.ablation import main as run_ablation

    run_ablation(list(ctx.args))
