"""Run the paper experiments (resumable through the cell cache) and write the report."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

from amorgp.training.runtime import interruptible
from amorgp_experiments.paper import fig2b, fig3, fig4, fig9, fig10, fig11, table1
from amorgp_experiments.paper.cache import CellCache
from amorgp_experiments.paper.config import PaperConfig
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.parallel import prefetch_real_cells
from amorgp_experiments.paper.report import environment, write_report

__all__ = ["MODULES", "run_paper"]

MODULES: dict[str, ModuleType] = {
    "fig2b": fig2b,
    "fig3": fig3,
    "table1": table1,
    "fig4": fig4,
    "fig9": fig9,
    "fig10": fig10,
    "fig11": fig11,
}
"""Each experiment's module: ``run(ctx)``, ``markdown``, ``figure``, ``findings``."""


def log_run(out: Path, entry: dict[str, Any]) -> None:
    """Append one line on a finished run to ``out/runs.jsonl`` (date, seconds, cells)."""
    from amorgp.amortizer.jsonlog import append_record

    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    append_record(out / "runs.jsonl", {"date": date, **entry})  # a torn last line is cut off


def read_runs(out: Path) -> list[dict[str, Any]]:
    """The runs logged in ``out/runs.jsonl`` (a torn last line or a corrupted line is
    skipped with a warning)."""
    from amorgp.amortizer.jsonlog import read_records

    return read_records(out / "runs.jsonl", strict=False, stacklevel=3)


def run_paper(
    config: PaperConfig,
    out: Path,
    *,
    progress: bool = True,
    report_only: bool = False,
    jobs: int = 1,
) -> dict[str, Any]:
    """Compute the missing cells of every configured experiment and write the report.

    The report shows the whole protocol (:meth:`PaperConfig.report_view`): a run on some
    experiments, datasets or methods adds its cells to it and keeps the others' rows.

    Args:
        config: what to compute.
        out: the output folder (``README.md``, ``results.json``, PNGs, ``cells/``).
        progress: progress bars on stderr (off anyway when stderr is not a terminal).
        report_only: compute nothing; regenerate the report from the cached cells.
        jobs: worker processes for the real-data cells of Fig. 3 / Fig. 11
            (:func:`~amorgp_experiments.paper.parallel.prefetch_real_cells`); 1: none.

    Returns:
        The record written to ``results.json``.

    Raises:
        KeyboardInterrupt: after writing the report of what was finished, when
            interrupted (every finished cell is kept; a rerun continues).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    experiments: dict[str, Any] = {}
    interrupted = False
    by_workers = 0
    with interruptible():  # kill -INT / -TERM: report what finished, then stop
        if jobs > 1 and not report_only:
            try:
                by_workers = prefetch_real_cells(config, out, jobs)
            except KeyboardInterrupt:
                interrupted = True
        # read after the workers: their cells are in the files
        cache = CellCache(out, read_only=report_only or interrupted)
        ctx = RunContext(config, out, cache, progress=progress)
        if interrupted:
            ctx.note("fig3", "interrupted; rerun the same command to continue from the cells")
        for name in config.experiments:
            experiments[name] = None
            if interrupted:
                continue
            try:
                experiments[name] = MODULES[name].run(ctx)
            except KeyboardInterrupt:  # keep what is cached, report it, then stop
                interrupted = True
                ctx.note(name, "interrupted; rerun the same command to continue from the cells")
    elapsed = time.perf_counter() - t0
    computed = cache.computed + by_workers
    if not report_only:
        log_run(out, {"quick": config.quick, "elapsed_s": elapsed, "cells": computed})
    view = config.report_view()
    if view != config:  # a run on a subset: the report shows every cached cell of the protocol
        shown = RunContext(view, out, CellCache(out, read_only=True), progress=False)
        for name, notes in ctx.notes.items():
            for text in notes:
                shown.note(name, text)
        experiments = {name: MODULES[name].run(shown) for name in view.experiments}
        config, ctx = view, shown
    record = {
        "config": config.to_dict(),
        "environment": environment(config.device),
        "experiments": experiments,
        "notes": ctx.notes,
        "elapsed_s": elapsed,
        "cells_computed": computed,
        "report_only": report_only,
        "runs": read_runs(out),
    }
    write_report(out, record, MODULES)
    if interrupted:
        raise KeyboardInterrupt
    return record
