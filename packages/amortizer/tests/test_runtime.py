"""runtime.interruptible: SIGINT and SIGTERM stop long runs, also as background jobs."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, time
    from amorgp.amortizer.runtime import interruptible

    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # like a background job
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            with interruptible():
                os.kill(os.getpid(), sig)
                time.sleep(30)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", sig.name)
    print("restored", signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
          signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interruptible_honours_sigint_ignored_by_the_shell_and_sigterm() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [
        "interrupted SIGINT",
        "interrupted SIGTERM",
        "restored True True",
    ]
