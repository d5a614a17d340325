"""The run context handed to every experiment: configuration, cache, models, data, progress."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amorgp_experiments.paper.cache import CellCache
from amorgp_experiments.paper.config import PaperConfig, model_identity
from amorgp_experiments.paper.protocol import RealDataset, load_dataset

__all__ = ["RunContext"]

log = logging.getLogger("amorgp.paper")


@dataclass
class RunContext:
    """Everything an experiment needs.

    Attributes:
        config: what to compute.
        out: the output folder (cells under ``out/cells``).
        cache: the cell cache.
        progress: draw progress bars (tqdm on stderr; off when stderr is not a terminal).
        notes: messages for the report (a model that is not available, ...), per experiment.
    """

    config: PaperConfig
    out: Path
    cache: CellCache
    progress: bool = True
    notes: dict[str, list[str]] = field(default_factory=dict)
    _models: dict[str, Any] = field(default_factory=dict)
    _identities: dict[str, str | None] = field(default_factory=dict)
    _data: dict[str, RealDataset] = field(default_factory=dict)

    def note(self, experiment: str, text: str) -> None:
        """Record a message for the report of ``experiment`` (and log it)."""
        self.notes.setdefault(experiment, [])
        if text not in self.notes[experiment]:
            self.notes[experiment].append(text)
            log.warning("%s: %s", experiment, text)

    def dataset(self, name: str) -> RealDataset:
        """A bundled dataset or a user CSV, loaded once."""
        if name not in self._data:
            self._data[name] = load_dataset(name)
        return self._data[name]

    def dataset_names(self) -> list[str]:
        """The names (file stems) of the configured datasets."""
        return [self.dataset(d).name for d in self.config.datasets]

    def identity(self, model: str) -> str | None:
        """The model's identity for cache keys, or ``None`` if it cannot be found."""
        if model not in self._identities:
            try:
                ident = model_identity(model)
                if self.config.device != "cpu":  # timings differ: separate cells
                    ident += f"|{self.config.device}"
                self._identities[model] = ident
            except (OSError, ValueError):
                self._identities[model] = None
        return self._identities[model]

    def amortizer(self, model: str | None = None, *, solo: bool = False) -> Any:
        """The :class:`~amorgp.amortizer.Amortizer` of ``model`` (default: the configured one)
        on ``config.device``, warmed up, the network alone (the paper's amortized method;
        the ``+calibrate`` methods ask for the calibration per call); ``solo``: without
        the checkpoint's candidate networks (its own network only)."""
        name = model or self.config.model
        key = f"{name}|solo" if solo else name
        if key not in self._models:
            import numpy as np

            from amorgp.amortizer.frontends.inference import Amortizer

            extra: dict[str, Any] = {"candidates": ()} if solo else {}
            amz = Amortizer.from_pretrained(
                name, device=self.config.device, calibrate=False, **extra
            )
            x = np.linspace(0.0, 1.0, 20)
            for refine, calibrate in ((0, False), (2, True)):  # warm-up: timings exclude set-up
                amz.infer_many(x, np.sin(6 * x), ["SE"], refine=refine, calibrate=calibrate)
            self._models[key] = amz
        return self._models[key]

    def network(self, model: str) -> Any:
        """The raw network of a checkpoint (also fixed-kernel ones such as AHGP-SE-ARD)."""
        key = f"network:{model}"
        if key not in self._models:
            from amorgp.amortizer.networks.bundled import resolve_checkpoint
            from amorgp.amortizer.networks.checkpoint import load_checkpoint

            self._models[key] = load_checkpoint(resolve_checkpoint(model), device="cpu").model
        return self._models[key]

    @contextmanager
    def bar(self, total: int, desc: str) -> Iterator[Any]:
        """A progress bar over ``total`` units of work."""
        from tqdm import tqdm

        disable = None if self.progress else True
        with tqdm(total=total, desc=desc, disable=disable, file=sys.stderr, leave=False) as b:
            yield b
