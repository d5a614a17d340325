"""Training streams: batches generated on the fly, safe with multi-worker DataLoaders.

:class:`SimulatorStream` is a ``torch.utils.data.IterableDataset`` whose items
are whole :class:`~amorgp.simulator.batch.SimulatedBatch` objects (use
``DataLoader(stream, batch_size=None, num_workers=k)``).  Each worker owns a
``torch.Generator`` seeded from ``(seed, epoch, worker id)`` through numpy's
``SeedSequence`` (independent, non-overlapping streams), so workers never
duplicate data and a run is reproducible for a fixed number of workers.  Call
:meth:`SimulatorStream.set_epoch` between epochs (with non-persistent workers)
to get fresh data per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from amorgp.simulator.batch import SimulatedBatch
from amorgp.simulator.config import SimulatorConfig
from amorgp.simulator.simulator import Simulator

__all__ = ["SimulatorStream", "stream_seed"]


def stream_seed(seed: int, epoch: int = 0, worker: int = 0) -> int:
    """A 63-bit generator seed derived from ``(seed, epoch, worker)`` by ``SeedSequence``.

    Distinct triples give statistically independent streams (unlike ``seed + worker``,
    whose streams of neighbouring seeds overlap across runs).
    """
    for name, value in (("seed", seed), ("epoch", epoch), ("worker", worker)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"stream_seed: {name} must be a non-negative int, got {value!r}")
    state = np.random.SeedSequence(int(seed), spawn_key=(int(epoch), int(worker)))
    return int(state.generate_state(1, np.uint64)[0]) & ((1 << 63) - 1)


class SimulatorStream(IterableDataset[SimulatedBatch]):
    """Batches of simulated datasets, infinite or a fixed number per epoch.

    Args:
        config: the simulator configuration.
        batch_size: datasets per batch.
        seed: base seed of the stream.
        batches_per_epoch: stop after this many batches per epoch (split across
            workers: worker ``w`` of ``k`` produces batches ``w, w + k, ...``);
            None for an infinite stream (the paper's on-the-fly training).
        device: where batches are generated (``"cpu"`` in DataLoader workers).

    Example:
        >>> from torch.utils.data import DataLoader
        >>> stream = SimulatorStream(SimulatorConfig(n_max=20), batch_size=4, seed=0)
        >>> batch = next(iter(DataLoader(stream, batch_size=None)))
        >>> len(batch)
        4
    """

    def __init__(
        self,
        config: SimulatorConfig,
        batch_size: int,
        seed: int,
        *,
        batches_per_epoch: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if batches_per_epoch is not None and batches_per_epoch < 0:
            raise ValueError(f"batches_per_epoch must be >= 0, got {batches_per_epoch}")
        stream_seed(seed)  # validates
        self.simulator = Simulator(config, device=device)
        self.batch_size = batch_size
        self.seed = int(seed)
        self.batches_per_epoch = batches_per_epoch
        self.epoch = 0

    @property
    def config(self) -> SimulatorConfig:
        return self.simulator.config

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose data the next iteration produces."""
        stream_seed(self.seed, epoch)  # validates
        self.epoch = int(epoch)

    def generator(self, worker: int = 0) -> torch.Generator:
        """The generator of ``worker`` for the current epoch."""
        g = torch.Generator(device=self.simulator.device)
        g.manual_seed(stream_seed(self.seed, self.epoch, worker))
        return g

    def __iter__(self) -> Iterator[SimulatedBatch]:
        info = get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        g = self.generator(worker)
        if self.batches_per_epoch is None:
            while True:
                yield self.simulator.sample(self.batch_size, g)
        else:
            for _ in range(worker, self.batches_per_epoch, n_workers):
                yield self.simulator.sample(self.batch_size, g)

    def __len__(self) -> int:
        if self.batches_per_epoch is None:
            raise TypeError("an infinite SimulatorStream has no length")
        return self.batches_per_epoch
