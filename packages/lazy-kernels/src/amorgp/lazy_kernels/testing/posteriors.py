"""Checks between posteriors: two ways to the same posterior predict alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from amorgp.lazy_kernels.posterior import Posterior

__all__ = ["check_same_predictions"]


def check_same_predictions(
    expected: Posterior,
    actual: Posterior,
    X_star: Tensor,
    *,
    rtol: float,
    atol: float,
    var_rtol: float,
    var_atol: float,
    covariance: bool = False,
) -> tuple[Tensor, Tensor]:
    """``actual`` predicts at ``X_star`` like ``expected``: the means within ``rtol`` and
    ``atol``, the variances (and, with ``covariance``, the joint covariances) within
    ``var_rtol`` and ``var_atol``.  Returns ``actual``'s mean and variance."""
    m1, v1 = expected.predict(X_star)
    m2, v2 = actual.predict(X_star)
    torch.testing.assert_close(m2, m1, rtol=rtol, atol=atol)
    assert v1 is not None
    assert v2 is not None
    torch.testing.assert_close(v2, v1, rtol=var_rtol, atol=var_atol)
    if covariance:
        torch.testing.assert_close(
            actual.covariance(X_star), expected.covariance(X_star), rtol=var_rtol, atol=var_atol
        )
    return m2, v2
