"""The one positive transform of amorgp: softplus with a floor, per parameter kind.

Every positive quantity (kernel variances, lengthscales, periods, offsets, the
rational-quadratic shape and the observation-noise variance) is stored
*unconstrained* as ``raw`` and mapped to its value by

.. math::

    \\theta = \\mathrm{floor}_k + \\mathrm{softplus}(\\mathrm{raw}),
    \\qquad \\mathrm{softplus}(r) = \\log(1 + e^r),

with the inverse ``raw = log(expm1(theta - floor_k))``.  The floors keep kernel
matrices well defined (no zero lengthscale or period) and bound the condition
number from below through the noise.  The network heads, the simulator, the
baselines and the priors all import this module; nobody redefines it.

==============  ==========  ====================================================
kind            floor       why
==============  ==========  ====================================================
``variance``    1e-6        signal variance of a symbol; 1e-6 of a unit-variance target is "off"
``lengthscale`` 1e-4        inputs live in [0, 1]; 1e-4 is far below any point spacing we model
``period``      1e-4        as lengthscale
``offset``      1e-6        LIN's constant c^2
``alpha``       1e-4        RQ shape; tiny alpha is already a heavy-tailed mixture
``noise``       1e-6        observation-noise variance of standardised targets; keeps K + s2 I invertible
==============  ==========  ====================================================

All functions accept numpy arrays, Python floats or torch tensors (differentiable).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from amorgp.kernel_grammar._array import softplus, softplus_inverse

__all__ = ["FLOORS", "ParamKind", "positive", "positive_inverse", "softplus_inverse"]


class ParamKind(StrEnum):
    """Kind of a positive parameter; decides its floor and its transform."""

    VARIANCE = "variance"
    LENGTHSCALE = "lengthscale"
    PERIOD = "period"
    OFFSET = "offset"
    ALPHA = "alpha"
    NOISE = "noise"


FLOORS: dict[ParamKind, float] = {
    ParamKind.VARIANCE: 1e-6,
    ParamKind.LENGTHSCALE: 1e-4,
    ParamKind.PERIOD: 1e-4,
    ParamKind.OFFSET: 1e-6,
    ParamKind.ALPHA: 1e-4,
    ParamKind.NOISE: 1e-6,
}


def positive(raw: Any, kind: ParamKind | str) -> Any:
    """Map an unconstrained value to a positive parameter: ``floor + softplus(raw)``.

    Args:
        raw: unconstrained values (numpy array, float or torch tensor, any shape).
        kind: the parameter kind (decides the floor).

    Returns:
        Values ``> floor`` of the same shape and array type.
    """
    return FLOORS[ParamKind(kind)] + softplus(raw)


def positive_inverse(value: Any, kind: ParamKind | str) -> Any:
    """Inverse of :func:`positive`: ``log(expm1(value - floor))``.

    Raises:
        ValueError: if any ``value <= floor`` (no unconstrained preimage exists).
    """
    floor = FLOORS[ParamKind(kind)]
    shifted = value - floor
    if bool((shifted <= 0).any() if hasattr(shifted, "any") else shifted <= 0):
        raise ValueError(
            f"positive_inverse: every {ParamKind(kind).value} must exceed its floor {floor:g}"
        )
    return softplus_inverse(shifted)
