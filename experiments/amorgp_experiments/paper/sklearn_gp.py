"""scikit-learn's ``GaussianProcessRegressor`` on the evaluation kernels it can express.

scikit-learn kernels act on all input columns at once, so a dimension-wise structure
is expressible when the data have one input (any sum of products of ``SE``, ``PER``,
``LIN``) or when it is SE-ARD (``SE`` in every dimension: ``C * RBF(ARD)``).  The
symbols map to the grammar's kernels exactly:

* ``SE``: ``s^2 exp(-(x - x')^2 / (2 l^2))`` = ``C * RBF(l)``;
* ``PER``: ``s^2 exp(-sin^2(pi |x - x'| / p) / (2 l^2))`` = ``C * ExpSineSquared(2 l, p)``
  (scikit-learn writes ``exp(-2 sin^2(pi d / p) / l_sk^2)``);
* ``LIN``: ``s^2 x x' + c^2`` = ``C * DotProduct(sigma_0 = c / s)``;

a product of symbols carries one constant factor, the noise is a ``WhiteKernel``.
Inputs are min-max scaled on the training data (the contract of the other methods),
``normalize_y=True``, one L-BFGS-B start (plus ``restarts``).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

__all__ = ["expressible", "sklearn_gpr", "sklearn_kernel"]

_SYMBOLS = ("SE", "PER", "LIN")


def _terms(kernel: str) -> list[list[str]] | None:
    """The template's addends as lists of base symbols, or ``None`` if not a plain sum."""
    terms = [[f.strip() for f in t.split("*")] for t in kernel.split("+")]
    if any(not f or f not in _SYMBOLS for t in terms for f in t):
        return None
    return terms


def expressible(kernel: str, d: int) -> bool:
    """Whether the evaluation template ``kernel`` on ``d`` inputs has a scikit-learn kernel."""
    return kernel.strip() == "SE" or (d == 1 and _terms(kernel) is not None)


def sklearn_kernel(kernel: str, d: int) -> Any:
    """The scikit-learn kernel of template ``kernel`` on ``d`` inputs, noise included.

    Raises:
        ValueError: the structure is not expressible (see :func:`expressible`).
    """
    from sklearn.gaussian_process.kernels import (
        RBF,
        ConstantKernel,
        DotProduct,
        ExpSineSquared,
        WhiteKernel,
    )

    if not expressible(kernel, d):
        raise ValueError(f"{kernel!r} on {d} inputs has no scikit-learn kernel")
    base = {
        "SE": lambda: RBF(length_scale=np.ones(d) if d > 1 else 1.0),
        "PER": lambda: ExpSineSquared(length_scale=2.0, periodicity=1.0),
        "LIN": lambda: DotProduct(sigma_0=1.0),
    }
    total = None
    for term in _terms(kernel) or [["SE"]]:
        k = ConstantKernel(1.0)
        for symbol in term:
            k = k * base[symbol]()
        total = k if total is None else total + k
    return total + WhiteKernel(0.1)


def sklearn_gpr(
    Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, kernel: str, restarts: int = 0
) -> tuple[np.ndarray, np.ndarray, float]:
    """Fit and predict with scikit-learn's GPR; timed.

    Returns:
        Predictive mean and variance (noise included) at ``Xte`` and the seconds taken.
    """
    from sklearn.gaussian_process import GaussianProcessRegressor

    t0 = time.perf_counter()
    lo, span = Xtr.min(0), np.ptp(Xtr, axis=0)
    span = np.where(span > 0, span, 1.0)
    gpr = GaussianProcessRegressor(
        kernel=sklearn_kernel(kernel, Xtr.shape[1]),
        normalize_y=True,
        n_restarts_optimizer=restarts,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpr.fit((Xtr - lo) / span, ytr)
        mean, std = gpr.predict((Xte - lo) / span, return_std=True)
    return mean, std**2, time.perf_counter() - t0
