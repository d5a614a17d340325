"""The paper's experiments (Bitzer et al. 2023) by one command: ``amorgp benchmark paper``.

=================  ===========================================================
module             what
=================  ===========================================================
``protocol``       bundled datasets, user CSVs, splits, standardised scores
``cache``          the resumable cell cache (JSON lines under ``<out>/cells/``)
``config``         :class:`PaperConfig` (full protocol, ``quick_config``)
``context``        :class:`RunContext` handed to every experiment
``real``           real-data cells (one method, one split, many kernels)
``sklearn_gp``     scikit-learn's GPR on the kernels it can express
``simulated``      simulated test sets from the paper prior and their cells
``fig2b``          Fig. 2b: amortized vs Type-2 ML vs ground truth (simulated)
``fig3``           Fig. 3 / 5: methods over the kernels per dataset
``table1``         Table 1: structured SE-ARD vs AHGP-SE-ARD, Welch's t-test
``fig4``           Fig. 4: BMA ensembles; batched vs one-by-one time over n
``fig9``           Fig. 9: n_train sweep (simulated)
``fig10``          Fig. 10: with vs without noise fine-tuning
``fig11``          Fig. 11: MAP vs Type-2 ML vs amortized (real data)
``stats``          percentile spreads, Welch's t-test
``figures``        matplotlib helpers
``report``         ``README.md`` and ``results.json``
``runner``         :func:`run_paper`
=================  ===========================================================

Example::

    from amorgp_experiments.paper import PaperConfig, run_paper
    record = run_paper(PaperConfig.quick_config(), Path("runs/paper"))
"""

from amorgp_experiments.paper.cache import CellCache, CellKey, config_hash
from amorgp_experiments.paper.config import EXPERIMENTS, FIG3_METHODS, PaperConfig
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.protocol import (
    BUNDLED_DATASETS,
    load_dataset,
    scores,
    split_indices,
)
from amorgp_experiments.paper.runner import MODULES, run_paper
from amorgp_experiments.paper.stats import spread, welch_t_test

__all__ = [
    "BUNDLED_DATASETS",
    "EXPERIMENTS",
    "FIG3_METHODS",
    "MODULES",
    "CellCache",
    "CellKey",
    "PaperConfig",
    "RunContext",
    "config_hash",
    "load_dataset",
    "run_paper",
    "scores",
    "split_indices",
    "spread",
    "welch_t_test",
]
