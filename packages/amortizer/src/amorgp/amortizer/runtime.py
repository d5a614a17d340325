"""Process-level helpers of the trainer: DDP process group, device, data loader, Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from amorgp.simulator import SimulatedBatch, SimulatorStream

__all__ = [
    "Distributed",
    "default_device",
    "deferred_sigint",
    "interruptible",
    "simulated_batches",
]

logger = logging.getLogger(__name__)


class Distributed:
    """World size, rank and whether this call initialised the process group."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.owned = False
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
            self.owned = True
        self.active = dist.is_initialized() and dist.get_world_size() > 1
        self.world = dist.get_world_size() if self.active else 1
        self.rank = dist.get_rank() if self.active else 0

    def any(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, True on every rank if it is True on any rank (one all-reduce)."""
        if not self.active:
            return flags
        t = torch.tensor([1.0 if f else 0.0 for f in flags], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return tuple(bool(v > 0) for v in t.tolist())

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        if self.owned:
            dist.destroy_process_group()


def default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


def simulated_batches(
    stream: SimulatorStream, num_workers: int, skip: int
) -> Iterator[SimulatedBatch]:
    loader = DataLoader(
        stream,
        batch_size=None,
        num_workers=num_workers,
        worker_init_fn=_worker_init if num_workers else None,
        prefetch_factor=2 if num_workers else None,
    )
    for i, batch in enumerate(loader):
        if i >= skip:
            yield batch


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM raise ``KeyboardInterrupt`` (main thread only).

    Long runs that keep their results on interruption (the training campaign, the paper
    benchmark) use it so that ``kill -INT`` and ``kill -TERM`` stop them cleanly, also as
    a background job of a non-interactive shell, which starts with SIGINT ignored.
    The previous handlers are restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_term = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


@contextlib.contextmanager
def deferred_sigint() -> Iterator[threading.Event]:
    """Turn the first Ctrl-C into a request to stop after the current step.

    Only where Python's default SIGINT handler is active (the main thread, no
    handler of the caller's): the first Ctrl-C sets the event, the loop stops at the
    next step boundary and checkpoints normally; a second Ctrl-C raises
    ``KeyboardInterrupt`` at once (a checkpoint is still attempted).
    """
    pending = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield pending
        return

    def handler(signum: int, frame: object) -> None:
        if pending.is_set():
            raise KeyboardInterrupt
        pending.set()
        logger.warning("interrupt: stopping after this step (Ctrl-C again to stop at once)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield pending
    finally:
        signal.signal(signal.SIGINT, previous)
