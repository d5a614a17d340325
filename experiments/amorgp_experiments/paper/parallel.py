"""The real-data cells of Fig. 3 and Fig. 11 computed in worker processes.

The full protocol's Fig. 3 is 5 datasets x 3 splits x 24 kernels x 10 methods, most of it
the Type-2 ML, MAP and variational baselines on one CPU thread each: tens of CPU hours.
``amorgp benchmark paper --jobs N`` splits those cells into (dataset, split, method) shards
and computes them in ``N`` processes (each on one thread) before the experiments run; the
experiments then read every cell back from the cache.  Shards write disjoint cells to the
same cell files (whole lines, appended atomically), so an interrupted parallel run
continues like a sequential one, and its cells equal those of a sequential run.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
from pathlib import Path

from amorgp_experiments.paper import fig11
from amorgp_experiments.paper.config import PaperConfig

__all__ = ["prefetch_real_cells", "real_shards"]

log = logging.getLogger("amorgp.paper")

# rough cost order (most expensive first), so that the longest shards start first
_METHOD_COST = {
    "gp-ml-multistart": 0,
    "map": 1,
    "gp-ml": 2,
    "advi-meanfield": 3,
    "gp-ml-lbfgs": 4,
    "svgp": 5,
    "sklearn": 6,
    "amortized+refine20": 7,
    "amortized+refine5": 8,
    "amortized+calibrate": 9,
    "amortized": 10,
}
_DATASET_COST = {"concrete": 0, "housing": 1, "energy": 2, "yacht": 3, "airline": 4}


def real_shards(config: PaperConfig) -> list[tuple[str, int, str]]:
    """The ``(dataset, split, method)`` shards of the real-data cells that Fig. 3 and
    Fig. 11 of ``config`` need, the most expensive first (empty when neither experiment
    is run).  The splits of a dataset are independent, so they are separate shards: a
    machine with more cores than (dataset, method) pairs keeps them all busy."""
    methods: list[str] = []
    if "fig3" in config.experiments:
        methods += list(config.methods)
    if "fig11" in config.experiments:
        methods += [m for m in fig11.METHODS if m not in methods]
    shards = [(d, s, m) for m in methods for d in config.datasets for s in range(config.splits)]
    return sorted(
        shards,
        key=lambda x: (_METHOD_COST.get(x[2], 7), _DATASET_COST.get(x[0], 2), x[1]),
    )


def _run_shard(args: tuple[PaperConfig, str, str, int, str]) -> int:
    """One shard in a worker: its missing cells computed and cached; returns their number."""
    import torch

    from amorgp_experiments.paper.cache import CellCache
    from amorgp_experiments.paper.context import RunContext
    from amorgp_experiments.paper.real import kernel_templates, real_cells

    config, out, dataset, split, method = args
    torch.set_num_threads(1)
    shard = dataclasses.replace(config, datasets=(dataset,), methods=(method,))
    cache = CellCache(Path(out))
    ctx = RunContext(shard, Path(out), cache, progress=False)
    real_cells(ctx, [method], kernel_templates(shard.kernel_ids), "fig3", splits=[split])
    return cache.computed


def prefetch_real_cells(config: PaperConfig, out: Path, jobs: int) -> int:
    """Compute the missing real-data cells of Fig. 3 / Fig. 11 in ``jobs`` processes.

    Args:
        config: the run's configuration.
        out: the output folder (its ``cells/`` is shared with the workers).
        jobs: worker processes (``spawn``ed, one torch thread each).

    Returns:
        The number of cells the workers computed.

    Raises:
        KeyboardInterrupt: when interrupted; the workers are stopped, finished cells kept.
    """
    shards = real_shards(config)
    if jobs <= 1 or not shards:
        return 0
    computed = 0
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(jobs, len(shards))) as pool:
        tasks = [(config, str(out), d, s, m) for d, s, m in shards]
        for i, n in enumerate(pool.imap_unordered(_run_shard, tasks), start=1):
            computed += n
            log.info("real-data shards: %d/%d done (%d cells computed)", i, len(tasks), computed)
    return computed
