"""runtime.interruptible and deferred_sigint: SIGINT and SIGTERM stop long runs, also as
background jobs."""

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
    from amorgp.training.runtime import ActiveClock, interruptible

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
          signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)

    # the parent stops this process with SIGSTOP for STOPPED seconds during the sleep
    with ActiveClock(tick=0.05, slack=0.5) as clock:
        a, w = clock.now(), time.monotonic()
        print("ready", flush=True)
        time.sleep(SLEEP)
        print(round(clock.now() - a, 3), round(time.monotonic() - w, 3), flush=True)
    """
)
SLEEP, STOPPED = 2.8, 1.5  # the stop starts 0.3 s into the sleep: 1 s to spare


@pytest.fixture(scope="module")
def child() -> dict[str, object]:
    """One child process (started with SIGINT ignored, as a shell starts a background
    job) for both signal tests: its ``interruptible`` lines, then the active and wall
    seconds of an ``ActiveClock`` across a sleep that this process pauses with SIGSTOP."""
    code = CHILD.replace("SLEEP", repr(SLEEP))
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        ready = proc.stdout.readline().strip()
        if ready == "ready":
            time.sleep(0.3)
            proc.send_signal(signal.SIGSTOP)
            time.sleep(STOPPED)
            proc.send_signal(signal.SIGCONT)
        clocks = proc.stdout.readline().split()
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    return {"lines": lines, "ready": ready, "clocks": clocks, "rc": proc.returncode, "err": stderr}


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interruptible_honours_sigint_ignored_by_the_shell_and_sigterm(
    child: dict[str, object],
) -> None:
    assert child["rc"] == 0, child["err"]
    assert child["lines"] == [
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
def test_active_clock_does_not_count_a_sigstop_pause(child: dict[str, object]) -> None:
    """A real process stopped for 1.5 s: its active clock advances by the running time only."""
    assert child["rc"] == 0, child["err"]
    assert child["ready"] == "ready"
    active, wall = (float(v) for v in child["clocks"])  # type: ignore[attr-defined]
    assert wall >= SLEEP
    assert active == pytest.approx(wall - STOPPED, abs=0.6)


DEFERRED = textwrap.dedent(
    """
    import os, signal
    from amorgp.training.runtime import deferred_sigint

    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # like a background job
    with deferred_sigint() as pending:
        os.kill(os.getpid(), signal.SIGINT)
        print("requested", pending.wait(10), flush=True)
    print("restored", signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_deferred_sigint_stops_a_background_job_after_its_step() -> None:
    """``kill -INT`` of a training run started as a background job (SIGINT ignored)
    requests the stop at the next step boundary, and the ignored handler comes back."""
    out = subprocess.run(
        [sys.executable, "-c", DEFERRED],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["requested True", "restored True"]
