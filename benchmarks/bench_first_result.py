"""How soon does a fresh process have its first result, and how long do the 24 paper
kernels take at n = 500?  Side by side with scikit-learn.

Part 1, fresh processes (``--repeats`` each, default 5; ``--quick``: 2), run interleaved so
that load changes hit every case alike, the median wall time reported:

* ``import torch``: the floor every torch-based library pays;
* the Python API: ``from amorgp.amortizer import Amortizer``, ``from_pretrained()`` and
  one ``infer(X, y, "SE")`` on 100 points; the script also reports the time from the end
  of its imports to the result (the first-result time proper);
* the command line: ``amorgp infer data.csv -k SE`` on the same points;
* the peer: scikit-learn's ``GaussianProcessRegressor`` with ``C * RBF + WhiteKernel``,
  ``n_restarts_optimizer=3``, fitted on the same points in a fresh process (import to
  result, and fit alone).

Part 2, in one warm process: the 24 paper kernels (``paper_evaluation_set``) on 500 points,
a noisy trend plus season (d = 1) and ``sum(sin(x))`` in 6 inputs, with the default
multi-start and with one start (median of ``--repeats`` calls after one warm-up), against
scikit-learn fitting one of them on the series (``C * RBF + C * ExpSineSquared +
WhiteKernel``, 3 restarts).

Writes ``docs/benchmarks/first-result.md``.  Targets: first result within 1.0 s of the
imports, a one-kernel command within 1.5 s, the 24 kernels within 1.0 s.

Usage::

    python benchmarks/bench_first_result.py [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "first-result.md"
PY = sys.executable

API = """
import sys, time
import numpy as np
from amorgp.amortizer import Amortizer
t0 = time.perf_counter()
data = np.load(sys.argv[1])
amz = Amortizer.from_pretrained()
amz.infer(data[:, :1], data[:, 1], "SE")
print(time.perf_counter() - t0)
"""

SKLEARN = """
import sys, time, warnings
import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C, WhiteKernel
t0 = time.perf_counter()
data = np.load(sys.argv[1])
kernel = C(1.0) * RBF(1.0) + WhiteKernel(0.1)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=3,
                             random_state=0).fit(data[:, :1], data[:, 1])
print(time.perf_counter() - t0)
"""


def _series(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n))
    y = 0.3 * x + np.sin(2.0 * np.pi * x / 1.3) + 0.2 * rng.standard_normal(n)
    return x[:, None], y


_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The processes' environment: bytecode is cached (the warm-up run writes it), as in an
installed package, whose ``.pyc`` files pip writes; without the cache every import
compiles its module from source (about 0.3 s more for the command line)."""


