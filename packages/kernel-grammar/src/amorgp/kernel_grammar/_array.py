"""Tiny array-namespace dispatch so the math here runs on numpy and torch alike.

kernel-grammar does not depend on torch; torch is imported lazily, only when a
torch tensor is passed in (so it is necessarily installed).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def namespace(x: Any) -> ModuleType:
    """Return ``torch`` for torch tensors and ``numpy`` otherwise."""
    if type(x).__module__.startswith("torch"):
        import torch

        return torch
    import numpy

    return numpy


def softplus(x: Any) -> Any:
    """Numerically stable ``log(1 + exp(x))`` for numpy arrays or torch tensors."""
    xp = namespace(x)
    if xp.__name__ == "torch":
        return xp.nn.functional.softplus(x)
    x = xp.asarray(x, dtype=float)
    return xp.logaddexp(0.0, x)


def softplus_inverse(y: Any) -> Any:
    """Inverse of :func:`softplus`, ``log(expm1(y))``, stable for large and small ``y > 0``."""
    xp = namespace(y)
    if xp.__name__ != "torch":
        y = xp.asarray(y, dtype=float)
    # log(expm1(y)) = y + log(1 - exp(-y)) = y + log(-expm1(-y))
    return y + xp.log(-xp.expm1(-y))
