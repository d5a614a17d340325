"""Run the paper experiments (resumable through the cell cache) and write the report."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

from amorgp.amortizer.paper import fig2b, fig3, fig4, fig9, fig10, fig11, table1
from amorgp.amortizer.paper.cache import CellCache
from amorgp.amortizer.paper.config import PaperConfig
from amorgp.amortizer.paper.context import RunContext
from amorgp.amortizer.paper.report import environment, write_report

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


def run_paper(
    config: PaperConfig,
    out: Path,
    *,
    progress: bool = True,
    report_only: bool = False,
) -> dict[str, Any]:
    """Compute the missing cells of every configured experiment and write the report.

    Args:
        config: what to compute.
        out: the output folder (``README.md``, ``results.json``, PNGs, ``cells/``).
        progress: progress bars on stderr (off anyway when stderr is not a terminal).
        report_only: compute nothing; regenerate the report from the cached cells.

    Returns:
        The record written to ``results.json``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cache = CellCache(out, read_only=report_only)
    ctx = RunContext(config, out, cache, progress=progress)
    t0 = time.perf_counter()
    experiments: dict[str, Any] = {}
    for name in config.experiments:
        experiments[name] = MODULES[name].run(ctx)
    record = {
        "config": config.to_dict(),
        "environment": environment(),
        "experiments": experiments,
        "notes": ctx.notes,
        "elapsed_s": time.perf_counter() - t0,
        "cells_computed": cache.computed,
        "report_only": report_only,
    }
    write_report(out, record, MODULES)
    return record