def _run(cmd: list[str]) -> tuple[float, float | None]:
    """Wall time of a fresh process and the time it printed last (if any)."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=_ENV)
    wall = time.perf_counter() - t0
    lines = done.stdout.strip().splitlines()
    try:
        inner = float(lines[-1]) if lines else None
    except ValueError:
        inner = None
    return wall, inner


def fresh_processes(
    repeats: int, data: Path, arrays: Path
) -> list[tuple[str, float, float | None]]:
    """The fresh-process cases on the same points: ``data`` as CSV for the command line,
    ``arrays`` as ``.npy`` for the Python scripts (read without a CSV parser)."""
    cases: list[tuple[str, list[str]]] = [
        ("import torch (floor)", [PY, "-c", "import torch"]),
        ("Python API: from_pretrained + infer(SE)", [PY, "-c", API, str(arrays)]),
        ("peer: scikit-learn GPR, 3 restarts", [PY, "-c", SKLEARN, str(arrays)]),
    ]
    script = shutil.which("amorgp")
    cli = [script] if script else [PY, "-m", "amorgp.cli"]
    cases.insert(2, ("amorgp infer data.csv -k SE", [*cli, "infer", str(data), "-k", "SE"]))
    for _, cmd in cases:  # warm the file and bytecode caches (and the network's first read)
        _run(cmd)
    walls: dict[str, list[float]] = {name: [] for name, _ in cases}
    inner: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(repeats):
        for name, cmd in cases:
            w, i = _run(cmd)
            walls[name].append(w)
            if i is not None:
                inner[name].append(i)
    return [
        (
            name,
            statistics.median(walls[name]),
            statistics.median(inner[name]) if inner[name] else None,
        )
        for name, _ in cases
    ]


def paper_kernels(repeats: int) -> dict[str, float]:
    import warnings

    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ExpSineSquared, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    from amorgp.amortizer import Amortizer
    from amorgp.kernel_grammar import paper_evaluation_set

    x, y = _series(500, 1)
    amz = Amortizer.from_pretrained()
    rng = np.random.default_rng(2)
    x6 = rng.uniform(-3.0, 3.0, (500, 6))
    y6 = np.sin(x6).sum(1) + 0.1 * rng.standard_normal(500)
    out: dict[str, float] = {}
    for d, (X, Y) in ((1, (x, y)), (6, (x6, y6))):
        kernels = [t.broadcast(d) for t in paper_evaluation_set(0)]
        with warnings.catch_warnings():  # fits at the noise floor warn: not timed here
            warnings.simplefilter("ignore")
            amz.infer_many(X, Y, kernels[:2])  # warm-up
            for label, kw in (("default multi-start", {}), ("one start", {"starts": 1})):
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    amz.infer_many(X, Y, kernels, **kw)
                    times.append(time.perf_counter() - t0)
                out[f"d = {d}: {label}"] = statistics.median(times)
    kernel = C(1.0) * RBF(1.0) + C(1.0) * ExpSineSquared(1.0, 1.0) + WhiteKernel(0.1)
    times = []
    for _ in range(max(1, repeats // 2)):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            GaussianProcessRegressor(
                kernel, normalize_y=True, n_restarts_optimizer=3, random_state=0
            ).fit(x, y)
        times.append(time.perf_counter() - t0)
    out["peer: scikit-learn, SE + PER alone, 3 restarts"] = statistics.median(times)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 repeats")
    args = ap.parse_args()
    repeats = 2 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        data, arrays = Path(tmp) / "data.csv", Path(tmp) / "data.npy"
        x, y = _series(100, 0)
        np.savetxt(data, np.c_[x, y], delimiter=",", header="x,y", comments="")
        np.save(arrays, np.c_[x, y])
        rows = fresh_processes(repeats, data, arrays)
    kernels = paper_kernels(repeats)
    peer = next(w for name, w, _ in rows if name.startswith("peer"))
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    lines = [
        "# First result and the 24 paper kernels",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, OMP_NUM_THREADS={threads}; median of {repeats} runs per "
        "case, interleaved. Written by `benchmarks/bench_first_result.py` "
        "(`nox -s \"benchmark(name='first_result')\"`).",
        "",
        "## A fresh process",
        "",
        "Wall time of the whole process, and the time from the end of its imports to the "
        "result (`from_pretrained()` and the first `infer`, or scikit-learn's fit), on 100 "
        "points, with compiled bytecode cached (as an installed package has; a warm-up run "
        "of each case writes it). Targets: first result within 1.0 s of the imports; the "
        "command within 1.5 s.",
        "",
        "| case | process wall (s) | after the imports (s) | wall / peer |",
        "|---|---|---|---|",
    ]
    for name, wall, inner in rows:
        after = f"{inner:.3f}" if inner is not None else "-"
        lines.append(f"| {name} | {wall:.3f} | {after} | {wall / peer:.2f} |")
    lines += [
        "",
        "## 24 kernels at n = 500, warm",
        "",
        "`infer_many` on the 24 paper kernels at 500 points: a series (d = 1, trend plus "
        "season plus noise) and `sum(sin(x))` plus noise in 6 inputs (the kernels the same "
        "sum in every input). Target: 1.0 s with the default multi-start.",
        "",
        "| case | time (s) |",
        "|---|---|",
    ]
    for name, value in kernels.items():
        lines.append(f"| {name} | {value:.3f} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
