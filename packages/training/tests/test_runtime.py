"""runtime.interruptible: SIGINT and SIGTERM stop long runs, also as background jobs."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, time
    from amorgp.training.runtime import interruptible

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


def test_active_clock_leaves_out_gaps_longer_than_a_tick_plus_slack() -> None:
    """Closed form on a scripted clock: only the long gap (a stop) is left out."""
    from amorgp.training.runtime import ActiveClock

    t = [100.0]
    clock = ActiveClock(tick=0.5, slack=2.0, clock=lambda: t[0])
    for now in (100.5, 101.0, 103.4):  # 2.4 s < tick + slack: a slow tick, not a stop
        clock.observe(now)
    assert clock.paused == 0.0
    clock.observe(163.4)  # 60 s without a tick: stopped
    assert clock.paused == pytest.approx(59.5)
    t[0] = 164.0
    assert clock.now() == pytest.approx(164.0 - 59.5)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_active_clock_does_not_count_a_sigstop_pause() -> None:
    """A real process stopped for 3 s: its active clock advances by the running time only."""
    code = textwrap.dedent(
        """
        import time
        from amorgp.training.runtime import ActiveClock
        with ActiveClock(tick=0.05, slack=0.5) as clock:
            a, w = clock.now(), time.monotonic()
            print("ready", flush=True)
            time.sleep(4.5)
            print(round(clock.now() - a, 3), round(time.monotonic() - w, 3), flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(3.0)
    proc.send_signal(signal.SIGCONT)
    active, wall = (float(v) for v in proc.stdout.readline().split())
    assert proc.wait(timeout=30) == 0
    assert wall >= 4.5
    assert active == pytest.approx(wall - 3.0, abs=0.6)
