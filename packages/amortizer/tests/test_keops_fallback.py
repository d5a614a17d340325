"""A broken pykeops never takes the amortizer down: the issue's CPU case, where
``Amortizer.from_pretrained(memory_budget=2**24).infer(X, y, "SE")`` at n = 4000 picked KeOps
and died with signal 11.  Run in a child process (a crash there fails the test, not the
session) with a stand-in pykeops that segfaults on its first reduction."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amorgp.lazy_kernels.testing.keops_standin import write_broken_pykeops

SCRIPT = r"""
import sys, torch
from amorgp.amortizer import Amortizer
n, budget = int(sys.argv[1]), float(sys.argv[2])
g = torch.Generator().manual_seed(0)
X = torch.rand(n, 2, generator=g, dtype=torch.float64)
y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
amz = Amortizer.from_pretrained(memory_budget=budget, device="cpu")
r = amz.infer(X, y, "SE", refine=0)
mean, var = r.predict(X[:5])
print(amz.gp_backend(n, 1, graph=False), r.log_marginal_likelihood, *mean.tolist(), *var.tolist())
"""


def _run(tmp_path: Path, n: int, budget: float) -> tuple[str, float, np.ndarray, str]:
    root = write_broken_pykeops(tmp_path / "broken", "segfault")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *sys.path])
    env["AMORGP_KEOPS_PROBE_CACHE"] = str(tmp_path / "probe.json")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(n), str(budget)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"exit status {proc.returncode}: {proc.stderr[-2000:]}"
    fields = proc.stdout.split()
    return fields[0], float(fields[1]), np.array([float(f) for f in fields[2:]]), proc.stderr


def _dense_oracle(n: int, tmp_path: Path) -> np.ndarray:
    """The same inference with a budget large enough for the dense Cholesky backend (no
    KeOps involved): mean and variance at the five points."""
    script = SCRIPT.replace("memory_budget=budget", "memory_budget=2**34")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(n), "0"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    fields = proc.stdout.split()
    assert fields[0] == "cholesky"
    return np.array([float(f) for f in fields[2:]])


@pytest.mark.parametrize(
    ("n", "budget"),
    [(1500, 2.0**20), pytest.param(4000, 2.0**24, marks=pytest.mark.slow)],
)
def test_a_segfaulting_keops_falls_back_to_the_block_backend(
    tmp_path: Path, n: int, budget: float
) -> None:
    backend, lml, pred, stderr = _run(tmp_path, n, budget)
    assert backend == "block"
    assert "KeOps does not work on cpu" in stderr
    assert "SIGSEGV" in stderr
    assert np.isfinite(lml)
    np.testing.assert_allclose(pred, _dense_oracle(n, tmp_path), rtol=1e-4, atol=1e-6)
