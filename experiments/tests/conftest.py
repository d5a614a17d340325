"""Shared fixtures of the experiments' tests; makes ``amorgp_experiments`` importable from
the repository (here and in the subprocesses the tests start) if it is not installed."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1]

_spec = importlib.util.find_spec("amorgp_experiments")
if _spec is None or EXPERIMENTS in Path(_spec.origin or "").resolve().parents:
    # not installed, or found through the working directory: reachable from anywhere
    if _spec is None:
        sys.path.insert(0, str(EXPERIMENTS))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(EXPERIMENTS), os.environ.get("PYTHONPATH")) if p
    )

from amorgp.amortizer import testing  # noqa: E402


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`amorgp.amortizer.testing.tiny_checkpoint`, one a session."""
    return testing.tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))
