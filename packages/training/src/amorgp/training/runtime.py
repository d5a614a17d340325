"""Process-level helpers of the trainer: DDP process group, device, data loader, Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from amorgp.simulator import SimulatedBatch, SimulatorStream

__all__ = [
    "ActiveClock",
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


class ActiveClock:
    """Monotonic seconds that leave out the time the whole process was stopped.

    A training run paused with ``SIGSTOP`` (e.g. ``kill -STOP`` while a benchmark needs
    the cores) and continued later must not count the pause as training time, neither in
    its time budget nor in the minutes it logs.  A daemon thread ticks every ``tick``
    seconds; while the process runs, two ticks are never much more than ``tick`` apart,
    so a gap longer than ``tick + slack`` means the process was stopped (or the machine
    suspended), and that gap less one tick is left out of :meth:`now`.  Slow steps do
    not count as pauses: the ticking thread runs while the training thread computes
    (PyTorch releases the GIL in its kernels).

    Use as a context manager (or :meth:`start` / :meth:`close`).
    """

    def __init__(
        self,
        tick: float = 0.5,
        slack: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (tick > 0 and slack >= 0):
            raise ValueError(f"tick must be > 0 and slack >= 0, got {tick}, {slack}")
        self.tick, self.slack, self._clock = tick, slack, clock
        self.paused = 0.0
        self._last = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def observe(self, now: float | None = None) -> None:
        """Account for the time since the last tick (called by the ticking thread)."""
        with self._lock:
            now = self._clock() if now is None else now
            gap = now - self._last
            if gap > self.tick + self.slack:
                self.paused += gap - self.tick
            self._last = max(self._last, now)

    def now(self) -> float:
        """Seconds of the underlying clock, less the stopped time seen so far."""
        self.observe()
        return self._clock() - self.paused

    def start(self) -> ActiveClock:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="active-clock", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            self.observe()

    def __enter__(self) -> ActiveClock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


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

    Only where Python's default SIGINT handler is active or SIGINT is ignored (the main
    thread, no handler of the caller's; a background job of a non-interactive shell
    starts with SIGINT ignored, and ``kill -INT`` should still stop it cleanly): the
    first SIGINT sets the event, the loop stops at the next step boundary and
    checkpoints normally; a second raises ``KeyboardInterrupt`` at once (a checkpoint
    is still attempted).
    """
    pending = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    current = signal.getsignal(signal.SIGINT)
    if not main or (current is not signal.default_int_handler and current != signal.SIG_IGN):
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
