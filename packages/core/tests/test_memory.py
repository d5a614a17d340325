"""amorgp.core.memory: glibc keeps freed memory for reuse after tune_malloc.

The oracle is the kernel's count of minor page faults (``getrusage``): freed blocks that
the allocator kept are reused without faulting their pages in again."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from amorgp.core.errors import OptionError
from amorgp.core.memory import MALLOC_VARIABLES, tune_malloc, user_chose_malloc

GLIBC = platform.libc_ver()[0] == "glibc"

CYCLES = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    {setup}
    def cycle():
        blocks = [np.ones({size}) for _ in range({count})]  # written
        del blocks
    cycle()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        cycle()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)
PAGES = 4 * 24 * (4 * 2**20) // 4096  # pages written after the first cycle


def _faults(
    setup: str, env: dict[str, str] | None = None, size: int = 2**19, count: int = 24
) -> int:
    """Minor page faults of 4 cycles of ``count`` blocks of ``size`` doubles (24 of 4 MiB:
    96 MiB freed per cycle)."""
    code = CYCLES.format(setup=setup, size=size, count=count)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator")
def test_freed_blocks_are_reused_without_page_faults() -> None:
    tuned = _faults("from amorgp.core.memory import tune_malloc; assert tune_malloc()")
    assert tuned < 0.02 * PAGES
    # the control: glibc's defaults return the freed 96 MiB to the system every cycle
    assert _faults("") > 10 * max(tuned, 100)


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator")
def test_a_refinement_sized_working_set_is_kept() -> None:
    """80 blocks of 2 MiB freed per cycle (160 MiB: the derivative matrices of a kernel with
    73 hyperparameters on 500 points) stay in the heap with the default ``keep``; with a
    trim threshold of 128 MiB (``keep`` as it was) they are returned every cycle."""
    pages = 4 * 80 * (2 * 2**20) // 4096
    setup = "from amorgp.core.memory import tune_malloc; assert tune_malloc({})"
    kept = _faults(setup.format(""), size=2**18, count=80)
    assert kept < 0.02 * pages
    trimmed = _faults(setup.format("keep=2**27"), size=2**18, count=80)
    assert trimmed > 0.5 * pages


def test_tune_malloc_refuses_keep_below_its_threshold() -> None:
    with pytest.raises(OptionError, match="at least its threshold"):
        tune_malloc(2**20, keep=2**19)


def test_tune_malloc_reports_whether_it_applied() -> None:
    assert tune_malloc() is GLIBC


def test_tune_malloc_refuses_a_non_positive_threshold() -> None:
    with pytest.raises(OptionError, match="positive"):
        tune_malloc(0)


def test_user_chose_malloc_reads_glibcs_variables() -> None:
    assert not user_chose_malloc({"PATH": "/bin"})
    for name in MALLOC_VARIABLES:
        assert user_chose_malloc({name: "65536"})
