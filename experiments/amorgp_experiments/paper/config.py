"""The configuration of a paper run: the full protocol and the ``--quick`` smoke run.

:meth:`PaperConfig.full` is the paper's protocol (24 kernels, 3 splits, every
method with its paper budget; hours on a CPU, resumable); :meth:`PaperConfig.quick`
is a minutes-long smoke run on one CPU thread (2 datasets, 1 split, 4 kernels,
short budgets, a small simulated set).  Either can be narrowed by the command's
options (``dataclasses.replace``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from amorgp.core.errors import OptionError

__all__ = [
    "EXPERIMENTS",
    "FIG3_METHODS",
    "PaperConfig",
    "model_identity",
]

EXPERIMENTS = ("fig2b", "fig3", "table1", "fig4", "fig9", "fig10", "fig11")
"""Every experiment, in the order they run."""

FIG3_METHODS = (
    "amortized",
    "amortized+calibrate",
    "amortized+refine5",
    "amortized+refine20",
    "gp-ml",
    "gp-ml-multistart",
    "gp-ml-lbfgs",
    "map",
    "svgp",
    "advi-meanfield",
    "sklearn",
)
"""Methods of Fig. 3 (``amorgp.baselines`` names; ``sklearn``: scikit-learn's GPR on
the kernels it can express: SE-ARD, and every kernel of one-input data;
``amortized+calibrate``: the network, then the exact Type-2 ML scale and noise,
:mod:`amorgp.amortizer.stages.calibrate`)."""

AMORTIZED_METHOD = re.compile(r"amortized(\+calibrate)?(\+refine(\d+))?")
"""``amortized``, ``amortized+calibrate``, ``amortized+refineK``,
``amortized+calibrate+refineK``."""

FULL_OPTIONS: dict[str, dict[str, Any]] = {
    "gp-ml-lbfgs": {"restarts": 5, "init": "default"},
}
"""Method settings of the full run (the ``amorgp.baselines`` paper defaults otherwise;
Type-2 ML L-BFGS is the best of 5 starts)."""

QUICK_OPTIONS: dict[str, dict[str, Any]] = {
    "gp-ml": {"max_iters": 60},
    "gp-ml-multistart": {"restarts": 3, "max_iters": 60},
    "gp-ml-lbfgs": {"max_iters": 30},
    "map": {"max_iters": 60},
    "svgp": {"max_iters": 100},
    "advi-meanfield": {"max_iters": 300, "n_elbo_samples": 10, "n_predictive_samples": 20},
}
"""Short budgets of the quick run."""


@dataclass(frozen=True)
class PaperConfig:
    """What a paper run computes.

    Attributes:
        experiments: which of :data:`EXPERIMENTS` to run.
        datasets: bundled dataset names or CSV paths (a file's stem names it).
        splits: random splits per dataset (split ``s`` is seeded with ``1000 + s``).
        kernel_ids: positions in the 24 evaluation kernels (``paper_evaluation_set(0)``).
        methods: methods of Fig. 3 (see :data:`FIG3_METHODS`).
        method_options: settings per baseline method overriding its defaults.
        model: the evaluated amortization network (bundled name or directory).
        table1_models: networks of Table 1 (structured SE-ARD vs AHGP-SE-ARD).
        fig10_models: (without, with) noise fine-tuning.
        sim_pairs: simulated (dataset, structure) pairs of Fig. 2b / Fig. 10.
        sim_n_max: simulated pairs have ``n ~ U{10..sim_n_max}`` training points.
        sim_d_max: most input dimensions of simulated pairs (paper prior: 8).
        sim_restarts: Type-2 ML starts on simulated pairs.
        sweep_sizes: training sizes of the n sweep (Fig. 9).
        sweep_pairs: simulated pairs per size of the sweep.
        ensemble_sizes: training sizes of the batched-vs-one-by-one timing (Fig. 4).
        ensemble_repeats: timing repeats (median reported).
        quick: the smoke-run configuration (labelled so in the report).
        device: torch device of the amortization networks (``cpu``, ``cuda``); the
            baselines run on the CPU.  Cells of another device are computed afresh.
    """

    experiments: tuple[str, ...] = EXPERIMENTS
    datasets: tuple[str, ...] = ("airline", "concrete", "energy", "housing", "yacht")
    splits: int = 3
    kernel_ids: tuple[int, ...] = tuple(range(24))
    methods: tuple[str, ...] = FIG3_METHODS
    method_options: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(FULL_OPTIONS))
    model: str = "default"
    table1_models: tuple[str, ...] = ("small-d4-v1", "ahgp-se-ard-d4-v1", "default")
    fig10_models: tuple[str, str] = ("default-phase1", "small-d8-c1142k")
    sim_pairs: int = 200
    sim_n_max: int = 250
    sim_d_max: int = 8
    sim_restarts: int = 5
    sweep_sizes: tuple[int, ...] = (10, 20, 50, 100, 250)
    sweep_pairs: int = 50
    ensemble_sizes: tuple[int, ...] = (50, 100, 250, 500, 1000)
    ensemble_repeats: int = 3
    quick: bool = False
    device: str = "cpu"

    def __post_init__(self) -> None:
        unknown = [e for e in self.experiments if e not in EXPERIMENTS]
        if unknown:
            raise OptionError(
                f"unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(EXPERIMENTS)}"
            )
        bad = [m for m in self.methods if not is_method(m)]
        if bad:
            raise OptionError(
                f"unknown method(s) {', '.join(bad)}; choose from {', '.join(FIG3_METHODS)} "
                "(or amortized[+calibrate][+refineK], amortized@MODEL)"
            )
        if self.splits < 1:
            raise OptionError(f"splits must be >= 1, got {self.splits}")
        if not self.kernel_ids or any(not 0 <= i < 24 for i in self.kernel_ids):
            raise OptionError(f"kernel ids must be in 0..23, got {self.kernel_ids}")
        if not self.datasets:
            raise OptionError("no dataset selected")

    @classmethod
    def full(cls) -> PaperConfig:
        """The paper protocol."""
        return cls()

    @classmethod
    def quick_config(cls) -> PaperConfig:
        """Minutes on one CPU thread: a smoke run of every experiment."""
        return cls(
            datasets=("airline", "yacht"),
            splits=1,
            kernel_ids=(3, 10, 13, 18),
            method_options={k: dict(v) for k, v in QUICK_OPTIONS.items()},
            sim_pairs=24,
            sim_n_max=60,
            sim_d_max=3,
            sim_restarts=1,
            sweep_sizes=(10, 50),
            sweep_pairs=8,
            ensemble_sizes=(50, 100),
            ensemble_repeats=1,
            quick=True,
        )

    def report_view(self) -> PaperConfig:
        """The configuration the report shows: this run's, widened to its protocol's
        (full or quick) experiments, datasets, splits and methods, so that a run on a
        subset adds its cells to the whole report instead of replacing it.  The kernels
        stay this run's (a Fig. 4 ensemble cell is keyed by its kernel set)."""
        base = PaperConfig.quick_config() if self.quick else PaperConfig.full()

        def union(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
            return a + tuple(x for x in b if x not in a)

        return replace(
            self,
            experiments=EXPERIMENTS,
            datasets=union(base.datasets, self.datasets),
            splits=max(base.splits, self.splits),
            methods=union(base.methods, self.methods),
        )

    def options(self, method: str) -> dict[str, Any]:
        """Settings of one baseline method (empty: its defaults)."""
        return dict(self.method_options.get(method, {}))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_method(name: str) -> bool:
    """Whether ``name`` is a real-data method: one of :data:`FIG3_METHODS`,
    ``amortized[+calibrate][+refineK]`` (any ``K``), or ``amortized...@MODEL`` /
    ``ahgp@MODEL``."""
    base, _, model = name.partition("@")
    if model:
        return base == "ahgp" or bool(AMORTIZED_METHOD.fullmatch(base))
    return name in FIG3_METHODS or bool(AMORTIZED_METHOD.fullmatch(name))


def amortized_settings(name: str) -> tuple[bool, int]:
    """``(calibrate, refine)`` of an amortized method name (``@MODEL`` ignored).

    Raises:
        ValueError: ``name`` is not an amortized method.
    """
    m = AMORTIZED_METHOD.fullmatch(name.split("@", 1)[0])
    if m is None:
        raise ValueError(f"not an amortized method: {name!r}")
    return m.group(1) is not None, int(m.group(3) or 0)


def model_identity(name: str) -> str:
    """``name`` plus a digest of its ``checkpoint.json`` (a changed model is a new identity).

    Raises:
        CheckpointError: no such bundled model or directory.
    """
    from amorgp.amortizer.networks.bundled import resolve_checkpoint

    path = resolve_checkpoint(name) / "checkpoint.json"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    return f"{name}#{digest}"


def settings_text(settings: dict[str, Any]) -> str:
    """Settings as compact JSON (for reports)."""
    return json.dumps(settings, sort_keys=True)
