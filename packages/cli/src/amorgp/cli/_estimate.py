"""The command line's rough time estimate: each stage's cost from a few matrix kernels
timed on this machine, scaled by the cube of the size (:func:`announce`, said before
long work)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from amorgp.cli._common import Refine

__all__ = ["announce", "cubic_work", "estimate_seconds"]

log = logging.getLogger("amorgp.cli")

_PROBE = 512
"""Size of the matrices timed to scale the estimate from (a few tens of ms)."""


def _unit_times() -> dict[str, float]:
    """Seconds of one float64 Cholesky, one ``eigh`` and one matrix product of size
    :data:`_PROBE` on this machine with this thread setting (each timed once, after a
    warm-up), the units :func:`estimate_seconds` scales by ``(n / 512)^3``."""
    import torch

    g = torch.Generator().manual_seed(0)
    a = torch.randn(_PROBE, _PROBE, dtype=torch.float64, generator=g)
    spd = a @ a.T + _PROBE * torch.eye(_PROBE, dtype=torch.float64)
    out = {}
    for name, op in (
        ("cholesky", torch.linalg.cholesky),
        ("eigh", torch.linalg.eigh),
        ("matmul", lambda m: m @ m),
    ):
        op(spd)  # warm-up
        t0 = time.perf_counter()
        op(spd)
        out[name] = max(time.perf_counter() - t0, 1e-6)
    return out


def estimate_seconds(
    n: int,
    terms: Sequence[int],
    backend: str,
    calibrate: bool,
    refine: Refine,
    units: dict[str, float],
    refine_points: int | None = None,
) -> dict[str, float]:
    """A rough time estimate of each stage (seconds), from the measured ``units`` (see
    :func:`_unit_times`) scaled by the cube of the size: the calibration's ``eigh`` per
    kernel on at most ``calibrate.MAX_POINTS`` points, the posterior (a Cholesky per
    kernel; CG: about 30 matrix-vector products per addend, each a twentieth of a
    product's work per point pair), and the refinement (``refine`` L-BFGS iterations of
    about 2 evaluations, each a Cholesky and an inverse, 3 Choleskys; ``auto``: at least
    20 iterations; on ``refine_points`` points where the default refines on a subset)."""
    from amorgp.amortizer.stages.calibrate import MAX_POINTS

    k = len(terms)
    scale = (n / _PROBE) ** 3
    out = {}
    if calibrate:
        out["calibration"] = k * units["eigh"] * (min(n, MAX_POINTS) / _PROBE) ** 3
    from amorgp.lazy_kernels import CholeskySolver, solver_type

    if issubclass(solver_type(backend), CholeskySolver):
        out["posterior"] = k * units["cholesky"] * scale
    else:  # one product ~ n^3 flops; one kernel mat-vec ~ 20 n^2 per addend
        per_pair = units["matmul"] / _PROBE**3
        out["posterior"] = sum(30 * 20 * t for t in terms) * n**2 * per_pair
    from amorgp.amortizer.stages.refine import typical_iterations

    steps = typical_iterations(refine)
    if steps:
        on = (min(n, refine_points) / _PROBE) ** 3 if refine_points else scale
        out["refinement"] = steps * k * 2 * 3 * units["cholesky"] * on
    return out


def announce(
    n: int, d: int, terms: list[int], backend: str, refine: Refine, calibrate: bool
) -> None:
    """Say which backend runs and, where the work takes seconds, roughly how long."""
    from amorgp.amortizer.stages.refine import DEFAULT_POINTS, SUBSET_POINTS

    # there the default refines on a subset (float64; the estimate does not know the dtype)
    subset = SUBSET_POINTS if refine is None and n > DEFAULT_POINTS else None
    log.info(
        "working on n = %d points, d = %d, %d kernel(s) with backend %s",
        n,
        d,
        len(terms),
        backend,
    )
    if n < LARGE_N and cubic_work(n, terms, refine) < ESTIMATE_WORK:
        return
    parts = estimate_seconds(n, terms, backend, calibrate, refine, _unit_times(), subset)
    total = sum(parts.values())
    detail = ", ".join(f"{k} ~{_duration(v)}" for k, v in parts.items())
    if n < LARGE_N and total < NOTE_SECONDS:
        log.info("rough time estimate: %s (%s)", _duration(total), detail)
        return
    click.echo(
        f"Note: n = {n} points, {len(terms)} kernel(s), backend {backend}: roughly "
        f"{_duration(total)} ({detail}; a rough estimate from this machine's speed)",
        err=True,
    )


LARGE_N = 2000
"""From this many points on, the commands say the backend and a time estimate on stderr
(without ``-v``)."""
ESTIMATE_WORK = 200.0
"""Below :data:`LARGE_N`, the work (:func:`cubic_work`) from which the time is estimated
(many kernels, refinement: a 24-kernel ``--refine 5`` on 1,000 points is some 5,500)."""
NOTE_SECONDS = 5.0
"""Below :data:`LARGE_N`, an estimate of at least this many seconds is said on stderr."""


def cubic_work(n: int, terms: Sequence[int], refine: Refine) -> float:
    """The cubic work of a call in units of one ``512 x 512`` Cholesky, without timing:
    per kernel a posterior and a calibration, and ``6`` factorisations per refinement
    iteration (``auto``: :func:`amorgp.amortizer.stages.refine.typical_iterations`)."""
    from amorgp.amortizer.stages.refine import typical_iterations

    steps = typical_iterations(refine)
    return len(terms) * (n / _PROBE) ** 3 * (2 + 6 * steps)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "<1 s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
