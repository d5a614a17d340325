"""Checks of the options of :class:`~amorgp.amortizer.Amortizer` and the estimator, made
before any work: a device torch cannot use here, a fractional ``encoder_points``, a
``seed`` beyond 64 bits, a memory budget or ``gp_options`` value out of its domain are
each one :class:`~amorgp.core.errors.OptionError` naming the option.  The noise floor,
fixed hyperparameters and bounds of inference are checked by
:func:`~amorgp.amortizer.stages.constraints.check_constraints` (re-exported here)."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch

from amorgp.amortizer.stages.constraints import check_constraints, check_noise_floor
from amorgp.core.errors import OptionError
from amorgp.lazy_kernels.block import check_memory_budget
from amorgp.lazy_kernels.solvers import check_solver_options

__all__ = [
    "GP_OPTIONS",
    "MAX_SEED",
    "check_constraints",
    "check_device",
    "check_inference_options",
    "check_noise_floor",
    "check_seed",
]

GP_OPTIONS = ("cg_tol", "max_cg_iter", "precond_rank", "n_probes")
"""The keys ``gp_options`` may hold."""
MAX_SEED = 2**63 - 1
"""Largest seed (torch's generators take 64-bit seeds)."""


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device this machine can use: ``cpu``, an available ``cuda``
    device or ``mps``.

    Raises:
        OptionError: an unknown device text, another device type (``meta``...), or a
            CUDA or MPS device this machine does not have.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise OptionError(f"device {device!r} is not a torch device: {err}") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise OptionError(f"device {str(dev)!r}: use cpu, cuda or mps")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"device {str(dev)!r}: no CUDA device is available; use cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise OptionError(
                f"device {str(dev)!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise OptionError(f"device {str(dev)!r}: no MPS device is available; use cpu")
    return dev


def _integer(value: object) -> int | None:
    """``value`` as an ``int`` if it is an integer (numpy's too), not a bool; else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` as an integer in ``[0, MAX_SEED]``.

    Raises:
        OptionError: not an integer (a float, a bool) or out of range.
    """
    value = _integer(seed)
    if value is None:
        raise OptionError(f"{name} must be an integer, got {seed!r}")
    if not 0 <= value <= MAX_SEED:
        raise OptionError(f"{name} must lie in [0, {MAX_SEED}], got {value}")
    return value


def check_inference_options(
    *,
    device: str | torch.device,
    encoder_points: object,
    seed: object,
    memory_budget: object,
    gp_options: Mapping[str, Any] | None,
) -> None:
    """Check the options of :class:`~amorgp.amortizer.Amortizer` (see module doc).

    Raises:
        OptionError: naming the first option out of its domain.
    """
    check_device(device)
    if encoder_points is not None:
        points = _integer(encoder_points)
        if points is None or points < 1:
            raise OptionError(f"encoder_points must be an integer >= 1, got {encoder_points!r}")
    check_seed(seed)
    check_memory_budget(memory_budget)
    options = dict(gp_options or {})
    unknown = sorted(set(options) - set(GP_OPTIONS))
    if unknown:
        raise OptionError(f"unknown gp_options {unknown}; known: {', '.join(GP_OPTIONS)}")
    check_solver_options(**options)
