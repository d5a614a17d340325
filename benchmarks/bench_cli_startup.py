"""How long do ``amorgp --help`` and ``amorgp --version`` take?  Side by side with the
imports the command line paid for before it imported on demand.

Each command runs as a fresh process ``--repeats`` times (default 10; ``--quick``: 3),
in turn, and the median wall time is reported with its ratio to ``import torch,
sklearn`` (what ``amorgp --help`` imported before parsing its arguments) and to an
empty interpreter (the floor: ``python -c pass``).  Writes
``docs/benchmarks/cli-startup.md``.  The target is ``--help`` and ``--version`` in at
most 0.5 s.

Usage::

    python benchmarks/bench_cli_startup.py [--repeats 10] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "cli-startup.md"

PY = sys.executable
CASES: list[tuple[str, list[str]]] = [
    ("python -c pass (floor)", [PY, "-c", "pass"]),
    ("python -m amorgp.cli --help", [PY, "-m", "amorgp.cli", "--help"]),
    ("python -m amorgp.cli --version", [PY, "-m", "amorgp.cli", "--version"]),
    ("import amorgp.cli", [PY, "-c", "import amorgp.cli"]),
    ("peer: import torch, sklearn", [PY, "-c", "import torch, sklearn"]),
]
PEER = "peer: import torch, sklearn"
FLOOR = "python -c pass (floor)"


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="3 repeats")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    cases = list(CASES)
    script = shutil.which("amorgp")
    if script:
        cases.insert(1, ("amorgp --help (console script)", [script, "--help"]))
        cases.insert(2, ("amorgp --version (console script)", [script, "--version"]))
    env_note = f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    for _, cmd in cases:  # warm the file cache
        _time(cmd)
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(repeats):  # interleaved: load changes hit every case alike
        for name, cmd in cases:
            times[name].append(_time(cmd))
    median = {name: statistics.median(v) for name, v in times.items()}
    lines = [
        "# Command-line start-up",
        "",
        f"Median wall time of {repeats} fresh processes per case, run interleaved in one "
        f"session; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {env_note}. Written by "
        "`benchmarks/bench_cli_startup.py` (`nox -s \"benchmark(name='cli_startup')\"`).",
        "",
        "The command line imports a command's module only when the command runs (or its "
        "`--help` is asked), so `amorgp --help` and `amorgp --version` import neither torch "
        "nor scikit-learn; before, `--help` paid the peer row's imports. Target: at most 0.5 s.",
        "",
        "| case | median (s) | min (s) | / peer | / floor |",
        "|---|---|---|---|---|",
    ]
    for name, _ in cases:
        lines.append(
            f"| {name} | {median[name]:.3f} | {min(times[name]):.3f} | "
            f"{median[name] / median[PEER]:.2f} | {median[name] / median[FLOOR]:.1f} |"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
