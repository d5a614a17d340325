"""The C library's allocator: keep freed memory for reuse (glibc only).

Fitting a kernel of several addends to a few hundred points allocates and frees many
kernel-sized temporaries per evaluation (each addend's matrix and its derivatives,
``8 n^2`` bytes each).  glibc's default allocator returns freed memory at the top of its
heap to the system once more than a few MiB are free, and maps every allocation above its
mmap threshold anew, so that the pages of those temporaries are faulted in again at every
evaluation: on a 2-core x86_64 machine the kernel time of those faults was as large as the
fit's own computation (``docs/benchmarks/default-refine.md``).  :func:`tune_malloc` raises
both thresholds, so that the process keeps up to ``keep`` bytes of freed memory (512 MiB)
and reuses it: an evaluation of a kernel with 73 hyperparameters on 500 points holds about
150 MB of derivative matrices at once, which a trim threshold of 128 MiB returned to the
system after every evaluation, to be faulted in again at the next (measured in the
python-api guide, "Memory").

It changes process-wide state, so the library never calls it on its own: the command line
(``amorgp``) calls it at start, Dask workers when they load the network
(:func:`amorgp.amortizer.frontends.dask_groups.worker_amortizer`), and a Python program
may call it once at its start.  Setting glibc's own variables (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``) in the environment does the same before the process starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = [
    "MALLOC_BYTES",
    "MALLOC_KEEP_BYTES",
    "MALLOC_VARIABLES",
    "tune_malloc",
    "user_chose_malloc",
]

MALLOC_BYTES = 64 * 2**20
"""Default mmap threshold of :func:`tune_malloc`: larger allocations are mapped afresh."""

MALLOC_KEEP_BYTES = 512 * 2**20
"""Default trim threshold of :func:`tune_malloc`: freed memory kept for reuse, at most."""

MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
"""glibc's environment variables for the same thresholds: where one is set, the user has
chosen, and the command line leaves the allocator as it is."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def tune_malloc(threshold: int = MALLOC_BYTES, keep: int = MALLOC_KEEP_BYTES) -> bool:
    """Let glibc serve allocations below ``threshold`` bytes from its heap and keep up to
    ``keep`` bytes of freed memory there (``mallopt`` of ``M_MMAP_THRESHOLD`` and
    ``M_TRIM_THRESHOLD``) in this process.

    Returns whether both were set; ``False`` where the C library is not glibc (nothing
    changes).  The resident memory of the process then stays up to ``keep`` bytes above
    what it uses, where it freed that much (module docstring).
    """
    from amorgp.core.errors import OptionError

    if threshold <= 0:
        raise OptionError(f"tune_malloc threshold must be positive bytes, got {threshold}")
    if keep < threshold:
        raise OptionError(
            f"tune_malloc keep ({keep} bytes) must be at least its threshold ({threshold})"
        )
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold))) and bool(
        mallopt(_M_TRIM_THRESHOLD, int(keep))
    )


def user_chose_malloc(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether one of :data:`MALLOC_VARIABLES` is set in ``environ`` (default: this
    process's environment)."""
    env = os.environ if environ is None else environ
    return any(v in env for v in MALLOC_VARIABLES)
